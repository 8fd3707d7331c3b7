"""Registry routes through a real server and real trained versions, on SQLite and PostgreSQL.

A promotion, a rollback and a label move over HTTP are served by the running server without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import NO_AUTH, Server, TrainedModels, seed_registry, serve_settings

TOKEN = "registry-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(
    module_db_url: str, trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """Serving version 1 of ``credit`` (version 2 staged), admin token set."""
    seed_registry(module_db_url, trained, serving=1)
    settings = serve_settings(module_db_url, tmp_path_factory.mktemp("spool"), admin_token=TOKEN)
    with Server(settings) as srv:
        yield srv


def _served_version(
    c: httpx.Client, rows: list[dict[str, Any]], path: str = "/v1/models/credit:predict"
) -> str:
    r = c.post(path, json={"instances": rows[:2]})
    assert r.status_code == 200, r.text
    version: str = r.json()["model_version"]
    return version


def _wait_served(
    c: httpx.Client, rows: list[dict[str, Any]], want: str, path: str = "/v1/models/credit:predict"
) -> float:
    """Seconds until ``path`` answers with version ``want`` (the server polls the registry)."""
    start = time.monotonic()
    while time.monotonic() - start < 120:
        r = c.post(path, json={"instances": rows[:2]})
        if r.status_code == 200 and r.json()["model_version"] == want:
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"{path} still not answered by version {want}: {r.status_code} {r.text}")


def _error(r: httpx.Response, status: int, *parts: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    message = r.json()["error"]
    for part in parts:
        assert part in message, (part, message)


def test_promote_rollback_and_label_are_served_without_restart(
    server: Server, trained: TrainedModels
) -> None:
    rows = trained.rows
    with server.client() as c:
        assert _served_version(c, rows) == "1"
        r = c.post("/v1/models/credit/versions/2:promote", headers=AUTH)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["version"] == 2 and body["state"] == "serving"
        assert body["previous_serving"] == 1 and body["changed"] is True
        _wait_served(c, rows, "2")

        again = c.post("/v1/models/credit/versions/2:promote", headers=AUTH).json()
        assert again["changed"] is False and again["previous_serving"] == 2

        r = c.post("/v1/models/credit:rollback", headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.json()["version"] == 1 and r.json()["previous_serving"] == 2
        _wait_served(c, rows, "1")

        r = c.put("/v1/models/credit/labels/canary", json={"version": 2}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.json() == {"model_name": "credit", "label": "canary", "version": 2, "previous_version": None}
        _wait_served(c, rows, "2", "/v1/models/credit/labels/canary:predict")
        status = c.get("/v1/models/credit/labels/canary")  # the existing status route still answers
        assert status.status_code == 200, status.text
        assert [s["version"] for s in status.json()["model_version_status"]] == ["2"]
        one = c.get("/v1/models/credit/versions/1")
        assert one.status_code == 200 and one.json()["model_version_status"][0]["state"] == "AVAILABLE"

        doc = c.get("/v1/models/credit/versions").json()  # no token needed to read
        assert doc["serving"] == 1 and doc["labels"] == {"canary": 2}
        assert {v["version"]: v["state"] for v in doc["versions"]} == {1: "serving", 2: "archived"}
        assert [v["labels"] for v in doc["versions"]] == [["canary"], []]
        api = [
            (e["version"], e["action"], e["from_state"], e["to_state"])
            for e in doc["history"]
            if e["actor"] == "api"
        ]
        assert api == [
            (1, "archive", "serving", "archived"),
            (2, "promote", "staged", "serving"),
            (2, "archive", "serving", "archived"),
            (1, "rollback", "archived", "serving"),
            (2, "label", None, None),
        ]
        assert all(e["at"] for e in doc["history"])

        r = c.post("/v1/models/credit/versions/2:reject", json={"reason": "canary AUC 0.61"}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "rejected" and r.json()["state_reason"] == "canary AUC 0.61"
        _error(
            c.post("/v1/models/credit/versions/2:promote", headers=AUTH),
            409,
            "credit:2 was rejected (canary AUC 0.61)",
        )
        _error(c.post("/v1/models/credit:rollback", headers=AUTH), 409, "no previous serving version")
        assert _served_version(c, rows) == "1"
        history = c.get("/v1/models/credit/versions").json()["history"]
        assert history[-1]["action"] == "reject" and history[-1]["reason"] == "canary AUC 0.61"


def test_changes_need_the_admin_token(server: Server) -> None:
    with server.client() as c:
        calls = [
            ("POST", "/v1/models/credit/versions/1:promote", None),
            ("POST", "/v1/models/credit:rollback", None),
            ("PUT", "/v1/models/credit/labels/stable", {"version": 1}),
            ("POST", "/v1/models/credit/versions/1:reject", {"reason": "x"}),
        ]
        for method, path, body in calls:
            _error(c.request(method, path, json=body, headers=NO_AUTH), 401, "Authorization: Bearer")
            wrong = {"Authorization": "Bearer nope"}
            _error(c.request(method, path, json=body, headers=wrong), 401, "unknown, revoked or expired")
        assert "stable" not in c.get("/v1/models/credit/versions").json()["labels"]


def test_bad_requests_are_4xx_naming_the_field(server: Server, trained: TrainedModels) -> None:
    with server.client() as c:
        before = c.get("/v1/models/credit/versions").json()["history"]
        _error(
            c.post("/v1/models/credit/versions/two:promote", headers=AUTH), 400, "version must be", "'two'"
        )
        _error(c.post("/v1/models/credit/versions/0:promote", headers=AUTH), 400, "version must be")
        _error(c.post("/v1/models/credit/versions/9:promote", headers=AUTH), 404, "has no version 9")
        _error(c.post("/v1/models/ghost/versions/1:promote", headers=AUTH), 404, "no model 'ghost'")
        _error(c.post("/v1/models/ghost:rollback", headers=AUTH), 404, "no model 'ghost'")
        _error(c.get("/v1/models/ghost/versions"), 404, "no model 'ghost'")
        _error(c.get("/v1/models/.hidden/versions"), 400, "model name '.hidden' is not allowed", "pattern")
        _error(c.post("/v1/models/a%20b:rollback", headers=AUTH), 400, "model name 'a b' is not allowed")
        _error(c.post("/v1/models/..:rollback", headers=AUTH), 400, "it starts with '.'")
        label = "/v1/models/credit/labels/stable"
        _error(c.put(label, content=b"{", headers=AUTH), 400, "not valid JSON")
        _error(c.put(label, json=[1], headers=AUTH), 400, "must be a JSON object")
        _error(c.put(label, json={}, headers=AUTH), 400, "body field 'version'", "None")
        _error(c.put(label, json={"version": "x"}, headers=AUTH), 400, "body field 'version'", "'x'")
        _error(c.put(label, json={"version": True}, headers=AUTH), 400, "body field 'version'")
        _error(c.put(label, json={"version": -1}, headers=AUTH), 400, "body field 'version'")
        _error(c.put(label, json={"version": 7}, headers=AUTH), 404, "has no version 7")
        _error(
            c.put("/v1/models/credit/labels/a:b", json={"version": 1}, headers=AUTH),
            400,
            "label 'a:b' is not allowed",
        )
        _error(c.put(label, content=b"x" * 70_000, headers=AUTH), 413, "more than the limit")
        reject = "/v1/models/credit/versions/1:reject"
        _error(c.post(reject, json={}, headers=AUTH), 400, "body field 'reason'")
        _error(c.post(reject, json={"reason": "  "}, headers=AUTH), 400, "body field 'reason'")
        assert c.get("/v1/models/credit/versions").json()["history"] == before  # nothing recorded
        assert _served_version(c, trained.rows) == "1"  # and nothing changed for traffic
