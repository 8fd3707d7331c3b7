"""KServe's logger keeps sending while PostgreSQL is stopped (``pg_ctl stop -m fast``) and started again.

KServe never resends an event, so every half must be kept: halves that arrive while the database is down are
spooled to disk (answered ``spooled``), and once it is back the server's periodic pass pairs them. At the end
the log holds exactly one row per inference (no pair lost, none written twice), whichever half came in the
outage, before it or after it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE
from tests import own_models
from tests.faults.conftest import wait_until
from tests.support import OwnPostgres, Server, elsewhere_settings


def _post(client: httpx.Client, kind: str, event_id: str, body: Any) -> str:
    content, headers = own_models.kserve_message(kind, event_id, body, model="ce_outage")
    r = client.post("/v1/cloudevents", content=content, headers=headers)
    assert r.status_code == 200, r.text
    return str(r.json()["outcome"])


def _logged(url: str) -> list[tuple[str, int]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("select request_id, size from prediction_batches where source = 'cloudevents'")
            ).all()
    finally:
        engine.dispose()
    return [(r[0], int(r[1])) for r in rows]


def test_pairs_survive_a_database_stopped_mid_stream(
    own_pg: OwnPostgres, pg_url: str, tmp_path: Path
) -> None:
    settings = elsewhere_settings(
        pg_url,
        tmp_path,
        {"ce_outage": "binary"},
        health_interval_s=1.0,
        cloudevents_sweep_interval_s=0.5,
        cloudevents_wait_s=600.0,  # no pair may be settled unanswered while the test runs
    )
    data = own_models.reference(6, seed=3)
    rows = own_models.feature_rows(data)
    probs = [float(p) for p in own_models.answers("binary", data)]
    ids = {
        phase: [f"{phase}-{uuid.uuid4()}" for _ in range(8)]
        for phase in ("before", "across", "down", "after")
    }
    outcomes: list[str] = []
    with Server(settings) as srv, srv.client() as c:

        def request(event_id: str) -> None:
            outcomes.append(_post(c, REQUEST_TYPE, event_id, {"instances": rows}))

        def response(event_id: str) -> None:
            outcomes.append(_post(c, RESPONSE_TYPE, event_id, {"predictions": probs}))

        for event_id in ids["before"]:
            request(event_id)
            response(event_id)
        for event_id in ids["across"]:  # the request before the outage, the response during it
            request(event_id)
        own_pg.stop("fast")
        for event_id in ids["across"]:
            response(event_id)
        for event_id in ids["down"]:  # both halves while the database is down
            response(event_id)
            request(event_id)
        spooled = outcomes.count("spooled")
        own_pg.start()
        for event_id in ids["after"]:
            request(event_id)
            response(event_id)
        expected = {event_id for phase in ids.values() for event_id in phase}
        wait_until("every pair logged", lambda: {r for r, _ in _logged(pg_url)} >= expected, timeout_s=60)
        wait_until("the spool of halves drained", lambda: _spooled(tmp_path / "spool") == 0, timeout_s=30)
    logged = _logged(pg_url)
    assert spooled == 3 * 8  # the across responses and both halves of the down pairs
    assert sorted(r for r, _ in logged) == sorted(expected)  # one row per pair: none lost, none doubled
    assert all(size == 6 for _, size in logged)


def _spooled(spool: Path) -> int:
    return sum(1 for p in spool.rglob("*") if ".half" in p.name)
