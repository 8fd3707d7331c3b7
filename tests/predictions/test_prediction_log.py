"""The log writer and spool without a server: batching, outages, replay order, restart, retention."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from core import migrate
from core.database import make_engine, open_database
from predictions.models import PredictionLog
from predictions.service import (
    LogRow,
    count_predictions,
    new_prediction_id,
    purge_predictions,
    recent_predictions,
    record_feedback,
)
from predictions.spool import Spool
from predictions.writer import Durability, LogWriter


def make_rows(n: int, *, start: int = 0, when: datetime | None = None, model: str = "m") -> list[LogRow]:
    now = when or datetime.now(UTC)
    return [
        LogRow(
            new_prediction_id(),
            f"req-{start + i}",
            model,
            1,
            now,
            {"x": float(start + i), "c": "a"},
            0.5,
            ["x:observed_range"] if i % 2 else None,
            1.5,
            "ok",
            "v1",
        )
        for i in range(n)
    ]


async def _submit_all(writer: LogWriter, batches: list[list[LogRow]]) -> None:
    await asyncio.gather(*(writer.submit(b) for b in batches))


@pytest.mark.parametrize("durability", ["durable", "fast"])
def test_every_row_is_written_once(database_url: str, tmp_path: Path, durability: Durability) -> None:
    db = open_database(database_url)
    writer = LogWriter(
        engine=make_engine(database_url),
        spool=Spool(tmp_path / "spool"),
        durability=durability,
        batch_max_rows=50,
        flush_interval_s=0.01,
    )
    writer.start()
    batches = [make_rows(3, start=i * 3) for i in range(100)]
    asyncio.run(_submit_all(writer, batches))
    if durability == "durable":  # answered only after the commit: the rows are there now
        with db.session() as s:
            assert count_predictions(session=s, model_name="m") == 300
    writer.close()
    with db.session() as s:
        assert count_predictions(session=s, model_name="m") == 300
        last = recent_predictions(session=s, model_name="m", limit=5)
        assert len(last) == 5 and last[0].id > last[-1].id
        assert last[0].inputs["c"] == "a"
    assert writer.stats.rows_written == 300 and writer.stats.rows_dropped == 0 and writer.stats.batches > 1
    db.dispose()


def test_database_down_rows_spool_and_replay_in_order(tmp_path: Path) -> None:
    url = (
        f"sqlite:///{tmp_path / 'late.db'}"  # no tables yet: every write fails, as if the database were down
    )
    writer = LogWriter(
        engine=make_engine(url), spool=Spool(tmp_path / "spool"), durability="durable", retry_interval_s=0.05
    )
    writer.start()
    rows = make_rows(120)
    asyncio.run(_submit_all(writer, [rows[i : i + 10] for i in range(0, 120, 10)]))
    assert writer.stats.rows_spooled == 120 and writer.spool.pending_rows == 120
    assert not writer.stats.database_ok and writer.stats.write_errors >= 1
    migrate.upgrade(url)  # the database "comes back"
    assert writer.flush(timeout_s=20)
    writer.close()
    db = open_database(url)
    with db.session() as s:
        stored = list(s.scalars(select(PredictionLog.request_id).order_by(PredictionLog.id)))
    db.dispose()
    assert sorted(stored) == sorted(r.request_id for r in rows) and len(stored) == 120
    spooled_order = [r.request_id for r in rows]
    assert [r for r in stored if r in spooled_order] == [r for r in spooled_order if r in stored]
    assert writer.stats.rows_replayed == 120 and writer.stats.rows_dropped == 0
    assert writer.spool.pending_rows == 0 and writer.spool.pending_bytes == 0


def test_spool_survives_a_restart_and_is_replayed_without_duplicates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'late.db'}"
    spool_dir = tmp_path / "spool"
    first = LogWriter(
        engine=make_engine(url),
        spool=Spool(spool_dir),
        durability="fast",
        flush_interval_s=0.01,
        retry_interval_s=60,
    )
    first.start()
    rows = make_rows(30)
    asyncio.run(_submit_all(first, [rows]))
    first.close(timeout_s=5)  # the database is down at shutdown: rows stay on disk
    assert Spool(spool_dir).pending_rows == 30
    migrate.upgrade(url)
    # a crash between replaying and moving the cursor means some rows are replayed twice: ignored
    from predictions.service import write_log_rows

    write_log_rows(engine=make_engine(url), rows=rows[:10], idempotent=True)
    second = LogWriter(engine=make_engine(url), spool=Spool(spool_dir), durability="durable")
    second.start()
    assert second.flush(timeout_s=20)
    second.close()
    db = open_database(url)
    with db.session() as s:
        assert count_predictions(session=s) == 30
    db.dispose()


def test_full_queue_spills_to_disk_instead_of_dropping(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    migrate.upgrade(url)
    writer = LogWriter(
        engine=make_engine(url),
        spool=Spool(tmp_path / "spool"),
        durability="fast",
        queue_max_rows=5,
        flush_interval_s=0.5,
    )
    writer.start()
    asyncio.run(_submit_all(writer, [make_rows(2, start=i * 2) for i in range(20)]))
    assert writer.stats.rows_spooled > 0
    writer.close()
    db = open_database(url)
    with db.session() as s:
        assert count_predictions(session=s) == 40
    db.dispose()
    assert writer.stats.rows_dropped == 0


def test_feedback_and_retention(database_url: str) -> None:
    db = open_database(database_url)
    engine = make_engine(database_url)
    old = make_rows(5, when=datetime.now(UTC) - timedelta(days=40))
    new = make_rows(5, start=5)
    others = make_rows(4, start=10, when=datetime.now(UTC) - timedelta(days=35), model="other")
    from predictions.service import write_log_rows

    write_log_rows(engine=engine, rows=old + others + new, idempotent=False)
    with db.session() as s:
        stored, unknown = record_feedback(
            session=s,
            model_name="m",
            labels=[
                (old[0].prediction_id, 1.0),
                (new[0].prediction_id, 0.0),
                (new[0].prediction_id, 1.0),
                ("nope", 1.0),
            ],
        )
    assert stored == 2 and unknown == ["nope"]
    with db.session() as s:  # a resent label replaces the first one
        rows = s.execute(select(PredictionLog.prediction_id).where(PredictionLog.request_id == "req-5")).all()
        assert len(rows) == 1
    with db.session() as s:
        deleted = purge_predictions(session=s, before=datetime.now(UTC) - timedelta(days=30), chunk=3)
    assert deleted == 3  # chunked
    with db.session() as s:
        while purge_predictions(session=s, before=datetime.now(UTC) - timedelta(days=30), chunk=3):
            pass
    with db.session() as s:
        assert count_predictions(session=s) == 5
        _, unknown = record_feedback(session=s, model_name="m", labels=[(old[1].prediction_id, 1.0)])
        assert unknown == [old[1].prediction_id]
        from predictions.models import PredictionFeedback

        labels = {f.prediction_id: f.label for f in s.scalars(select(PredictionFeedback))}
        assert labels == {new[0].prediction_id: 1.0}
    engine.dispose()
    db.dispose()


def test_prediction_ids_are_unique_and_time_ordered() -> None:
    ids = [new_prediction_id() for _ in range(2000)]
    assert len(set(ids)) == 2000
    assert all(i[14] == "7" for i in ids)
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids)


@pytest.mark.parametrize("n", [1, 7, 8, 32, 1024, 2048, 5000])
def test_prediction_ids_in_bulk_are_valid_v7_uuids_unique_and_time_ordered(n: int) -> None:
    import time
    import uuid

    from predictions.service import new_prediction_ids

    before = time.time_ns() // 1_000_000
    batches = [new_prediction_ids(n) for _ in range(20)]
    after = time.time_ns() // 1_000_000
    ids = [i for batch in batches for i in batch]
    assert all(len(batch) == n for batch in batches)
    assert len(set(ids)) == len(ids)
    for i in ids:
        parsed = uuid.UUID(i)
        assert str(parsed) == i and parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert before <= parsed.int >> 80 <= after  # the 48-bit millisecond clock
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids)
    if n <= 2048:  # one shared prefix, counted up: a request's ids are in order
        assert all(batch == sorted(batch) for batch in batches)


def test_prediction_ids_of_a_forked_child_differ_from_its_parents() -> None:
    import os

    from predictions.service import new_prediction_ids

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then exit without running the parent's cleanup
        os.write(write, "\n".join(new_prediction_ids(64)).encode())
        os._exit(0)
    os.close(write)
    mine = new_prediction_ids(64)
    with os.fdopen(read) as pipe:
        theirs = pipe.read().split("\n")
    os.waitpid(pid, 0)
    assert len(theirs) == 64
    assert not set(mine) & set(theirs)
    assert {i[19:] for i in mine}.isdisjoint(i[19:] for i in theirs)  # their random parts differ too


def test_time_window_boundary_includes_a_row_logged_exactly_on_it(database_url: str) -> None:
    """A timestamp with zero microseconds compares like any other (SQLite stores text timestamps)."""
    from predictions.service import write_log_rows

    db = open_database(database_url)
    engine = make_engine(database_url)
    edge = datetime(2026, 11, 30, 11, 55, 0, tzinfo=UTC)
    write_log_rows(
        engine=engine,
        rows=make_rows(1, when=edge) + make_rows(1, start=1, when=edge - timedelta(seconds=1)),
        idempotent=False,
    )
    with db.session() as s:
        at_or_after = s.scalars(select(PredictionLog.request_id).where(PredictionLog.logged_at >= edge)).all()
        stored = s.scalars(select(PredictionLog.logged_at).where(PredictionLog.request_id == "req-0")).one()
    assert at_or_after == ["req-0"]
    assert stored.replace(tzinfo=UTC) == edge
    engine.dispose()
    db.dispose()


def test_a_postgres_batch_is_one_autocommitted_statement_and_the_pool_gets_its_connection_back_as_lent(
    postgres_url: str,
) -> None:
    """The writer sends a batch in autocommit mode (one round trip); ORM sessions on the same pool must still
    get connections in transaction mode, and a batch that fails writes none of its rows."""
    from predictions.service import write_log_rows
    from tests.support import postgres_schema

    with postgres_schema(postgres_url) as url:
        migrate.upgrade(url)
        engine = make_engine(url, pool_size=1, max_overflow=0)  # one connection: the same one each time
        try:
            rows = make_rows(5)
            assert write_log_rows(engine=engine, rows=rows, idempotent=False) == 5
            raw = engine.raw_connection()
            try:
                assert raw.driver_connection.autocommit is False  # type: ignore[union-attr]
            finally:
                raw.close()
            with pytest.raises(Exception, match="prediction_id"):  # a duplicate id in a fresh batch: refused
                write_log_rows(engine=engine, rows=make_rows(3, start=100) + rows[:1], idempotent=False)
            assert write_log_rows(engine=engine, rows=rows + make_rows(2, start=200), idempotent=True) == 7
            db = open_database(url)
            with db.session() as s:
                assert count_predictions(session=s) == 7  # 5, none of the refused batch, 2 new of the replay
            db.dispose()
        finally:
            engine.dispose()


@pytest.mark.parametrize("durability", ["durable", "fast"])
def test_a_pooled_connection_the_server_closed_costs_no_spooling(
    pg_url: str, tmp_path: Path, durability: Durability
) -> None:
    """The serving writer's engine pings no connection before a batch: one that PostgreSQL closed while it
    sat in the pool (a restart, an idle timeout) fails its batch, which goes again on a fresh connection."""
    from sqlalchemy import text

    from predictions.writer import writer_engine

    engine = writer_engine(pg_url)
    writer = LogWriter(
        engine=engine, spool=Spool(tmp_path / "spool"), durability=durability, flush_interval_s=0.01
    )
    writer.start()
    try:
        asyncio.run(_submit_all(writer, [make_rows(5)]))
        assert writer.flush(timeout_s=20)
        pids = [conn.info.backend_pid for conn in _pooled(engine)]
        assert pids, "the writer's connection went back to the pool"
        admin = make_engine(pg_url)
        with admin.connect() as conn:
            for pid in pids:
                assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar() is True
        admin.dispose()
        asyncio.run(_submit_all(writer, [make_rows(7, start=5)]))
        assert writer.flush(timeout_s=20)
    finally:
        writer.close()
        engine.dispose()
    assert writer.stats.rows_written == 12
    assert writer.stats.rows_spooled == 0 and writer.stats.write_errors == 0 and writer.stats.database_ok
    db = open_database(pg_url)
    with db.session() as s:
        assert count_predictions(session=s, model_name="m") == 12
    db.dispose()


def _pooled(engine: Any) -> list[Any]:
    """The psycopg connections resting in ``engine``'s pool (checked out and in again at once)."""
    held = [engine.raw_connection() for _ in range(engine.pool.checkedin())]
    try:
        return [raw.driver_connection for raw in held]
    finally:
        for raw in held:
            raw.close()
