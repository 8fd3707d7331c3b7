"""PostgreSQL stopped (``pg_ctl stop -m fast``) under a server whose every route needs a token, read afresh
from the tokens table on each request (``token_cache_s=0``).

The routes that spool (TF Serving's ``:predict``, OIP v2 ``/infer``, ingest, KServe's CloudEvents) keep taking
predictions with the tokens the database verified before the outage (``token_grace_s``); a token never seen
is a 503 (not a 401: it may be good); a route that needs the database answers 503 with ``Retry-After``,
never 500. Once the database is back every prediction taken in the outage is in the log exactly once, and a
revocation takes effect.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from access.service import create_token, revoke_token
from access.verifier import CachedVerifier
from core.database import open_database
from core.errors import Unavailable
from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE
from tests import own_models
from tests.faults.conftest import wait_until
from tests.service.routes import ADMIN_ROUTES, READ_ROUTES
from tests.support import (
    OwnPostgres,
    Server,
    TrainedModels,
    count_rows,
    query_rows,
    seed_registry,
    serve_settings,
)


def _tokens(url: str) -> dict[str, tuple[str, str]]:
    """Named tokens (id, secret) in the database at ``url``."""
    db = open_database(url)
    try:
        with db.session() as s:
            made = {
                "pipeline": create_token(
                    session=s, name="pipeline", scopes=["predict", "ingest"], expires_in=timedelta(hours=1)
                ),
                "reader": create_token(
                    session=s, name="reader", scopes=["read"], expires_in=timedelta(hours=1)
                ),
                "unseen": create_token(
                    session=s, name="unseen", scopes=["read"], expires_in=timedelta(hours=1)
                ),
            }
            return {name: (c.row.id, c.secret) for name, c in made.items()}
    finally:
        db.dispose()


def _bearer(secret: str, request_id: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {secret}"}
    return headers | ({"X-Request-Id": request_id} if request_id else {})


def _records(
    tag: str, rows: list[dict[str, Any]], probs: list[float], *, labels: bool = False
) -> dict[str, Any]:
    """Ingest records with the caller's ids and one time: one named run, found in the log when sent again."""
    return {
        "records": [
            {"id": f"{tag}-{i}", "time": "2026-01-02T03:04:05Z", "inputs": r, "prediction": p}
            | ({"label": i % 2} if labels else {})
            for i, (r, p) in enumerate(zip(rows, probs, strict=True))
        ]
    }


def _v2(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "inputs": [
            {
                "name": k,
                "shape": [len(rows)],
                "datatype": "BYTES" if isinstance(rows[0][k], str) else "FP32",
                "data": [r[k] for r in rows],
            }
            for k in rows[0]
        ]
    }


def test_routes_that_spool_keep_spooling_with_verified_tokens_while_the_database_is_down(
    own_pg: OwnPostgres, pg_url: str, trained: TrainedModels, tmp_path: Path
) -> None:
    seed_registry(pg_url, trained, serving=1)
    tokens = _tokens(pg_url)
    pipeline, reader, unseen = (tokens[k][1] for k in ("pipeline", "reader", "unseen"))
    settings = serve_settings(
        pg_url,
        tmp_path / "spool",
        predict_requires_token=True,
        token_cache_s=0,  # every request reads its token from the database: no cache hides the outage
        token_grace_s=600,
        monitor_enabled=False,
        health_interval_s=1.0,
        cloudevents_sweep_interval_s=0.5,
        cloudevents_wait_s=600.0,
    )
    rows = [r for r in trained.rows if all(v is not None for v in r.values())][:3]
    probs = [0.25, 0.5, 0.75]

    def spool_everything(c: httpx.Client, tag: str) -> dict[str, httpx.Response]:
        event, headers = own_models.kserve_message(
            REQUEST_TYPE, f"{tag}-ce", {"instances": rows}, model="credit"
        )
        answer, answer_headers = own_models.kserve_message(
            RESPONSE_TYPE, f"{tag}-ce", {"predictions": probs}, model="credit"
        )
        ingest = _records(tag, rows, probs)
        return {
            "v1": c.post(
                "/v1/models/credit:predict", json={"instances": rows}, headers=_bearer(pipeline, f"{tag}-v1")
            ),
            "v2": c.post("/v2/models/credit/infer", json=_v2(rows), headers=_bearer(pipeline, f"{tag}-v2")),
            "ingest": c.post(
                "/v1/models/credit/predictions", json=ingest, headers=_bearer(pipeline, f"{tag}-ingest")
            ),
            "ce request": c.post("/v1/cloudevents", content=event, headers=headers | _bearer(pipeline)),
            "ce response": c.post(
                "/v1/cloudevents", content=answer, headers=answer_headers | _bearer(pipeline)
            ),
        }

    with Server(settings) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        before = spool_everything(c, "before")  # the database verifies the token
        assert {k: r.status_code for k, r in before.items()} == dict.fromkeys(before, 200)
        assert c.get("/v1/alerts", headers=_bearer(reader)).status_code == 200
        reads = srv.app.state.verifier.reads

        own_pg.stop("fast")
        down = spool_everything(c, "down")
        assert {k: r.status_code for k, r in down.items()} == dict.fromkeys(down, 200), {
            k: r.text for k, r in down.items()
        }
        assert down["ingest"].json()["stored"] == 3
        assert [down[k].json()["outcome"] for k in ("ce request", "ce response")] == ["spooled", "spooled"]
        assert srv.app.state.verifier.reads > reads  # the tokens were read for (and failed over to the grace)

        never_seen = c.get("/v1/alerts", headers=_bearer(unseen))  # valid in the table, never verified here
        assert never_seen.status_code == 503, never_seen.text
        assert "database unavailable; cannot verify a new token" in never_seen.json()["error"]
        made_up = c.post("/v1/models/credit:predict", json={"instances": rows}, headers=_bearer("dw_x_y"))
        assert made_up.status_code == 503
        admin = srv.settings.admin_token.get_secret_value()  # type: ignore[union-attr]
        for token in (reader, admin):
            # the token passes; the route needs the database
            read = c.get("/v1/alerts", headers=_bearer(token))
            assert read.status_code == 503, read.text
            assert read.headers["retry-after"] == "5"
            assert "the database is unavailable" in read.json()["error"]
        label = {"labels": [{"prediction_id": before["v1"].json()["prediction_ids"][0], "label": 1}]}
        feedback = ("POST", "/v1/models/credit/feedback", label)  # a logged prediction's: the table is read
        for method, path, body in [*READ_ROUTES, *ADMIN_ROUTES, feedback]:  # every route that reads it
            answer = c.request(method, path, json=body, headers=_bearer(admin))
            assert (answer.status_code, answer.headers.get("retry-after")) == (503, "5"), (path, answer.text)

        labelled = _records("labelled", rows, probs, labels=True)
        with_labels = c.post(
            "/v1/models/credit/predictions", json=labelled, headers=_bearer(pipeline, "down-labelled")
        )
        assert with_labels.status_code == 503, with_labels.text  # its records spooled, its labels need the db
        assert with_labels.headers["retry-after"] == "5"

        own_pg.start()
        for tag, size in (
            ("down-v1", 3),
            ("down-v2", 3),
            ("down-ingest", 3),
            ("down-ce", 3),
            ("down-labelled", 3),
        ):
            wait_until(
                f"{tag} logged", lambda t=tag, n=size: count_rows(pg_url, f"request_id = '{t}'") >= n, 60
            )
        # the ingest taken in the outage, sent again: its named run is in the log (the replay wrote it once)
        again = c.post(
            "/v1/models/credit/predictions",
            json=_records("down", rows, probs),
            headers=_bearer(pipeline, "down-ingest"),
        )
        assert again.status_code == 200, again.text
        assert (again.json()["stored"], len(again.json()["duplicate_ids"])) == (0, 3)
        again = c.post(
            "/v1/models/credit/predictions", json=labelled, headers=_bearer(pipeline, "down-labelled")
        )
        assert again.status_code == 200, again.text
        assert {k: again.json()[k] for k in ("stored", "labels_stored")} == {"stored": 0, "labels_stored": 3}
        after = spool_everything(c, "after")
        assert {k: r.status_code for k, r in after.items()} == dict.fromkeys(after, 200)
        wait_until("the spool of halves drained", lambda: _halves(tmp_path / "spool") == 0, timeout_s=30)
        assert srv.state.writer.flush(timeout_s=30)

        assert c.get("/v1/alerts", headers=_bearer(reader)).status_code == 200
        db = open_database(pg_url)
        try:
            with db.session() as s:
                revoke_token(session=s, token_id=tokens["reader"][0])
        finally:
            db.dispose()
        revoked = c.get("/v1/alerts", headers=_bearer(reader))
        assert revoked.status_code == 401, revoked.text  # the revocation holds once the database is back

    logged = query_rows(pg_url, "select request_id, count(*), sum(size) from prediction_batches group by 1")
    by_request = {r[0]: (int(r[1]), int(r[2])) for r in logged}
    for phase in ("before", "down", "after"):  # every prediction exactly once: one batch of 3 rows each
        for route in ("v1", "v2", "ingest", "ce"):
            assert by_request.get(f"{phase}-{route}") == (1, 3), (phase, route, by_request)
    assert by_request["down-labelled"] == (1, 3)
    labels = query_rows(pg_url, "select count(*) from prediction_feedback")
    assert labels[0][0] == 3


def _halves(spool: Path) -> int:
    return sum(1 for p in spool.rglob("*") if ".half" in p.name)


@pytest.mark.parametrize("grace_s", [0.0, 600.0])
def test_a_verified_token_outlives_the_database_for_the_grace_only(
    own_pg: OwnPostgres, pg_url: str, grace_s: float
) -> None:
    """The grace is the bound: with none, a token verified a moment before the outage is a 503 in it; within
    it, a token the database refused (revoked) before the outage stays refused (None: a 401)."""
    tokens = _tokens(pg_url)
    db = open_database(pg_url)
    try:
        with db.session() as s:
            revoke_token(session=s, token_id=tokens["unseen"][0])
        verifier = CachedVerifier(db=db, ttl_s=0, grace_s=grace_s)
        good, revoked = tokens["pipeline"][1], tokens["unseen"][1]
        assert asyncio.run(verifier.verify(good)) is not None
        assert asyncio.run(verifier.verify(revoked)) is None
        own_pg.stop("fast")
        if grace_s:
            grant = asyncio.run(verifier.verify(good))
            assert grant is not None and grant.name == "pipeline"
            assert asyncio.run(verifier.verify(revoked)) is None
        else:  # no grace: the database's answers end with token_cache_s, whatever they were
            for token in (good, revoked):
                with pytest.raises(Unavailable, match="cannot verify a new token"):
                    asyncio.run(verifier.verify(token))
        with pytest.raises(Unavailable, match="cannot verify a new token"):
            asyncio.run(verifier.verify(tokens["reader"][1]))  # never verified by this process
        own_pg.start()
        assert asyncio.run(verifier.verify(tokens["reader"][1])) is not None
    finally:
        db.dispose()


def test_one_connection_attempt_per_period_while_the_database_is_down(
    own_pg: OwnPostgres, pg_url: str
) -> None:
    """Tokens never seen, sent while the database is down, cost one attempt to reach it per ``token_cache_s``
    (then 503 at once), not one each: a flood of made-up tokens cannot pile up connection attempts."""
    tokens = _tokens(pg_url)
    db = open_database(pg_url)
    try:
        cache = CachedVerifier(db=db, ttl_s=3600, grace_s=0)
        assert asyncio.run(cache.verify(tokens["pipeline"][1])) is not None
        own_pg.stop("fast")
        reads = cache.reads
        for i in range(20):
            with pytest.raises(Unavailable, match="cannot verify a new token"):
                asyncio.run(cache.verify(f"dw_madeup{i}_x"))
        assert cache.reads == reads + 1
        assert asyncio.run(cache.verify(tokens["pipeline"][1])) is not None  # cached: within token_cache_s
    finally:
        db.dispose()
