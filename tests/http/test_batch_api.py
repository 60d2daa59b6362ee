"""``POST /v1/units:batch``: several units in one request, checked whole, one transaction."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import workunits as wu
from tests.http.server import Served
from tests.http.test_api import _result
from tests.http.units import add


def test_a_batch_submits_every_unit_and_names_a_bad_one(api: httpx.Client) -> None:
    before = api.get("/v1/units", params={"limit": 1000}).json()["total"]
    bodies: list[dict[str, Any]] = [{"kind": "shell", "command": f"echo {i}"} for i in range(3)]
    bodies.append({"kind": "agent", "target": "tests.http.units:add", "args": [20, 22]})
    r = api.post("/v1/units:batch", json={"units": bodies, "max_workers": 2})
    assert r.status_code == 201, r.text
    units = [item["unit"] for item in r.json()["units"]]
    assert all(item["error"] is None for item in r.json()["units"])
    assert [u["kind"] for u in units] == ["shell", "shell", "shell", "agent"]
    for i, unit in enumerate(units[:3]):
        done = _result(api, unit["id"])
        assert done.json()["unit"]["exit_code"] == 0
        assert api.get(f"/v1/units/{unit['id']}/output").content == f"{i}\n".encode()
    assert _result(api, units[3]["id"]).json()["value"] == 42
    bad = api.post(
        "/v1/units:batch",
        json={"units": [bodies[0], {"kind": "agent", "target": "tests.http.units:nothing_here"}]},
    )
    assert bad.status_code == 400
    assert "item 1 of the batch" in bad.json()["detail"]
    assert api.get("/v1/units", params={"limit": 1000}).json()["total"] == before + 4
    assert api.post("/v1/units:batch", json={"units": []}).status_code == 422
    assert "/v1/units:batch" in api.get("/openapi.json").json()["paths"]


def test_the_http_client_submits_and_maps_a_batch(served: Served) -> None:
    with wu.connect(served.url, token=served.token) as client:
        assert list(client.map(add, range(4), range(4), timeout=30)) == [0, 2, 4, 6]
        first = client.submit_many([wu.AgentCall(add, (1, 2), key="hb1")])
        assert first[0].created
        again = client.submit_many(
            [wu.AgentCall("tests.http.units:add", (1, 2), key="hb1"), wu.AgentCall(add, (2, 2))]
        )
        assert (again[0].id, again[0].created) == (first[0].id, False)
        assert client.result(again[1].id, timeout=30) == 4
        with pytest.raises(wu.BatchItemsFailed) as raised:
            client.submit_many([wu.AgentCall(add, (5, 5), key="hb1"), wu.AgentCall(add, (0, 1))])
        assert list(raised.value.errors) == [0]
        assert "IdempotencyConflict" in str(raised.value.errors[0])
        with pytest.raises(wu.SpecError, match="item 0 of the batch: over HTTP an agent is named"):
            client.submit_many([wu.AgentCall(lambda: 1)])


def test_a_key_per_unit_or_a_400(api: httpx.Client) -> None:
    one = {"kind": "shell", "command": "true"}
    r = api.post("/v1/units:batch", json={"units": [one, one], "keys": ["k-only"]})
    assert r.status_code == 400
    assert "1 keys for 2 units" in r.json()["detail"]
