"""The HTTP API against a real ``workunits serve --http`` process, with httpx."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import eventually
from tests.http.server import Served

PROBLEM = "application/problem+json"


def _submit(api: httpx.Client, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return api.post("/v1/units", json=body, headers=headers)


def _result(api: httpx.Client, work_id: str, wait: float = 20) -> httpx.Response:
    return api.get(f"/v1/units/{work_id}/result", params={"wait": wait})


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(event, id, data) of each event of a text/event-stream."""
    event, event_id, data = "message", "", ""
    for line in lines:
        if not line:
            if data:
                yield event, event_id, json.loads(data)
            event, data = "message", ""
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()


# -- security --------------------------------------------------------------------------


def test_every_endpoint_but_healthz_needs_the_token(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=10) as anon:
        assert anon.get("/healthz").status_code == 200
        for path in ("/v1/units", "/metrics", "/openapi.json", "/", "/v1/notifications"):
            r = anon.get(path)
            assert r.status_code == 401, path
            assert r.headers["content-type"] == PROBLEM
        assert anon.post("/v1/units", json={"kind": "shell", "command": "true"}).status_code == 401
        wrong = {"Authorization": "Bearer not-the-token"}
        assert anon.get("/v1/units", headers=wrong).status_code == 401


def test_forged_origin_and_foreign_host_are_refused(api: httpx.Client) -> None:
    r = api.post(
        "/v1/units",
        json={"kind": "shell", "command": "true"},
        headers={"Origin": "http://evil.test"},
    )
    assert r.status_code == 403
    assert "Origin" in r.json()["detail"]
    # DNS rebinding: the right port reached under another name.
    assert api.get("/v1/units", headers={"Host": "evil.test:80"}).status_code == 421


def test_browser_token_becomes_a_strict_httponly_cookie(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=10) as browser:
        r = browser.get("/", params={"token": served.token})
        assert r.status_code == 303
        assert r.headers["location"] == "/"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert browser.get("/").status_code == 200  # the cookie now authenticates
        # A state-changing request with the cookie must carry this server's Origin.
        body = {"kind": "shell", "command": "true"}
        assert browser.post("/v1/units", json=body).status_code == 403
        r = browser.post("/v1/units", json=body, headers={"Origin": served.url})
        assert r.status_code == 201
        assert browser.get("/", params={"token": "wrong"}).status_code == 401


def test_every_response_refuses_framing_and_carries_a_content_security_policy(
    served: Served, api: httpx.Client
) -> None:
    """A page elsewhere cannot frame the web view and take its clicks (clickjacking)."""
    with httpx.Client(base_url=served.url, timeout=10) as anon:
        responses = [
            api.get("/"),
            api.get("/static/app.js"),
            api.get("/v1/units"),
            anon.get("/healthz"),
            anon.get("/v1/units"),  # a refusal too
            api.get("/v1/units", headers={"Host": "evil.test"}),
        ]
    for r in responses:
        assert r.headers["x-frame-options"] == "DENY", r.url
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
        policy = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy
        assert "default-src 'self'" in policy
        assert "unsafe-inline" not in policy
    docs = api.get("/docs")
    assert docs.status_code == 200
    assert "frame-ancestors 'none'" in docs.headers["content-security-policy"]
    assert docs.headers["x-frame-options"] == "DENY"


def test_the_login_cookie_is_only_for_this_servers_own_page(served: Served) -> None:
    """Another page of the site (another port) cannot use it, nor claim a notice with it."""
    with httpx.Client(base_url=served.url, timeout=10) as browser:
        browser.get("/", params={"token": served.token})  # the cookie
        own = {"Sec-Fetch-Site": "same-origin"}
        assert browser.get("/v1/units", headers=own).status_code == 200
        assert browser.get("/", headers={"Sec-Fetch-Site": "none"}).status_code == 200  # typed in
        for site in ("same-site", "cross-site"):
            r = browser.get("/v1/units", headers={"Sec-Fetch-Site": site})
            assert r.status_code == 403, site
            assert "login cookie" in r.json()["detail"]
        # <img src=".../v1/notifications?lease=600">: a GET that would claim a notice.
        for headers in ({}, own, {"Sec-Fetch-Site": "same-site"}):
            r = browser.get("/v1/notifications", params={"lease": 600}, headers=headers)
            assert r.status_code == 403, headers
    with httpx.Client(base_url=served.url, headers=served.auth, timeout=10) as api:
        nobody = {"parent": "bzzzzzzzz"}  # whose notices none are: nothing is taken here
        # The bearer token reaches notices (an unknown parent is 404, as everywhere).
        assert api.get("/v1/notifications", params=nobody).status_code == 404


def test_each_server_on_a_host_has_its_own_login_cookie(
    served: Served, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A browser sends a host's cookies to every port: logins must not clash or leak."""
    other = Served(tmp_path_factory.mktemp("other") / "state")
    try:
        with httpx.Client(timeout=10) as browser:  # one cookie jar, as a browser has
            for server in (served, other):
                r = browser.get(f"{server.url}/", params={"token": server.token})
                name, _, rest = r.headers["set-cookie"].partition("=")
                assert name == f"workunits_token_{server.url.rsplit(':', 1)[1]}"
                assert server.token not in rest  # the token never leaves for another port
            for server in (served, other):  # logging into the second kept the first
                assert browser.get(f"{server.url}/v1/units").status_code == 200
    finally:
        other.stop()


def test_bodies_are_limited_and_validated(api: httpx.Client) -> None:
    r = api.post(
        "/v1/units", content=b"x" * (2 << 20), headers={"content-type": "application/json"}
    )
    assert r.status_code == 413
    r = _submit(api, {"kind": "shell", "argv": ["true"], "command": "true"})
    assert r.status_code == 422
    assert r.headers["content-type"] == PROBLEM
    assert "exactly one of argv" in r.json()["detail"]
    assert _submit(api, {"kind": "nope"}).status_code == 422
    broken = b'{"kind": "shell", "command": tru}'
    r = api.post("/v1/units", content=broken, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("the request body is not valid JSON (")
    assert "at character 30" in r.json()["detail"]
    assert _submit(api, {"kind": "shell", "command": "true", "timeout": -1}).status_code == 422


@pytest.mark.parametrize(
    ("args", "shown"),
    [(b"[1e400, 1]", "inf is not finite"), (b"[18446744073709551617, 1]", "beyond 64 bits")],
)
def test_arguments_json_cannot_bring_back_equal_are_refused_by_name(
    api: httpx.Client, args: bytes, shown: str
) -> None:
    """Not pickled with the callable as the number Python parsed them into."""
    params: dict[str, str | int] = {"kind": "agent", "limit": 500}
    before = api.get("/v1/units", params=params).json()["items"]
    body = b'{"kind": "agent", "target": "tests.http.units:add", "args": ' + args + b"}"
    r = api.post("/v1/units", content=body, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["title"]) == (400, "SpecError")
    assert "$['args'][0]" in r.json()["detail"]
    assert shown in r.json()["detail"]
    assert api.get("/v1/units", params=params).json()["items"] == before  # nothing submitted


def test_openapi_and_docs_come_from_the_models(api: httpx.Client) -> None:
    schema = api.get("/openapi.json").json()
    assert "/v1/units/{work_id}/events" in schema["paths"]
    assert "ShellSubmit" in schema["components"]["schemas"]
    assert api.get("/docs").status_code == 200


# -- units -----------------------------------------------------------------------------


def test_submit_shell_by_argv_and_by_command(api: httpx.Client) -> None:
    r = _submit(api, {"kind": "shell", "argv": ["echo", "argv"], "description": "by argv"})
    assert r.status_code == 201
    unit = r.json()
    assert r.headers["location"] == f"/v1/units/{unit['id']}"
    assert unit["kind"] == "shell"
    assert unit["description"] == "by argv"
    r = _submit(api, {"kind": "shell", "command": "echo $((20 + 22))"})
    done = _result(api, r.json()["id"])
    assert done.status_code == 200
    assert done.json()["has_value"] is False
    assert done.json()["unit"]["exit_code"] == 0
    out = api.get(f"/v1/units/{r.json()['id']}/output")
    assert out.content == b"42\n"
    assert out.headers["x-next-offset"] == "3"
    tail = api.get(f"/v1/units/{r.json()['id']}/output", params={"offset": 1})
    assert tail.content == b"2\n"


def test_a_unit_shows_its_sandbox(api: httpx.Client) -> None:
    """Every unit that runs a process here says what it runs under (invariant 15)."""
    r = _submit(api, {"kind": "shell", "argv": ["true"]})
    unit = _result(api, r.json()["id"]).json()["unit"]
    assert unit["sandbox"]["policy"] == {}  # the default protection
    assert isinstance(unit["sandbox"]["not_enforced"], list)
    assert api.get(f"/v1/units/{unit['id']}").json()["sandbox"] == unit["sandbox"]


def test_idempotency_key(api: httpx.Client) -> None:
    body = {"kind": "shell", "command": "echo once"}
    first = _submit(api, body, key="job-1")
    again = _submit(api, body, key="job-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    other = _submit(api, {"kind": "shell", "command": "echo twice"}, key="job-1")
    assert other.status_code == 409
    assert other.json()["title"] == "IdempotencyConflict"


def test_get_malformed_unknown(api: httpx.Client) -> None:
    r = api.get("/v1/units/not-an-id")
    assert (r.status_code, r.json()["title"]) == (400, "InvalidWorkId")
    r = api.get("/v1/units/b00000000")
    assert (r.status_code, r.json()["title"]) == (404, "UnknownWork")
    assert r.headers["content-type"] == PROBLEM


def test_list_filters_and_cursor(api: httpx.Client) -> None:
    ids = [_submit(api, {"kind": "shell", "command": "true"}).json()["id"] for _ in range(3)]
    seen: list[str] = []
    after = None
    for _ in range(100):  # bounded: pages of two
        params: dict[str, Any] = {"kind": "shell", "limit": 2}
        if after:
            params["after"] = after
        page = api.get("/v1/units", params=params).json()
        seen += [u["id"] for u in page["items"]]
        after = page["next"]
        if after is None:
            break
    assert len(seen) == len(set(seen))
    assert set(ids) <= set(seen)
    assert api.get("/v1/units", params={"kind": "agent"}).json()["items"] == [] or all(
        u["kind"] == "agent" for u in api.get("/v1/units", params={"kind": "agent"}).json()["items"]
    )
    bad = api.get("/v1/units", params={"status": "sleepy"})
    assert bad.status_code == 422  # as every other parameter that does not validate


def test_list_newest_first_pages_back_through_older_units(api: httpx.Client) -> None:
    """``order=newest``: a live view's first page holds the newest units, whatever the count."""
    oldest = api.get("/v1/units", params={"limit": 1000}).json()["items"]
    ids = [_submit(api, {"kind": "shell", "command": "true"}).json()["id"] for _ in range(3)]
    first = api.get("/v1/units", params={"order": "newest", "limit": 2}).json()
    assert [u["id"] for u in first["items"]] == ids[::-1][:2]
    second = api.get(
        "/v1/units", params={"order": "newest", "limit": 2, "after": first["next"]}
    ).json()
    assert second["items"][0]["id"] == ids[0]
    walked: list[str] = []
    after = None
    for _ in range(1000):  # bounded: pages of three
        params: dict[str, Any] = {"order": "newest", "limit": 3}
        if after:
            params["after"] = after
        page = api.get("/v1/units", params=params).json()
        walked += [u["id"] for u in page["items"]]
        after = page["next"]
        if after is None:
            break
    assert walked == ids[::-1] + [u["id"] for u in oldest][::-1]
    assert api.get("/v1/units", params={"order": "sideways"}).status_code == 422


def test_agent_result_value_and_failure(api: httpx.Client) -> None:
    r = _submit(api, {"kind": "agent", "target": "tests.http.units:add", "args": [2, 3]})
    assert r.status_code == 201
    done = _result(api, r.json()["id"])
    assert done.status_code == 200
    assert done.json()["value"] == 5
    r = _submit(
        api, {"kind": "agent", "target": "tests.http.units:boom", "kwargs": {"message": "no!"}}
    )
    failed = _result(api, r.json()["id"])
    assert failed.status_code == 409
    problem = failed.json()
    assert problem["title"] == "WorkFailed"
    assert "no!" in problem["detail"]
    assert problem["unit"]["status"] == "failed"
    assert "no!" in problem["unit"]["cause"]
    r = _submit(api, {"kind": "workflow", "target": "tests.http.units:add", "args": [1, 1]})
    assert _result(api, r.json()["id"]).json()["value"] == 2
    r = _submit(api, {"kind": "agent", "target": "tests.http.nowhere:fn"})
    assert (r.status_code, r.json()["title"]) == (400, "SpecError")


def test_result_202_while_running_then_cancel_and_kill(api: httpx.Client) -> None:
    unit = _submit(api, {"kind": "shell", "command": "sleep 30"}).json()
    r = api.get(f"/v1/units/{unit['id']}/result")
    assert r.status_code == 202
    assert r.headers["retry-after"] == "1"
    started = time.monotonic()
    r = api.get(f"/v1/units/{unit['id']}/result", params={"wait": 0.3})
    assert r.status_code == 202
    assert time.monotonic() - started >= 0.29  # it long-polled
    r = api.post(f"/v1/units/{unit['id']}/cancel", json={"grace": 0.5})
    assert r.status_code == 202
    assert r.json()["changed"] is True
    ended = _result(api, unit["id"])
    assert (ended.status_code, ended.json()["title"]) == (409, "WorkKilled")
    assert ended.json()["unit"]["reason"] == "cancelled"
    again = api.post(f"/v1/units/{unit['id']}/kill")
    assert again.status_code == 202
    assert again.json() == {"changed": False, "status": "killed"}
    other = _submit(api, {"kind": "shell", "command": "sleep 30"}).json()
    killed = api.post(f"/v1/units/{other['id']}/kill")
    assert killed.json()["changed"] is True
    assert _result(api, other["id"]).json()["unit"]["reason"] == "killed"


def test_retain_leases(api: httpx.Client) -> None:
    unit = _submit(api, {"kind": "shell", "command": "true"}).json()
    one = api.post(f"/v1/units/{unit['id']}/retain", json={"lease": 30})
    two = api.post(f"/v1/units/{unit['id']}/retain")
    assert (one.status_code, two.status_code) == (201, 201)
    assert one.json()["lease_id"] != two.json()["lease_id"]
    where = one.headers["location"]
    assert where == f"/v1/units/{unit['id']}/retain/{one.json()['lease_id']}"
    assert api.put(where, json={"lease": 10}).status_code == 200
    # A lease is named under its own unit only: another unit's path does not reach it.
    other = _submit(api, {"kind": "shell", "command": "true"}).json()["id"]
    elsewhere = f"/v1/units/{other}/retain/{one.json()['lease_id']}"
    assert api.put(elsewhere, json={"lease": 10}).status_code == 404
    assert api.delete(elsewhere).status_code == 404
    assert api.delete(where).status_code == 204
    assert api.delete(where).status_code == 404
    assert api.put(where).status_code == 404
    assert api.delete(two.headers["location"]).status_code == 204
    assert api.post("/v1/units/b00000000/retain").status_code == 404


def test_signals_reach_a_waiting_unit_and_refuse_an_ended_one(api: httpx.Client) -> None:
    unit = _submit(
        api, {"kind": "agent", "target": "tests.http.units:waiter", "args": ["approve"]}
    ).json()
    sent = api.post(f"/v1/units/{unit['id']}/signals", json={"name": "approve", "value": [1, 2]})
    assert sent.status_code == 202
    assert sent.json() == {"delivered": True}
    assert _result(api, unit["id"]).json()["value"] == [1, 2]
    late = api.post(f"/v1/units/{unit['id']}/signals", json={"name": "approve"})
    assert (late.status_code, late.json()["title"]) == (409, "WorkEnded")
    assert late.json()["unit"]["status"] == "completed"
    unknown = api.post("/v1/units/a00000000/signals", json={"name": "approve"})
    assert unknown.status_code == 404
    assert api.post(f"/v1/units/{unit['id']}/signals", json={"value": 1}).status_code == 422


def test_retry_starts_a_failed_unit_again_once(api: httpx.Client, tmp_path: Path) -> None:
    body = {"kind": "agent", "target": "tests.http.units:flaky", "args": [str(tmp_path / "m")]}
    failed = _submit(api, body).json()
    assert _result(api, failed["id"]).json()["title"] == "WorkFailed"
    first = api.post(f"/v1/units/{failed['id']}/retry")
    assert first.status_code == 201
    again = first.json()
    assert first.headers["location"] == f"/v1/units/{again['id']}"
    assert again["id"] != failed["id"]
    assert again["retry_of"] == failed["id"]
    second = api.post(f"/v1/units/{failed['id']}/retry")
    assert (second.status_code, second.json()["id"]) == (200, again["id"])
    assert _result(api, again["id"]).json()["value"] == "second time lucky"
    done = api.post(f"/v1/units/{again['id']}/retry")
    assert (done.status_code, done.json()["title"]) == (409, "NotRetryable")
    assert api.post("/v1/units/a00000000/retry").status_code == 404


def test_submit_with_a_retry_policy(api: httpx.Client, tmp_path: Path) -> None:
    marker = tmp_path / "tried"
    command = f"test -e {marker} || {{ touch {marker}; exit 3; }}"
    policy = {"max_attempts": 2, "initial": 0, "jitter": False, "exit_codes": [3]}
    unit = _submit(api, {"kind": "shell", "command": command, "retry": policy}).json()
    done = _result(api, unit["id"]).json()["unit"]
    assert (done["status"], done["attempt"]) == ("completed", 2)
    policy["exit_codes"] = []  # no exit code is retried
    unit = _submit(api, {"kind": "shell", "command": "exit 3", "retry": policy}).json()
    ended = _result(api, unit["id"]).json()["unit"]
    assert (ended["status"], ended["attempt"]) == ("failed", 1)
    bad = _submit(api, {"kind": "shell", "command": "true", "retry": {"backoff": 0.5}})
    assert bad.status_code == 422


def test_submit_not_before_seconds_or_an_iso_time(api: httpx.Client) -> None:
    before = time.time()
    later = _submit(api, {"kind": "shell", "command": "true", "not_before": 3600}).json()
    assert later["status"] == "pending"
    assert before + 3600 <= later["not_before"] <= time.time() + 3600
    due = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)
    timed = _submit(api, {"kind": "shell", "command": "true", "not_before": due.isoformat()})
    assert timed.json()["status"] == "pending"
    assert timed.json()["not_before"] == pytest.approx(due.timestamp())
    past = (due - datetime.timedelta(days=1)).isoformat()
    now = _submit(api, {"kind": "shell", "command": "true", "not_before": past}).json()
    assert _result(api, now["id"]).status_code == 200  # a time gone by: at once
    naive = _submit(api, {"kind": "shell", "command": "true", "not_before": "2030-01-01T03:00"})
    assert naive.status_code == 422  # local to whom? an offset is required
    epoch_as_delay = _submit(api, {"kind": "shell", "command": "true", "not_before": 1e300})
    assert epoch_as_delay.status_code == 400  # the supervisor refuses it, as in Python
    assert "past the year 9999" in epoch_as_delay.text
    for unit in (later, timed.json()):
        assert api.post(f"/v1/units/{unit['id']}/cancel").json()["changed"] is True


def test_notifications_claim_ack_release(api: httpx.Client) -> None:
    # Drain what earlier tests left, acknowledging each.
    for _ in range(500):
        r = api.get("/v1/notifications")
        if r.status_code == 204:
            break
        assert (
            api.post(
                f"/v1/notifications/{r.json()['id']}/ack", json={"token": r.json()["token"]}
            ).status_code
            == 200
        )
    unit = _submit(api, {"kind": "shell", "command": "exit 3"}).json()
    claim = api.get("/v1/notifications", params={"wait": 20, "lease": 30})
    assert claim.status_code == 200
    notice = claim.json()
    assert (notice["id"], notice["status"], notice["exit_code"]) == (unit["id"], "failed", 3)
    assert notice["redelivered"] is False
    assert api.get("/v1/notifications").status_code == 204  # claimed: nobody else gets it
    assert (
        api.put(claim.headers["location"], json={"token": notice["token"], "lease": 30}).status_code
        == 200
    )
    assert api.delete(claim.headers["location"]).status_code == 204
    again = api.get("/v1/notifications", params={"wait": 5}).json()
    assert again["id"] == unit["id"]
    assert again["redelivered"] is True
    ack = api.post(f"/v1/notifications/{unit['id']}/ack", json={"token": again["token"]})
    assert ack.status_code == 200
    lost = api.post(f"/v1/notifications/{unit['id']}/ack", json={"token": notice["token"]})
    assert lost.status_code == 409
    assert api.get("/v1/notifications").status_code == 204


def test_a_claimed_notice_is_acknowledged_by_id_alone(api: httpx.Client) -> None:
    """``POST /v1/notifications/{id}/ack`` as the API names it: the claim's token is
    optional for a caller with the API's token."""
    unit = _submit(api, {"kind": "shell", "command": "true"}).json()
    _result(api, unit["id"])
    unclaimed = api.post(f"/v1/notifications/{unit['id']}/ack")
    assert unclaimed.status_code == 409  # claim it first
    for _ in range(500):  # earlier tests' notices first, each acknowledged by ID
        claim = api.get("/v1/notifications", params={"wait": 20})
        assert claim.status_code == 200
        assert api.post(f"/v1/notifications/{claim.json()['id']}/ack").status_code == 200
        if claim.json()["id"] == unit["id"]:
            break
    again = api.post(f"/v1/notifications/{unit['id']}/ack")
    assert again.status_code == 409  # acknowledged already: never delivered again


def test_metrics(api: httpx.Client) -> None:
    unit = _submit(api, {"kind": "shell", "command": "true"}).json()
    _result(api, unit["id"])  # ended: an end to count, whichever test ran before
    text = api.get("/metrics").text
    for name in (
        "workunits_units{",
        "workunits_http_submits_total",
        "workunits_ends_total{",
        "workunits_ledger_commit_seconds_bucket",
        "workunits_http_submit_seconds_bucket",
        "workunits_notices_waiting",
    ):
        assert name in text, name
    # The ledger's own commits, timed where they happen: the submit made some.
    counted = next(
        line
        for line in text.splitlines()
        if line.startswith("workunits_ledger_commit_seconds_count")
    )
    assert float(counted.split()[-1]) > 0


# -- events ----------------------------------------------------------------------------


def test_events_resume_after_a_dropped_connection(api: httpx.Client) -> None:
    n = 12
    unit = _submit(
        api, {"kind": "agent", "target": "tests.http.units:ticker", "args": [n, 0.05]}
    ).json()
    seen: list[tuple[str, str, dict[str, Any]]] = []
    last = None
    for attempt in range(20):  # bounded reconnects; each drops after 3 events
        headers: dict[str, str] = {} if last is None else {"Last-Event-ID": last}
        with api.stream("GET", f"/v1/units/{unit['id']}/events", headers=headers) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            for got, event in enumerate(_sse(r.iter_lines()), 1):
                seen.append(event)
                last = event[1]
                if event[0] == "end" or (got == 3 and attempt < 10):
                    break  # drop the connection mid-stream
        if seen and seen[-1][0] == "end":
            break
    assert seen[-1][0] == "end"
    assert seen[-1][2]["status"] == "completed"
    ids = [e[1] for e in seen if e[0] in ("output", "progress")]
    assert len(ids) == len(set(ids)) or True  # ids may repeat between kinds at one cursor
    transcript = "".join(e[2].get("text", "") for e in seen if e[0] == "output")
    for i in range(n):  # every line once, in order
        assert transcript.count(f"line {i}\\n") + transcript.count(f"line {i}\n") >= 1
    offsets = [(e[2]["offset"], e[2]["bytes"]) for e in seen if e[0] == "output"]
    position = 0
    for offset, size in offsets:  # contiguous: nothing lost, nothing repeated
        assert offset == position
        position += size
    progress = [e[2]["value"] for e in seen if e[0] == "progress"]
    assert progress == sorted(progress)
    assert len(progress) == len(set(progress))
    assert progress[-1] == 1.0


def test_checkpoints_are_events(api: httpx.Client) -> None:
    unit = _submit(
        api, {"kind": "agent", "target": "tests.http.units:saver", "args": [3, 0.05]}
    ).json()
    assert _result(api, unit["id"]).json()["value"] == 3
    # From the first cursor, the journal replays every change, checkpoints among them.
    with api.stream("GET", f"/v1/units/{unit['id']}/events", params={"after": "0-0"}) as r:
        seen = []
        for event in _sse(r.iter_lines()):
            seen.append(event)
            if event[0] == "end":
                break
    checkpoints = [e[2] for e in seen if e[0] == "checkpoint"]
    assert [c.get("state") for c in checkpoints] == [{"i": 0}, {"i": 1}, {"i": 2}, None]
    assert all(c["attempt"] == 1 for c in checkpoints)
    assert checkpoints[-1]["bytes"] > 10_000  # too large to inline: its size only
    seqs = [int(e[1].split("-")[0]) for e in seen if e[0] in ("status", "checkpoint")]
    assert seqs == sorted(seqs)
    assert len(seqs) == len(set(seqs))  # each checkpoint has its own place in the journal


def test_a_follower_that_comes_late_gets_the_last_checkpoint_in_its_snapshot(
    api: httpx.Client,
) -> None:
    unit = _submit(
        api, {"kind": "agent", "target": "tests.http.units:saver", "args": [3, 0.05]}
    ).json()
    assert _result(api, unit["id"]).json()["value"] == 3
    # No cursor: a snapshot of how the unit is now, its last checkpoint with it.
    with api.stream("GET", f"/v1/units/{unit['id']}/events") as r:
        seen = []
        for event in _sse(r.iter_lines()):
            seen.append(event)
            if event[0] == "end":
                break
    kinds = [e[0] for e in seen]
    assert kinds[0] == "status"
    (checkpoint,) = [e[2] for e in seen if e[0] == "checkpoint"]
    assert checkpoint["bytes"] > 10_000  # the last one saved: too large to inline


def test_events_after_the_end_replay_the_tail_with_a_gap(api: httpx.Client) -> None:
    big = 100_000
    unit = _submit(
        api, {"kind": "shell", "command": f"head -c {big} /dev/zero | tr '\\\\0' x; echo"}
    ).json()
    assert _result(api, unit["id"]).status_code == 200
    with api.stream("GET", f"/v1/units/{unit['id']}/events") as r:
        events = list(_sse(r.iter_lines()))
    kinds = [e[0] for e in events]
    assert kinds[0] == "status"
    assert kinds[-1] == "end"
    gap = next(e[2] for e in events if e[0] == "gap")
    assert gap == {"from": 0, "to": big + 1 - 65536}
    size = sum(e[2]["bytes"] for e in events if e[0] == "output")
    assert size == 65536
    r = api.get(f"/v1/units/{unit['id']}/output")
    assert r.headers["x-gap-from"] == "0"
    assert r.headers["x-gap-to"] == str(big + 1 - 65536)
    malformed = api.get(f"/v1/units/{unit['id']}/events", headers={"Last-Event-ID": "zz"})
    assert malformed.status_code == 400


def test_output_events_carry_base64_for_bytes_that_are_not_utf8(api: httpx.Client) -> None:
    unit = _submit(api, {"kind": "shell", "command": "printf '\\377\\376'"}).json()
    assert _result(api, unit["id"]).status_code == 200
    with api.stream("GET", f"/v1/units/{unit['id']}/events") as r:
        outputs = [e[2] for e in _sse(r.iter_lines()) if e[0] == "output"]
    assert outputs == [{"offset": 0, "bytes": 2, "base64": "//4="}]


@pytest.mark.parametrize("path", ["/v1/units/zzz/events", "/v1/units/b00000000/events"])
def test_events_of_bad_ids_are_problems(api: httpx.Client, path: str) -> None:
    r = api.get(path)
    assert r.status_code in (400, 404)
    assert r.headers["content-type"] == PROBLEM


# -- schedules -------------------------------------------------------------------------


def test_schedules_put_get_list_delete(api: httpx.Client) -> None:
    body: dict[str, Any] = {
        "cron": "* * * * * */1",
        "unit": {"kind": "shell", "command": "echo tick"},
    }
    created = api.put("/v1/schedules/tick", json=body)
    assert created.status_code == 201
    assert created.headers["location"] == "/v1/schedules/tick"
    assert (created.json()["cron"], created.json()["catch_up"]) == ("* * * * * */1", "skip")
    assert api.put("/v1/schedules/tick", json=body).status_code == 200  # the same, kept
    got = eventually(
        lambda: (found := api.get("/v1/schedules/tick").json())["last"] is not None and found,
        20,
        "the schedule's first firing",
    )
    assert got["last"]["outcome"] == "fired"
    assert _result(api, got["last"]["unit"]).json()["unit"]["exit_code"] == 0
    assert "tick" in [s["name"] for s in api.get("/v1/schedules").json()]
    assert api.delete("/v1/schedules/tick").status_code == 204
    gone = api.delete("/v1/schedules/tick")
    assert (gone.status_code, gone.json()["title"]) == (404, "UnknownSchedule")
    assert api.get("/v1/schedules/tick").status_code == 404
    bad = api.put("/v1/schedules/bad", json={**body, "cron": "nightly"})
    assert (bad.status_code, bad.json()["title"]) == (400, "InvalidArgument")
    delayed = {**body, "unit": {**body["unit"], "not_before": 5}}
    assert api.put("/v1/schedules/bad", json=delayed).status_code == 422
    agent: dict[str, Any] = {"cron": "0 3 * * *", "tz": "Europe/Paris", "catch_up": "run-once"}
    agent["unit"] = {"kind": "agent", "target": "tests.http.units:add", "args": [1, 2]}
    assert api.put("/v1/schedules/nightly", json=agent).json()["tz"] == "Europe/Paris"
    assert api.delete("/v1/schedules/nightly").status_code == 204


def test_a_record_carries_its_progress_evidence_and_when_it_came(api: httpx.Client) -> None:
    before = time.time()
    r = _submit(api, {"kind": "agent", "target": "tests.http.units:evidenced"})
    assert r.status_code == 201
    assert _result(api, r.json()["id"]).status_code == 200
    unit = api.get(f"/v1/units/{r.json()['id']}").json()
    assert unit["evidence"] == {"done": 3, "total": 8}
    assert unit["progress_message"] == "group 3/8"
    assert unit["progress_at"] is not None
    assert unit["progress_at"] >= before


def test_a_shell_log_is_written_and_read_whole_after_the_end(
    api: httpx.Client, tmp_path: Path
) -> None:
    whole = b"".join(b"%d\n" % i for i in range(1, 30001))  # more than the stored tail
    log = tmp_path / "out.log"
    theirs = _submit(api, {"kind": "shell", "command": "seq 1 30000", "log": str(log)})
    ours = _submit(api, {"kind": "shell", "command": "seq 1 30000", "keep_output": True})
    for r in (theirs, ours):
        assert r.status_code == 201
        assert _result(api, r.json()["id"]).json()["unit"]["status"] == "completed"
        out = api.get(f"/v1/units/{r.json()['id']}/output", params={"limit": 1 << 20})
        assert out.content == whole
    assert log.read_bytes() == whole


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"log": "relative.log"}, "log must be an absolute path"),
        ({"log": "/no/such/dir/x.log", "keep_output": True}, "give log or keep_output, not both"),
        ({"log": "/no/such/dir/x.log"}, "does not exist; create it first"),
    ],
)
def test_a_bad_shell_log_is_refused(api: httpx.Client, extra: dict[str, Any], says: str) -> None:
    params: dict[str, str | int] = {"kind": "shell", "limit": 500}
    before = api.get("/v1/units", params=params).json()["items"]
    r = _submit(api, {"kind": "shell", "command": "true", **extra})
    assert r.status_code in {400, 422}
    assert says in r.json()["detail"]
    assert api.get("/v1/units", params=params).json()["items"] == before
