"""Spool slots left behind by workers that are gone: a later process adopts and replays them.

``serve --workers 3`` spools rows in ``<dir>``, ``<dir>/worker-1`` and ``<dir>/worker-2`` while the database
is down; the server restarts with one worker: its writer claims ``<dir>``, adopts the other two slots, and
every spooled prediction reaches the database exactly once, each slot's rows in their spooled order. A slot
an older version left (one prediction per line) is read as batches of one and replayed the same way, also
into a log the upgrade converted meanwhile.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import create_engine, select

from core import migrate
from core.database import make_engine, open_database
from predictions.batch import ids_from
from predictions.models import PredictionBatch
from predictions.service import recent_predictions
from predictions.spool import Spool
from predictions.writer import LogWriter
from tests.predictions.logdata import ids, make_rows, old_line, old_rows, write_rows_as_they_were
from tests.support import database_at


def _stored(url: str) -> list[tuple[int, str]]:
    """(batch id, prediction id) of every logged prediction, in log order."""
    db = open_database(url, upgrade=False)
    try:
        with db.session() as s:
            batches = s.execute(select(PredictionBatch).order_by(PredictionBatch.id)).scalars()
            return [(b.id, pid) for b in batches for pid in ids_from(b.first_id, b.size)]
    finally:
        db.dispose()


def _replay(url: str, spool: Spool, **kw: Any) -> LogWriter:
    """A writer on ``spool`` until everything spooled (adopted slots included) is in the database."""
    engine = make_engine(url)
    writer = LogWriter(engine=engine, spool=spool, flush_interval_s=0.01, **kw)
    writer.start()
    try:
        assert writer.flush(timeout_s=30), "the spooled rows were not replayed"
    finally:
        writer.close()
        engine.dispose()
    return writer


def test_rows_of_gone_workers_slots_are_replayed_once(database_url: str, tmp_path: Path) -> None:
    open_database(database_url).dispose()  # the schema: the database is reachable again
    root = tmp_path / "spool"
    # three workers, each in its own slot; the database was down, so their rows went to the spool
    workers = [Spool.claim(root) for _ in range(3)]
    assert [w.directory for w in workers] == [root, root / "worker-1", root / "worker-2"]
    slot1 = make_rows(7, start=0, per_request=3) + make_rows(5, start=100, per_request=5)
    workers[1].append(slot1[:3], sync=True)  # requests of 3, 3, 1
    workers[1].append(slot1[3:], sync=True)  # a request of 5
    slot2 = make_rows(9, start=200, per_request=2)
    workers[2].append(slot2, sync=True)
    for w in workers:
        w.close()  # the server stops
    # restarted with one worker: it claims the first slot and adopts the others, counting their predictions
    spool = Spool.claim(root)
    assert spool.directory == root
    assert spool.pending_rows == 12 + 9
    assert spool.pending_bytes > 0
    assert spool.oldest_age_s(time.time()) > 0
    writer = _replay(database_url, spool, batch_max_rows=4)
    assert spool.pending_rows == 0 and spool.pending_bytes == 0
    assert spool.oldest_age_s(time.time()) == 0
    stored = _stored(database_url)
    found = [p for _, p in stored]
    assert len(found) == len(set(found)), "a prediction was written twice"
    assert set(found) == set(ids(slot1 + slot2)), "a prediction was lost"
    assert writer.stats.rows_replayed == 21 and writer.stats.rows_dropped == 0
    order = [p for _, p in stored]  # each slot replayed in the order its rows were spooled
    for rows in (slot1, slot2):
        positions = [order.index(p) for p in ids(rows)]
        assert positions == sorted(positions)
    assert len({i for i, _ in stored}) == len(slot1) + len(slot2)  # one batch row per spooled batch
    # the adopted slots are empty and free again: a new worker can claim worker-1
    again = [Spool.claim(root) for _ in range(3)]
    try:
        assert [s.directory for s in again] == [root, root / "worker-1", root / "worker-2"]
        assert all(s.pending_rows == 0 for s in again)
    finally:
        for s in again:
            s.close()


def test_a_slot_held_by_a_live_worker_is_left_to_it(database_url: str, tmp_path: Path) -> None:
    open_database(database_url).dispose()
    root = tmp_path / "spool"
    first, live, gone = Spool.claim(root), Spool.claim(root), Spool.claim(root)
    mine = make_rows(3, start=0, per_request=3)
    theirs = make_rows(4, start=10, per_request=2)
    orphaned = make_rows(5, start=20, per_request=4)
    live.append(theirs, sync=True)
    gone.append(orphaned, sync=True)
    gone.close()
    first.append(mine, sync=True)
    assert first.pending_rows == 3  # adopts nothing yet: the claim came before ``gone`` left
    assert first.adopt() == 5
    assert first.pending_rows == 3 + 5  # ``live`` still holds its slot
    _replay(database_url, first, batch_max_rows=2)
    assert {p for _, p in _stored(database_url)} == set(ids(mine + orphaned))
    assert live.pending_rows == 4  # the live worker replays its own rows itself
    live.close()
    later = Spool.claim(root)  # the slot's next owner, or an adopter, gets those rows
    try:
        assert later.directory == root and later.pending_rows == 4
    finally:
        later.close()


def _old_slot(slot: Path, rows: list[dict[str, Any]], widths: list[int]) -> None:
    """A spool segment as an older version left it: one prediction per line, each line of the width its
    version wrote (11 values before the typed columns, 14 before the outputs, 15)."""
    slot.mkdir(parents=True, exist_ok=True)
    lines = [orjson.dumps(old_line(row)[:width]) + b"\n" for row, width in zip(rows, widths, strict=True)]
    (slot / "000000000001.jsonl").write_bytes(b"".join(lines))


def test_an_older_versions_slot_is_read_as_batches_of_one_and_replayed(
    database_url: str, tmp_path: Path
) -> None:
    open_database(database_url).dispose()
    root = tmp_path / "spool"
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    old = old_rows(6, when=at, per_request=3)  # two requests of three, as the older version logged them
    old[2]["outputs"] = [0.25, 0.75]  # a multi-class answer (lines of 15 values)
    old[4]["probability"] = None
    _old_slot(root / "worker-1", old, [11, 14, 15, 15, 11, 14])
    mine = make_rows(2, start=50, per_request=2, when=at + timedelta(minutes=1))
    spool = Spool.claim(root)  # adopts the slot left behind at the claim
    assert spool.pending_rows == 6  # six lines: six predictions
    spool.append(mine, sync=True)
    assert spool.pending_rows == 8
    writer = _replay(database_url, spool, batch_max_rows=4)
    assert writer.stats.rows_replayed == 8 and writer.stats.rows_dropped == 0
    assert spool.corrupt_lines == 0
    stored = [p for _, p in _stored(database_url)]
    assert stored == [r["prediction_id"] for r in old] + ids(mine)  # the adopted slot first, in its order
    db = open_database(database_url, upgrade=False)
    try:
        with db.session() as s:
            logged = {p.prediction_id: p for p in recent_predictions(session=s, model_name="m")}
    finally:
        db.dispose()
    for row in old:
        back = logged[row["prediction_id"]]
        assert back.inputs == row["inputs"] and back.flags == row["flags"]
        assert (back.request_id, back.logged_at, back.probability) == (
            row["request_id"],
            at,
            row["probability"],
        )
    assert logged[old[2]["prediction_id"]].outputs == [0.25, 0.75]
    assert all(logged[r["prediction_id"]].outputs is None for i, r in enumerate(old) if i != 2)


@pytest.fixture(params=["sqlite", "postgresql"])
def url_0017(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database at revision 0017 (the log of one row per prediction), on each backend."""
    with database_at(request, tmp_path, "0017_log_outputs") as url:
        yield url


def test_an_older_versions_spool_replayed_after_the_upgrade_writes_each_prediction_once(
    url_0017: str, tmp_path: Path
) -> None:
    """The older version committed a request of three predictions and spooled it too (a durable request
    whose commit was slow: "the replay skips the prediction ids the database already has"); the upgrade
    converted the three rows into one batch; the new version replays the spooled lines: nothing twice."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    committed = old_rows(3, when=at, per_request=3)  # in the log and in the spool
    spooled = old_rows(2, start=3, when=at + timedelta(seconds=1), per_request=2)  # in the spool only
    engine = create_engine(url_0017)
    try:
        write_rows_as_they_were(engine, committed)
    finally:
        engine.dispose()
    root = tmp_path / "spool"
    _old_slot(root, committed + spooled, [15] * 5)
    migrate.upgrade(url_0017)
    assert [p for _, p in _stored(url_0017)] == [r["prediction_id"] for r in committed]
    assert len({i for i, _ in _stored(url_0017)}) == 1  # the request converted into one batch
    spool = Spool.claim(root)
    assert spool.pending_rows == 5
    writer = _replay(url_0017, spool)
    assert writer.stats.rows_dropped == 0
    stored = Counter(p for _, p in _stored(url_0017))
    twice = [i for i, r in enumerate(committed + spooled) if stored[r["prediction_id"]] != 1]
    assert not twice, f"predictions {twice} of the spool were not written exactly once: {stored}"
    assert set(stored) == {r["prediction_id"] for r in committed + spooled}
