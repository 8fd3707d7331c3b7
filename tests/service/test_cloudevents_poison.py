"""A hostile half already in the spool of halves stops neither the replay nor the pairing (issue 41, item 1).

The edge refuses a NUL in a request's feature name (``test_cloudevents.py``), so the halves are put straight
into the server's spool, as a version without that check (or a server whose database was down) left them: a
request whose instance has the key ``"x\\u0000y"``, then its response, then clean pairs. The server's own
periodic pass replays them: the clean pairs are logged, the hostile response is set aside with its reason
(``.bad`` and ``.bad.reason``: the halves' dead letter), no half stays claimed under the live server, and the
response sent again to the route is a 400 naming the rule, not a 500. On main PostgreSQL's error escaped the
pass and left every half it had claimed as ``*.half.claimed-<pid>`` for good. A second test (PostgreSQL) puts
the log's table out of reach, so that the pairing's insert raises the driver's own outage error.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import create_engine, text

from predictions.service.pairing import Arrival
from service.serving.cloudevents import half_spool, sweep_once
from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE
from tests import own_models
from tests.faults.conftest import wait_until
from tests.support import Server, elsewhere_settings, query_rows

MODEL = "ce_poison"


@pytest.fixture(scope="module")
def server(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("poison")
    settings = elsewhere_settings(
        module_db_url,
        root,
        {MODEL: "binary"},
        cloudevents_wait_s=3600.0,  # no pair is settled unanswered while the test runs
        cloudevents_sweep_interval_s=0.3,
    )
    with Server(settings) as srv:
        yield srv


def _arrival(event_id: str, half: str, body: Any) -> Arrival:
    now = datetime.now(UTC)
    return Arrival(MODEL, event_id, half, orjson.dumps(body), now, now)  # type: ignore[arg-type]


def _logged(srv: Server, event_ids: list[str]) -> set[str]:
    rows = query_rows(
        srv.settings.database_url.get_secret_value(),
        "select request_id from prediction_batches where source = 'cloudevents'",
    )
    return {r[0] for r in rows} & set(event_ids)


def test_the_replay_sets_a_hostile_half_aside_and_pairs_the_clean_ones(server: Server) -> None:
    data = own_models.reference(3, seed=11)
    rows = own_models.feature_rows(data)
    probs = {"predictions": [float(p) for p in own_models.answers("binary", data)]}
    hostile = [{**row, "x\u0000y": 1} for row in rows]
    poison = f"poison-{uuid.uuid4()}"
    clean = [f"clean-{uuid.uuid4()}" for _ in range(6)]
    spool = half_spool(server.state)
    spool.put(_arrival(poison, "request", {"instances": hostile}))  # oldest first: the replay meets it first
    spool.put(_arrival(poison, "response", probs))
    for event_id in clean:
        spool.put(_arrival(event_id, "request", {"instances": rows}))
        spool.put(_arrival(event_id, "response", probs))

    wait_until("the clean pairs logged", lambda: _logged(server, clean) == set(clean), timeout_s=30)
    names = lambda: sorted(p.name for p in spool.directory.iterdir())  # noqa: E731
    wait_until(
        "the spool drained", lambda: not [n for n in names() if n.endswith(".half") or ".claimed-" in n], 30
    )
    bad = [n for n in names() if n.endswith(".bad")]
    assert len(bad) == 1, names()
    reason = (spool.directory / f"{bad[0]}.reason").read_text()
    assert "U+0000" in reason and "x\\x00y" in reason, reason
    assert orjson.loads((spool.directory / bad[0]).read_bytes())["event_id"] == poison
    assert _logged(server, [poison]) == set()

    content, headers = own_models.kserve_message(RESPONSE_TYPE, poison, probs, model=MODEL)
    with server.client() as c:
        r = c.post("/v1/cloudevents", content=content, headers=headers)
    assert r.status_code == 400 and "U+0000" in r.json()["error"], r.text


def _execute(url: str, sql: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def test_the_drivers_own_outage_error_spools_the_half_and_the_replay_pairs_it_later(
    pg_url: str, tmp_path: Path
) -> None:
    """The pairing's insert raises psycopg's own errors (a raw cursor), not SQLAlchemy's: with the log's table
    out of reach (renamed away: psycopg's UndefinedTable, the schema's fault, an outage) a completing half is
    spooled, not a 500, and a replay pass gives its claim back until the table is there again, then pairs it.
    The passes are run here (no periodic sweep) so that each is seen whole. On main the route answered 500
    and the pass raised, leaving its claim under the live server."""
    settings = elsewhere_settings(
        pg_url,
        tmp_path,
        {MODEL: "binary"},
        cloudevents_wait_s=3600.0,
        cloudevents_sweep_interval_s=0,  # no periodic pass: the test runs them
    )
    data = own_models.reference(3, seed=12)
    rows = own_models.feature_rows(data)
    probs = {"predictions": [float(p) for p in own_models.answers("binary", data)]}
    event_id = f"away-{uuid.uuid4()}"
    with Server(settings) as srv, srv.client() as c:
        spool = half_spool(srv.state)
        content, headers = own_models.kserve_message(REQUEST_TYPE, event_id, {"instances": rows}, model=MODEL)
        assert c.post("/v1/cloudevents", content=content, headers=headers).json()["outcome"] == "waiting"
        _execute(pg_url, "alter table prediction_batches rename to prediction_batches_away")
        try:
            content, headers = own_models.kserve_message(RESPONSE_TYPE, event_id, probs, model=MODEL)
            r = c.post("/v1/cloudevents", content=content, headers=headers)
            assert r.status_code == 200 and r.json()["outcome"] == "spooled", r.text
            (spooled,) = [p.name for p in spool.directory.iterdir()]
            assert sweep_once(srv.state) == []  # the table is still away: nothing settled, nothing raised
            assert [p.name for p in spool.directory.iterdir()] == [spooled]  # given back, not claimed
        finally:
            _execute(pg_url, "alter table prediction_batches_away rename to prediction_batches")
        assert [outcome for _, outcome, _ in sweep_once(srv.state)] == ["logged"]
        assert _logged(srv, [event_id]) == {event_id}
        assert list(spool.directory.iterdir()) == []
