"""Spool slots left behind by workers that are gone: a later process adopts and replays them.

``serve --workers 3`` spools rows in ``<dir>``, ``<dir>/worker-1`` and ``<dir>/worker-2`` while the database
is down; the server restarts with one worker: its writer claims ``<dir>``, adopts the other two slots, and
every spooled row reaches the database exactly once, each slot's rows in their spooled order.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import select

from core.database import make_engine, open_database
from predictions.models import PredictionLog
from predictions.spool import Spool
from predictions.writer import LogWriter
from tests.predictions.test_prediction_log import make_rows


def _stored(url: str) -> list[tuple[int, str]]:
    """(id, prediction_id) of every logged row, in insertion order."""
    db = open_database(url)
    try:
        with db.session() as s:
            return [(r.id, r.prediction_id) for r in s.execute(select(PredictionLog)).scalars()]
    finally:
        db.dispose()


def test_rows_of_gone_workers_slots_are_replayed_once(database_url: str, tmp_path: Path) -> None:
    open_database(database_url).dispose()  # the schema: the database is reachable again
    root = tmp_path / "spool"
    # three workers, each in its own slot; the database was down, so their rows went to the spool
    workers = [Spool.claim(root) for _ in range(3)]
    assert [w.directory for w in workers] == [root, root / "worker-1", root / "worker-2"]
    slot1 = make_rows(7, start=0) + make_rows(5, start=100)
    workers[1].append(slot1[:7], sync=True)
    workers[1].append(slot1[7:], sync=True)
    slot2 = make_rows(9, start=200)
    workers[2].append(slot2, sync=True)
    for w in workers:
        w.close()  # the server stops
    # restarted with one worker: it claims the first slot and adopts the others, counting their rows
    spool = Spool.claim(root)
    assert spool.directory == root
    assert spool.pending_rows == len(slot1) + len(slot2)
    assert spool.pending_bytes > 0
    assert spool.oldest_age_s(time.time()) > 0
    engine = make_engine(database_url)
    writer = LogWriter(engine=engine, spool=spool, batch_max_rows=4, flush_interval_s=0.01)
    writer.start()
    try:
        assert writer.flush(timeout_s=30), "the adopted rows were not replayed"
        assert spool.pending_rows == 0 and spool.pending_bytes == 0
        assert spool.oldest_age_s(time.time()) == 0
    finally:
        writer.close()
        engine.dispose()
    stored = _stored(database_url)
    ids = [p for _, p in stored]
    assert len(ids) == len(set(ids)), "a row was written twice"
    assert set(ids) == {r.prediction_id for r in slot1 + slot2}, "a row was lost"
    assert writer.stats.rows_replayed == len(slot1) + len(slot2) and writer.stats.rows_dropped == 0
    order = {p: i for i, p in stored}  # each slot replayed in the order its rows were spooled
    for rows in (slot1, slot2):
        positions = [order[r.prediction_id] for r in rows]
        assert positions == sorted(positions)
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
    mine, theirs, orphaned = make_rows(3, start=0), make_rows(4, start=10), make_rows(5, start=20)
    live.append(theirs, sync=True)
    gone.append(orphaned, sync=True)
    gone.close()
    first.append(mine, sync=True)
    assert first.pending_rows == len(mine)  # adopts nothing yet: the claim came before ``gone`` left
    first.adopt()
    assert first.pending_rows == len(mine) + len(orphaned)  # ``live`` still holds its slot
    engine = make_engine(database_url)
    writer = LogWriter(engine=engine, spool=first, batch_max_rows=2, flush_interval_s=0.01)
    writer.start()
    try:
        assert writer.flush(timeout_s=30)
    finally:
        writer.close()
        engine.dispose()
    stored = {p for _, p in _stored(database_url)}
    assert stored == {r.prediction_id for r in mine + orphaned}
    assert live.pending_rows == len(theirs)  # the live worker replays its own rows itself
    live.close()
    later = Spool.claim(root)  # the slot's next owner, or an adopter, gets those rows
    try:
        assert later.directory == root and later.pending_rows == len(theirs)
    finally:
        later.close()
