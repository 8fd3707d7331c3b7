"""The log writer and spool without a server: batching, outages, replay order, restart, retention; the log
read back (recent predictions, a prediction found by its id in its request's batch, feedback on it).

A request's predictions are one row of ``prediction_batches`` (``predictions.batch.LogBatch``); every count
here (written, spooled, replayed, purged) is of predictions.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from core import migrate
from core.database import make_engine, open_database
from predictions import typed
from predictions.batch import LogBatch, ids_from
from predictions.models import PredictionBatch, PredictionFeedback
from predictions.pending import RequestRows, build
from predictions.service import (
    classify_write_error,
    count_predictions,
    logged_predictions,
    new_prediction_id,
    new_prediction_ids,
    purge_predictions,
    recent_predictions,
    record_feedback,
    write_log_rows,
)
from predictions.spool import Spool
from predictions.writer import Durability, LogWriter
from tests.predictions.logdata import FLAG, ids, make_rows


def batch_count(url: str, model: str | None = None) -> int:
    """Rows of ``prediction_batches`` (requests, not predictions)."""
    db = open_database(url, upgrade=False)
    try:
        with db.session() as s:
            stmt = select(func.count()).select_from(PredictionBatch)
            if model is not None:
                stmt = stmt.where(PredictionBatch.model_name == model)
            return int(s.scalar(stmt) or 0)
    finally:
        db.dispose()


def stored_ids(url: str) -> list[str]:
    """Every logged prediction id, in log order (batch id, then position)."""
    db = open_database(url, upgrade=False)
    try:
        with db.session() as s:
            batches = s.scalars(select(PredictionBatch).order_by(PredictionBatch.id))
            return [pid for b in batches for pid in ids_from(b.first_id, b.size)]
    finally:
        db.dispose()


async def _submit_all(writer: LogWriter, batches: list[list[LogBatch]]) -> None:
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
    requests = [make_rows(3, start=i * 3, per_request=3) for i in range(100)]  # 100 requests of 3
    assert all(len(r) == 1 and r[0].size == 3 for r in requests)
    asyncio.run(_submit_all(writer, requests))
    if durability == "durable":  # answered only after the commit: the rows are there now
        with db.session() as s:
            assert count_predictions(session=s, model_name="m") == 300
    writer.close()
    everything = ids([b for r in requests for b in r])
    assert stored_ids(database_url) == everything  # each once, in the order the requests came
    assert batch_count(database_url) == 100  # one row per request
    with db.session() as s:
        assert count_predictions(session=s, model_name="m") == 300
        last = recent_predictions(session=s, model_name="m", limit=5)  # cut inside the 99th request
    assert [p.prediction_id for p in last] == everything[::-1][:5]  # newest first
    assert [p.inputs for p in last] == [{"x": float(i), "c": "a"} for i in (299, 298, 297, 296, 295)]
    assert [p.probability for p in last] == [0.9, 0.8, 0.7, 0.6, 0.5]
    assert [p.flags for p in last] == [None, FLAG, None, None, FLAG]  # i % 2 within each request
    assert [p.request_id for p in last] == ["req-297"] * 3 + ["req-294"] * 2
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
    rows = make_rows(120, per_request=4)  # 30 requests of 4 predictions
    assert len(rows) == 30
    asyncio.run(_submit_all(writer, [rows[i : i + 3] for i in range(0, 30, 3)]))
    assert writer.stats.rows_spooled == 120 and writer.spool.pending_rows == 120  # predictions
    assert not writer.stats.database_ok and writer.stats.write_errors >= 1
    migrate.upgrade(url)  # the database "comes back"
    assert writer.flush(timeout_s=20)
    writer.close()
    db = open_database(url)
    with db.session() as s:
        stored = list(s.scalars(select(PredictionBatch.request_id).order_by(PredictionBatch.id)))
    db.dispose()
    assert stored == [r.request_id for r in rows]  # every request once, in the order spooled
    assert stored_ids(url) == ids(rows)
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
    rows = make_rows(30, per_request=3)
    asyncio.run(_submit_all(first, [rows]))
    first.close(timeout_s=5)  # the database is down at shutdown: rows stay on disk
    assert Spool(spool_dir).pending_rows == 30
    migrate.upgrade(url)
    # a crash between replaying and moving the cursor means some batches are replayed twice: ignored
    assert write_log_rows(engine=make_engine(url), rows=rows[:4], idempotent=True) == 12
    second = LogWriter(engine=make_engine(url), spool=Spool(spool_dir), durability="durable")
    second.start()
    assert second.flush(timeout_s=20)
    second.close()
    db = open_database(url)
    with db.session() as s:
        assert count_predictions(session=s) == 30
    db.dispose()
    assert batch_count(url) == 10 and stored_ids(url) == ids(rows)


def test_full_queue_spills_to_disk_instead_of_dropping(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    migrate.upgrade(url)
    writer = LogWriter(
        engine=make_engine(url),
        spool=Spool(tmp_path / "spool"),
        durability="fast",
        queue_max_rows=5,  # predictions: two requests of 2
        flush_interval_s=0.5,
    )
    writer.start()
    requests = [make_rows(2, start=i * 2, per_request=2) for i in range(20)]
    requests.append(make_rows(6, start=100, per_request=6))  # more than the queue holds: to the spool
    asyncio.run(_submit_all(writer, requests))
    assert writer.stats.rows_spooled >= 6
    writer.close()
    db = open_database(url)
    with db.session() as s:
        assert count_predictions(session=s) == 46
    db.dispose()
    assert sorted(stored_ids(url)) == sorted(ids([b for r in requests for b in r]))
    assert writer.stats.rows_dropped == 0


def test_feedback_and_retention(database_url: str) -> None:
    db = open_database(database_url)
    engine = make_engine(database_url)
    ms = timedelta(milliseconds=1)
    old = make_rows(5, when=datetime.now(UTC) - timedelta(days=40), per_request=2, spacing=ms)  # 2, 2, 1
    new = make_rows(5, start=5, per_request=5)  # one request of 5
    others = make_rows(4, start=10, when=datetime.now(UTC) - timedelta(days=35), model="other", per_request=2)
    assert [b.size for b in old] == [2, 2, 1] and [b.size for b in new] == [5]
    assert write_log_rows(engine=engine, rows=old + others + new, idempotent=False) == 14
    old_ids, new_ids = ids(old), ids(new)
    with db.session() as s:
        stored, unknown = record_feedback(
            session=s,
            model_name="m",
            labels=[
                (old_ids[1], 1.0),  # the second prediction of the first request
                (new_ids[2], 0.0),  # the middle of a request of 5...
                (new_ids[2], 1.0),  # ... sent twice in one call: the last label wins
                (new_ids[4], 0.0),
                ("nope", 1.0),
                (ids(others)[0], 1.0),  # a prediction of another model
            ],
        )
    assert stored == 3 and unknown == ["nope", ids(others)[0]]
    with db.session() as s:
        batch_id = s.scalar(select(PredictionBatch.id).where(PredictionBatch.request_id == "req-5"))
        label = s.get(PredictionFeedback, (new_ids[2], new[0].logged_at))
        assert label is not None
        # the label carries its prediction: its batch, its place there, its output, version and status
        assert (label.label, label.log_id, label.position, label.probability) == (1.0, batch_id, 2, 0.7)
        assert (label.model_version, label.status, label.model_name) == (1, "ok", "m")
    with db.session() as s:  # a label sent again replaces the first one
        assert record_feedback(session=s, model_name="m", labels=[(new_ids[2], 0.0)]) == (1, [])
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(PredictionFeedback)) == 3
    cutoff = datetime.now(UTC) - timedelta(days=30)
    deleted = []
    for _ in range(4):  # two batches a call, the predictions they held returned
        with db.session() as s:
            deleted.append(purge_predictions(session=s, before=cutoff, chunk=2))
    assert deleted == [4, 3, 2, 0]  # m: 2 + 2; m: 1 and other: 2; other: 2
    with db.session() as s:
        assert count_predictions(session=s) == 5 and count_predictions(session=s, model_name="other") == 0
        _, unknown = record_feedback(session=s, model_name="m", labels=[(old_ids[0], 1.0)])
        assert unknown == [old_ids[0]]
        labels = {f.prediction_id: f.label for f in s.scalars(select(PredictionFeedback))}
    assert labels == {new_ids[2]: 0.0, new_ids[4]: 0.0}  # the old label went with its prediction
    engine.dispose()
    db.dispose()


def test_a_prediction_is_found_in_its_batch_whatever_the_runs_of_its_request(database_url: str) -> None:
    """A request whose ids are several runs (more than 2048 of them, or ids that do not count up) is one
    batch per run: each id is found in its batch, at its position, with its output."""
    db = open_database(database_url)
    engine = make_engine(database_url)
    at = datetime.now(UTC).replace(microsecond=0)
    split = new_prediction_ids(3) + new_prediction_ids(2)  # two runs in one request
    many = new_prediction_ids(2100)  # runs of at most 2048 ids
    requests = [
        RequestRows(
            model_name="m",
            model_version=3,
            logged_at=at,
            request_id=f"r{k}",
            protocol="v2",
            latency_ms=2.0,
            status="ok",
            ids=these,
            inputs=[{"x": float(i)} for i in range(len(these))],
            values=[i / len(these) for i in range(len(these))],
            flags=[None] * len(these),
            layout=None,
        )
        for k, these in enumerate((split, many))
    ]
    batches = [b for built in build(requests) for b in built]
    assert [b.size for b in batches] == [3, 2, 2048, 52]
    assert write_log_rows(engine=engine, rows=batches, idempotent=False) == 2105
    with db.session() as s:
        log_ids = list(s.scalars(select(PredictionBatch.id).order_by(PredictionBatch.id)))
        probe = [split[0], split[4], many[0], many[2047], many[2048], many[2099]]
        last = batches[3]
        beyond = last.id_prefix + f"{last.id_low + last.size:03x}" if last.id_low + last.size < 4096 else None
        strangers = ["nope", split[0].upper(), *([beyond] if beyond else [])]
        found = logged_predictions(session=s, model_name="m", ids=probe + strangers)
        assert logged_predictions(session=s, model_name="other", ids=probe) == {}
        everything = logged_predictions(session=s, model_name="m", ids=split + many)
        assert count_predictions(session=s, model_name="m") == 2105
    assert set(found) == set(probe)
    where = {pid: (log_ids[k], pos) for k, b in enumerate(batches) for pos, pid in enumerate(b.ids())}
    for pid in probe:
        assert (found[pid].log_id, found[pid].position) == where[pid], pid
        assert found[pid].model_version == 3 and found[pid].status == "ok" and found[pid].logged_at == at
    assert found[split[4]].probability == 4 / 5 and found[many[2099]].probability == 2099 / 2100
    assert len(everything) == 2105
    assert all((everything[p].log_id, everything[p].position) == where[p] for p in split + many)
    engine.dispose()
    db.dispose()


def test_recent_predictions_decode_typed_and_document_batches_newest_first(database_url: str) -> None:
    """Typed batches read back as their documents (numbers as floats, a missing number as None, a missing
    category left out, a text outside the layout as itself); document batches as they were sent."""
    db = open_database(database_url)
    engine = make_engine(database_url)
    layout = typed.make_layout(["a", "b"], ["c"], [["x", "y"]])
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)

    def request(k: int, docs: list[dict[str, Any]], **kw: Any) -> RequestRows:
        fields: dict[str, Any] = {
            "model_name": "m",
            "model_version": 1,
            "logged_at": t0 + timedelta(minutes=k),
            "request_id": f"r{k}",
            "protocol": "v2",
            "latency_ms": 1.0,
            "status": "ok",
            "ids": new_prediction_ids(len(docs)),
            "inputs": docs,
            "values": [0.1 * (i + 1) for i in range(len(docs))],
            "flags": [None] * len(docs),
            "layout": layout,
            **kw,
        }
        return RequestRows(**fields)

    typed_docs: list[dict[str, Any]] = [{"a": 1.5, "b": 2, "c": "x"}, {"a": None, "c": "new"}, {"b": -3}]
    requests = [
        request(0, typed_docs, flags=[None, ["b:missing"], None]),
        request(1, [{"a": "text", "c": "y"}, {"a": 2.0}]),  # a value the contract refuses: documents
        request(2, [{"a": 1.0, "extra": True}]),  # a key outside the layout: typed, documents kept too
        request(
            3, [{"a": 4.0}, {"a": 5.0}], layout=None, values=[0.9, None], outputs=[[0.1, 0.9], [0.6, 0.4]]
        ),
    ]
    batches = [b for built in build(requests) for b in built]
    assert [b.layout is not None for b in batches] == [True, False, True, False]
    assert [b.inputs is not None for b in batches] == [False, True, True, True]
    write_log_rows(engine=engine, rows=batches, idempotent=False)
    with db.session() as s:
        everything = recent_predictions(session=s, model_name="m")
        newest = recent_predictions(session=s, model_name="m", limit=4)
        recent = recent_predictions(session=s, model_name="m", since=t0 + timedelta(minutes=2))
    assert [p.prediction_id for p in everything] == ids(batches)[::-1]
    assert [p.inputs for p in everything] == [
        {"a": 5.0},
        {"a": 4.0},
        {"a": 1.0, "extra": True},
        {"a": 2.0},
        {"a": "text", "c": "y"},
        {"a": None, "b": -3.0},  # the typed copy: every number (None when absent), categories when present
        {"a": None, "b": None, "c": "new"},
        {"a": 1.5, "b": 2.0, "c": "x"},
    ]
    assert [p.outputs for p in everything[:2]] == [[0.6, 0.4], [0.1, 0.9]]
    assert all(p.outputs is None for p in everything[2:])
    assert everything[0].probability is None and everything[1].probability == 0.9
    assert [p.flags for p in everything[-3:]] == [None, ["b:missing"], None]
    assert [p.request_id for p in everything] == ["r3", "r3", "r2", "r1", "r1", "r0", "r0", "r0"]
    assert newest == everything[:4]
    assert recent == everything[:3]
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
    db = open_database(database_url)
    engine = make_engine(database_url)
    edge = datetime(2026, 11, 30, 11, 55, 0, tzinfo=UTC)
    write_log_rows(
        engine=engine,
        rows=make_rows(2, when=edge, per_request=2) + make_rows(1, start=2, when=edge - timedelta(seconds=1)),
        idempotent=False,
    )
    with db.session() as s:
        at_or_after = s.scalars(
            select(PredictionBatch.request_id).where(PredictionBatch.logged_at >= edge)
        ).all()
        stored = s.scalars(
            select(PredictionBatch.logged_at).where(PredictionBatch.request_id == "req-0")
        ).one()
        since = recent_predictions(session=s, model_name="m", since=edge)
    assert at_or_after == ["req-0"]
    assert stored.replace(tzinfo=UTC) == edge
    assert [p.request_id for p in since] == ["req-0", "req-0"]
    engine.dispose()
    db.dispose()


def test_a_time_before_year_1000_is_stored_with_four_digits_and_sorts_before_the_others(
    database_url: str,
) -> None:
    """SQLite keeps a time as text compared as text: the writer's insert pads the year (``strftime("%Y")``
    wrote ``999-...``, which read back as no time at all and sorted after ``2026-...``, so retention never
    purged it). The API refuses such a time (core.times); the writer stores whatever it is handed right."""
    db = open_database(database_url)
    engine = make_engine(database_url)
    early = datetime(999, 12, 31, 23, 0, 0, 1, tzinfo=UTC)
    write_log_rows(
        engine=engine,
        rows=make_rows(1, when=early) + make_rows(1, start=1, when=datetime(2026, 11, 30, tzinfo=UTC)),
        idempotent=False,
    )
    with db.session() as s:
        stored = s.scalars(select(PredictionBatch.logged_at).order_by(PredictionBatch.logged_at)).all()
        n = purge_predictions(session=s, before=datetime(2000, 1, 1, tzinfo=UTC))
    assert [t.replace(tzinfo=UTC) for t in stored] == [early, datetime(2026, 11, 30, tzinfo=UTC)]
    assert n == 1
    engine.dispose()
    db.dispose()


def test_a_postgres_batch_is_one_autocommitted_statement_and_the_pool_gets_its_connection_back_as_lent(
    postgres_url: str,
) -> None:
    """The writer sends a batch in autocommit mode (one round trip); ORM sessions on the same pool must still
    get connections in transaction mode, and a batch that fails writes none of its rows."""
    from tests.support import postgres_schema

    with postgres_schema(postgres_url) as url:
        migrate.upgrade(url)
        engine = make_engine(url, pool_size=1, max_overflow=0)  # one connection: the same one each time
        try:
            rows = make_rows(5, per_request=2)  # 2, 2, 1
            assert write_log_rows(engine=engine, rows=rows, idempotent=False) == 5
            raw = engine.raw_connection()
            try:
                assert raw.driver_connection.autocommit is False  # type: ignore[union-attr]
            finally:
                raw.close()
            with pytest.raises(Exception, match="duplicate key") as refused:  # a batch the table has
                write_log_rows(engine=engine, rows=make_rows(3, start=100) + rows[:1], idempotent=False)
            assert classify_write_error(refused.value) == "duplicate"
            assert write_log_rows(engine=engine, rows=rows + make_rows(2, start=200), idempotent=True) == 7
            db = open_database(url)
            with db.session() as s:
                assert count_predictions(session=s) == 7  # 5, none of the refused batch, 2 new of the replay
            db.dispose()
            assert batch_count(url) == 5
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
        asyncio.run(_submit_all(writer, [make_rows(5, per_request=5)]))
        assert writer.flush(timeout_s=20)
        pids = [conn.info.backend_pid for conn in _pooled(engine)]
        assert pids, "the writer's connection went back to the pool"
        admin = make_engine(pg_url)
        with admin.connect() as conn:
            for pid in pids:
                assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar() is True
        admin.dispose()
        asyncio.run(_submit_all(writer, [make_rows(7, start=5, per_request=3)]))
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
