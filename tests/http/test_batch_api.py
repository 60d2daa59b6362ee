"""``POST /v1/units:batch``: several units in one request, checked whole, one transaction."""

from __future__ import annotations

import httpx

from tests.http.test_api import _result


def test_a_batch_submits_every_unit_and_names_a_bad_one(api: httpx.Client) -> None:
    before = api.get("/v1/units", params={"limit": 1000}).json()["total"]
    bodies = [{"kind": "shell", "command": f"echo {i}"} for i in range(3)]
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
