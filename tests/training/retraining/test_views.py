"""The retraining routes over real HTTP (uvicorn), on SQLite and PostgreSQL.

The app here mounts only training's router with the app's error handlers (the API process mounts it in
``service/serving/app.py``); no worker runs, so jobs stay queued unless a test moves them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from core.config import Settings
from core.database import Database, open_database
from core.events import JOB_FINISHED, subscribe
from registry.service import register_version
from tests.support import NO_AUTH
from tests.training.retrainapi import AUTH, TOKEN, Api, build_app
from training.retraining import service
from training.retraining.models import JobState


@pytest.fixture
def db(database_url: str, tmp_path: Path) -> Iterator[Database]:
    database = open_database(database_url, upgrade=True)
    with database.session() as s:
        for name in ("credit", "other"):
            register_version(session=s, model_name=name, version=1, path=tmp_path, metrics={}, lineage={})
    yield database
    database.dispose()


@pytest.fixture
def api(db: Database, database_url: str) -> Iterator[httpx.Client]:
    settings = Settings(database_url=SecretStr(database_url), admin_token=SecretStr(TOKEN))
    with Api(build_app(settings, db)) as client:
        yield client


def test_retrain_queues_a_job_and_answers_202_with_its_location(api: httpx.Client) -> None:
    r = api.post("/v1/models/credit/retrain", headers=AUTH, json={"reason": "drift on income", "epochs": 2})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["created"] is True and body["state"] == "queued" and body["model_name"] == "credit"
    assert r.headers["location"] == f"/v1/jobs/{body['id']}" == body["links"]["self"]
    assert body["params"] == {"reason": "drift on income", "epochs": 2.0}
    assert body["trigger"] == "api" and body["requested_by"].startswith("api:127.0.0.1")
    again = api.post("/v1/models/credit/retrain", headers=AUTH)  # no body: defaults
    assert again.status_code == 202
    assert again.json()["id"] == body["id"] and again.json()["created"] is False
    assert again.json()["reason"] == f"job {body['id']} of model 'credit' is queued already"
    assert again.headers["location"] == f"/v1/jobs/{body['id']}"
    shown = api.get(f"/v1/jobs/{body['id']}")
    assert shown.status_code == 200 and shown.json()["state"] == "queued"
    assert shown.json()["log_tail"][-1].endswith("queued by api (api:127.0.0.1)")


def test_the_same_idempotency_key_answers_the_same_job_after_it_ended(
    api: httpx.Client, db: Database
) -> None:
    key = {"Idempotency-Key": "alert-42-firing", **AUTH}
    first = api.post("/v1/models/credit/retrain", headers=key).json()
    with db.session() as s:
        service.request_cancel(session=s, job_id=first["id"])
    replay = api.post("/v1/models/credit/retrain", headers=key)
    assert replay.status_code == 202
    assert (replay.json()["id"], replay.json()["created"]) == (first["id"], False)
    assert replay.json()["state"] == "cancelled"
    assert "idempotency key 'alert-42-firing'" in replay.json()["reason"]
    fresh = api.post("/v1/models/credit/retrain", headers={"Idempotency-Key": "another", **AUTH})
    assert fresh.json()["created"] is True and fresh.json()["id"] != first["id"]
    too_long = api.post("/v1/models/credit/retrain", headers={"Idempotency-Key": "k" * 300, **AUTH})
    assert too_long.status_code == 400 and "idempotency-key" in too_long.json()["error"].lower()
    # a UTF-8 key arrives as Latin-1 and was stored garbled ("clÃ©"): refused instead, naming the header
    raw = {b"Idempotency-Key": "clé-1".encode()} | {k.encode(): v.encode() for k, v in AUTH.items()}
    accented = api.post("/v1/models/credit/retrain", headers=raw)
    assert accented.status_code == 400 and "idempotency-key" in accented.json()["error"].lower()


def test_admin_routes_need_the_token(api: httpx.Client) -> None:
    none = api.post("/v1/models/credit/retrain", headers=NO_AUTH)
    assert none.status_code == 401 and "Authorization: Bearer" in none.json()["error"]
    wrong = api.post("/v1/models/credit/retrain", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "unknown, revoked or expired" in wrong.json()["error"]
    job = api.post("/v1/models/credit/retrain", headers=AUTH).json()
    assert api.post(f"/v1/jobs/{job['id']}:cancel", headers=NO_AUTH).status_code == 401
    assert api.post(f"/v1/jobs/{job['id']}:cancel", headers={"Authorization": "Bearer x"}).status_code == 401
    assert api.get("/v1/jobs", headers=NO_AUTH).status_code == 401  # reading needs scope 'read'
    assert api.get("/v1/jobs").status_code == 200
    assert api.get(f"/v1/jobs/{job['id']}").json()["state"] == "queued"  # nothing changed


def test_bad_requests_name_what_is_wrong(api: httpx.Client) -> None:
    unknown = api.post("/v1/models/ghost/retrain", headers=AUTH)
    assert unknown.status_code == 404 and "no model 'ghost' in the registry" in unknown.json()["error"]
    cases = {
        '{"epochs": -1}': "epochs: Input should be greater than 0",
        '{"mode": "fast"}': "mode: Input should be 'async', 'sync' or 'local'",
        '{"drill": "fire"}': "drill: Input should be 'shuffled_labels'",
        '{"workers": 0}': "workers: Input should be greater than or equal to 1",
        '{"epoch": 2}': "epoch: Extra inputs are not permitted",
        '{"mode": "local", "workers": 2}': "workers does not apply to mode local",
        "[1, 2]": "the body must be a JSON object",
        "{oops": "the body is not JSON",
    }
    for body, message in cases.items():
        r = api.post(
            "/v1/models/credit/retrain", headers={**AUTH, "Content-Type": "application/json"}, content=body
        )
        assert r.status_code == 400, (body, r.text)
        assert message in r.json()["error"], (body, r.json())
    assert api.get("/v1/jobs").json() == {"jobs": []}  # nothing stored by a bad request


def test_list_show_and_cancel(api: httpx.Client, db: Database) -> None:
    a = api.post("/v1/models/credit/retrain", headers=AUTH).json()
    b = api.post("/v1/models/other/retrain", headers=AUTH, json={"mode": "local"}).json()
    listed = api.get("/v1/jobs").json()["jobs"]
    assert [j["id"] for j in listed] == [b["id"], a["id"]]
    assert [j["id"] for j in api.get("/v1/jobs", params={"model": "other"}).json()["jobs"]] == [b["id"]]
    assert [j["id"] for j in api.get("/v1/jobs", params={"limit": 1}).json()["jobs"]] == [b["id"]]
    bad_state = api.get("/v1/jobs", params={"state": "done"})
    assert bad_state.status_code == 400 and "state 'done' is not a job state" in bad_state.json()["error"]
    assert api.get("/v1/jobs", params={"limit": 0}).status_code == 400
    missing = api.get("/v1/jobs/999")
    assert missing.status_code == 404 and "no job 999" in missing.json()["error"]
    assert api.get("/v1/jobs/abc").status_code == 400
    # a running job: cancel is requested, the worker stops it at its next heartbeat
    with db.session() as s:
        claimed = service.claim(session=s, worker_id="w", lease_s=60)
        assert claimed is not None and claimed.id == a["id"]
    running = api.post(f"/v1/jobs/{a['id']}:cancel", headers=AUTH)
    assert running.status_code == 202
    assert running.json()["state"] == "running" and running.json()["cancel_requested"] is True
    finished: list[int] = []
    unsubscribe = subscribe(JOB_FINISHED, lambda **p: finished.append(p["job_id"]) if p["db"] is db else None)
    try:
        queued = api.post(f"/v1/jobs/{b['id']}:cancel", headers=AUTH)
    finally:
        unsubscribe()
    assert queued.status_code == 202 and queued.json()["state"] == "cancelled"
    assert finished == [
        b["id"]
    ]  # ended at once: announced as a worker would (the running one: by its worker)
    assert [j["id"] for j in api.get("/v1/jobs", params={"state": "cancelled"}).json()["jobs"]] == [b["id"]]
    again = api.post(f"/v1/jobs/{b['id']}:cancel", headers=AUTH)
    assert again.status_code == 409 and "has ended (cancelled)" in again.json()["error"]
    assert api.post("/v1/jobs/999:cancel", headers=AUTH).status_code == 404
    with db.session() as s:
        assert service.get_job(session=s, job_id=a["id"]).state is JobState.RUNNING
