"""The prediction log keeps the caller's request id only: a request without ``X-Request-Id`` (or with one that
is not sane) is answered with an id the server made up and logged with none (NULL); the answer's prediction
ids are what find its rows. Served and ingested predictions alike, on both backends."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from core.database import open_database
from predictions.models import PredictionBatch
from tests.service.v2data import _v2_tensors
from tests.support import Server, TrainedModels


def _logged_request_id(server: Server, prediction_id: str) -> tuple[bool, str | None]:
    """(whether a batch starts with ``prediction_id``, its request id)."""
    db = open_database(server.settings.database_url.get_secret_value(), upgrade=False)
    try:
        with db.session() as s:
            found = s.execute(
                select(PredictionBatch.request_id).where(PredictionBatch.first_id == prediction_id)
            ).all()
    finally:
        db.dispose()
    return (len(found) == 1, found[0][0] if found else None)


def test_a_request_without_its_own_id_is_logged_without_one(server: Server, trained: TrainedModels) -> None:
    rows = [trained.rows[0], trained.rows[1]]
    records: list[dict[str, Any]] = [{"inputs": row, "prediction": 0.25} for row in rows]
    with server.client() as c:
        given = c.post(
            "/v1/models/credit:predict", json={"instances": rows}, headers={"X-Request-Id": "rq-7"}
        )
        made = c.post("/v1/models/credit:predict", json={"instances": rows})
        insane = c.post(
            "/v1/models/credit:predict", json={"instances": rows}, headers={"X-Request-Id": "a b"}
        )
        v2 = c.post("/v2/models/credit/infer", json={"inputs": _v2_tensors(rows)})
        ingested = c.post("/v1/models/credit/predictions", json={"records": records})
        ingested_given = c.post(
            "/v1/models/credit/predictions", json={"records": records}, headers={"X-Request-Id": "batch-9"}
        )
    for r in (given, made, insane, v2, ingested, ingested_given):
        assert r.status_code == 200, r.text
    assert given.headers["x-request-id"] == "rq-7"
    assert len(made.headers["x-request-id"]) == 32 and len(insane.headers["x-request-id"]) == 32
    assert _logged_request_id(server, given.json()["prediction_ids"][0]) == (True, "rq-7")
    assert _logged_request_id(server, made.json()["prediction_ids"][0]) == (True, None)
    assert _logged_request_id(server, insane.json()["prediction_ids"][0]) == (True, None)
    first = v2.json()["parameters"]["prediction_ids"].split(",")[0]
    assert _logged_request_id(server, first) == (True, None)
    assert _logged_request_id(server, ingested.json()["prediction_ids"][0]) == (True, None)
    assert _logged_request_id(server, ingested_given.json()["prediction_ids"][0]) == (True, "batch-9")
