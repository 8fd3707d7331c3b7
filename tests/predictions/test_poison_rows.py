"""A row the database refuses for its values does not block the log (issue 11: "lose nothing").

The writer is called directly (the request contract, which refuses NUL in stored fields, is bypassed): the
refused row goes to the dead-letter file with the database's error, every other row of its batch is written,
later rows are written at once, and the refusal is counted, exported and fails the ``prediction_log`` health
check. The same for a poison row already in the spool. A database that is really down still spools.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import orjson
import psycopg
import pytest
from prometheus_client import generate_latest
from sqlalchemy import exc as sa_exc
from sqlalchemy import select
from typer.testing import CliRunner

from core import migrate
from core.config import get_settings
from core.database import make_engine, open_database
from predictions.health import log_check
from predictions.models import PredictionLog
from predictions.rejected import DeadLetter
from predictions.service import LogRow, classify_write_error
from predictions.spool import Spool
from predictions.writer import LogUnavailable, LogWriter
from service.cli import app
from service.serving.metrics import Metrics
from tests.predictions.test_prediction_log import make_rows

runner = CliRunner()


def _nul(row: LogRow) -> LogRow:
    """PostgreSQL's jsonb cannot hold U+0000: UntranslatableCharacter (a DataError)."""
    return row._replace(inputs={**row.inputs, "c": "a\u0000b"})


def _no_model(row: LogRow) -> LogRow:
    """model_name is NOT NULL on both backends: an IntegrityError."""
    return row._replace(model_name=None)  # type: ignore[arg-type]


def _stored(url: str) -> list[str]:
    db = open_database(url)
    with db.session() as s:
        ids = list(s.scalars(select(PredictionLog.prediction_id).order_by(PredictionLog.id)))
    db.dispose()
    return ids


def _writer(url: str, spool_dir: Path, **kw: float) -> LogWriter:
    return LogWriter(
        engine=make_engine(url),
        spool=Spool(spool_dir),
        durability="durable",
        batch_max_rows=64,
        retry_interval_s=0.05,
        **kw,  # type: ignore[arg-type]
    )


def test_a_nul_row_goes_to_the_dead_letter_file_and_the_rest_is_written(pg_url: str, tmp_path: Path) -> None:
    writer = _writer(pg_url, tmp_path / "spool")
    metrics = Metrics()
    metrics.watch_writer(writer)
    (check,) = log_check(writer)
    assert check.fn().ok
    writer.start()
    try:
        rows = make_rows(41)
        rows[17] = _nul(rows[17])
        asyncio.run(writer.submit(rows))  # durable: one batch of 41 rows, answered once it is handled
        good = [r.prediction_id for i, r in enumerate(rows) if i != 17]
        assert _stored(pg_url) == good  # every good row, in order, at once
        rejected = list(DeadLetter(tmp_path / "spool").read())
        assert [r.row.prediction_id for r in rejected] == [rows[17].prediction_id]
        assert rejected[0].row.inputs["c"] == "a\u0000b" and rejected[0].source == "direct"
        assert "UntranslatableCharacter" in rejected[0].error and "\\u0000" in rejected[0].error
        s = writer.stats
        assert s.rows_rejected == 1 and s.rows_written == 40 and s.rows_dropped == 0
        assert s.database_ok and writer.spool.pending_rows == 0 and s.rows_spooled == 0

        later = make_rows(5, start=100)
        t0 = time.monotonic()
        asyncio.run(writer.submit(later))
        assert time.monotonic() - t0 < 3.0  # not held behind the poison row
        assert _stored(pg_url) == good + [r.prediction_id for r in later]
        assert writer.spool.pending_rows == 0 and writer.stats.rows_rejected == 1

        status = check.fn()
        assert not status.ok and status.value == 1.0
        assert "1 log rows refused" in status.detail and "rejected.jsonl" in status.detail
        exposed = generate_latest(metrics.registry).decode()
        assert "driftwarden_prediction_log_rows_rejected_total 1.0" in exposed
        assert "driftwarden_prediction_log_rows_dropped_total 0.0" in exposed
    finally:
        writer.close()


def test_a_poison_row_in_the_spool_is_replayed_past(pg_url: str, tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    rows = make_rows(30)
    rows[0] = _nul(rows[0])  # the very first row of the replay
    rows[29] = _no_model(rows[29])
    left = Spool(spool_dir)  # what a previous process left behind
    left.append(rows[:20], sync=True)
    left.append(rows[20:], sync=True)
    left.close()
    writer = _writer(pg_url, spool_dir)
    writer.start()
    try:
        assert writer.flush(timeout_s=20), "the spool did not drain"
        assert _stored(pg_url) == [r.prediction_id for r in rows[1:29]]
        rejected = list(DeadLetter(spool_dir).read())
        assert [r.row.prediction_id for r in rejected] == [rows[0].prediction_id, rows[29].prediction_id]
        assert {r.source for r in rejected} == {"spool"}
        assert "NotNullViolation" in rejected[1].error
        s = writer.stats
        assert s.rows_replayed == 28 and s.rows_rejected == 2 and s.rows_dropped == 0 and s.database_ok
        assert writer.spool.pending_rows == 0
        later = make_rows(3, start=50)
        asyncio.run(writer.submit(later))
        assert _stored(pg_url)[-3:] == [r.prediction_id for r in later]
        assert not log_check(writer)[0].fn().ok
    finally:
        writer.close()
    # the dead-letter file survives a restart and is not replayed by the next process
    again = _writer(pg_url, spool_dir)
    again.start()
    assert again.flush(timeout_s=10)
    again.close()
    assert again.stats.rows_replayed == 0 and again.stats.rows_rejected == 0
    assert len(list(DeadLetter(spool_dir).read())) == 2 and len(_stored(pg_url)) == 31
    assert log_check(again)[0].fn().ok  # a new process has refused nothing


def test_an_integrity_refusal_is_set_aside_on_both_backends(database_url: str, tmp_path: Path) -> None:
    open_database(database_url).dispose()  # creates the tables (SQLite)
    writer = _writer(database_url, tmp_path / "spool")
    writer.start()
    try:
        rows = make_rows(8)
        rows[3] = _no_model(rows[3])
        asyncio.run(writer.submit(rows))
        assert _stored(database_url) == [r.prediction_id for i, r in enumerate(rows) if i != 3]
        (rejected,) = DeadLetter(tmp_path / "spool").read()
        assert rejected.row.prediction_id == rows[3].prediction_id
        assert rejected.error.startswith(("IntegrityError", "NotNullViolation")), rejected.error
        assert writer.stats.rows_rejected == 1 and writer.stats.database_ok
    finally:
        writer.close()


def test_a_database_that_is_down_still_spools_and_a_poison_row_is_set_aside_at_the_replay(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'late.db'}"  # no tables yet: every write fails, as if it were down
    writer = _writer(url, tmp_path / "spool")
    writer.start()
    try:
        rows = make_rows(20)
        rows[5] = _no_model(rows[5])
        asyncio.run(writer.submit(rows))
        assert writer.spool.pending_rows == 20 and not writer.stats.database_ok  # an outage: all spooled
        assert writer.stats.rows_rejected == 0 and not (tmp_path / "spool" / "rejected.jsonl").exists()
        migrate.upgrade(url)  # the database comes back
        assert writer.flush(timeout_s=20)
        assert _stored(url) == [r.prediction_id for i, r in enumerate(rows) if i != 5]
        assert writer.stats.rows_replayed == 19 and writer.stats.rows_rejected == 1
        assert [r.row.prediction_id for r in DeadLetter(tmp_path / "spool").read()] == [rows[5].prediction_id]
    finally:
        writer.close()


def test_the_classification_of_write_errors() -> None:
    assert classify_write_error(psycopg.errors.UntranslatableCharacter("x")) == "data"
    assert classify_write_error(psycopg.errors.NumericValueOutOfRange("x")) == "data"
    assert classify_write_error(psycopg.errors.NotNullViolation("x")) == "data"
    assert classify_write_error(psycopg.errors.UniqueViolation("x")) == "duplicate"
    assert classify_write_error(sqlite3.IntegrityError("x")) == "data"
    wrapped = sa_exc.DataError("INSERT", {}, psycopg.errors.InvalidTextRepresentation("x"))
    assert classify_write_error(wrapped) == "data"
    for outage in (
        psycopg.OperationalError("connection refused"),
        psycopg.InterfaceError("the connection is closed"),
        psycopg.errors.UndefinedTable("no prediction_log"),  # the schema's fault, not a row's
        sqlite3.OperationalError("database is locked"),
        sa_exc.OperationalError("connect", {}, psycopg.OperationalError("x")),
        ConnectionResetError(),
    ):
        assert classify_write_error(outage) == "unavailable", outage


def test_the_cli_shows_and_reimports_the_dead_letter_file(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", pg_url)
    get_settings.cache_clear()
    spool_dir = tmp_path / "spool"
    rows = make_rows(6)
    rows[1], rows[4] = _nul(rows[1]), _nul(rows[4])
    writer = _writer(pg_url, spool_dir)
    writer.start()
    asyncio.run(writer.submit(rows))
    writer.close()
    assert writer.stats.rows_rejected == 2 and len(_stored(pg_url)) == 4

    shown = runner.invoke(app, ["predictions", "rejected", str(spool_dir)])
    assert shown.exit_code == 0, shown.output
    assert rows[1].prediction_id in shown.output and rows[4].prediction_id in shown.output
    assert "UntranslatableCharacter" in shown.output and "2 refused rows in 1 files" in shown.output

    # the operator fixes one row (drops the NUL) and leaves the other as it is
    dead = DeadLetter(spool_dir)
    lines = dead.path.read_bytes().splitlines(keepends=True)
    fixed = orjson.loads(lines[0])
    fixed["row"][5]["c"] = fixed["row"][5]["c"].replace("\u0000", "")
    dead.path.write_bytes(orjson.dumps(fixed) + b"\n" + lines[1])
    done = runner.invoke(app, ["predictions", "rejected", str(dead.path), "--import"])
    assert done.exit_code == 0, done.output
    assert "1 rows written to the log, 1 refused again (kept)" in done.output
    assert sorted(_stored(pg_url)) == sorted(r.prediction_id for i, r in enumerate(rows) if i != 4)
    (left,) = dead.read()
    assert left.row.prediction_id == rows[4].prediction_id and "UntranslatableCharacter" in left.error
    again = runner.invoke(app, ["predictions", "rejected", str(dead.path), "--import"])  # idempotent
    assert "0 rows written to the log, 1 refused again (kept)" in again.output
    assert len(_stored(pg_url)) == 5

    dead.path.write_bytes(b"not json\n")
    bad = runner.invoke(app, ["predictions", "rejected", str(dead.path), "--import"])
    assert bad.exit_code != 0 and "rejected.jsonl:1: not a dead-letter row" in bad.output
    assert dead.path.read_bytes() == b"not json\n"  # left as it was


def test_a_dead_letter_file_that_cannot_be_written_counts_the_row_as_lost(
    pg_url: str, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    (spool_dir / "rejected.jsonl").mkdir(parents=True)  # the "file" cannot be opened for appending
    writer = _writer(pg_url, spool_dir)
    writer.start()
    try:
        rows = make_rows(5)
        rows[2] = _nul(rows[2])
        with pytest.raises(LogUnavailable):  # durable: no answer for a row neither stored nor on disk
            asyncio.run(writer.submit(rows))
        assert _stored(pg_url) == [r.prediction_id for i, r in enumerate(rows) if i != 2]
        s = writer.stats
        assert s.rows_dropped == 1 and s.rows_rejected == 0 and s.last_drop_at is not None
        status = log_check(writer)[0].fn()
        assert not status.ok and "1 log rows lost" in status.detail
        later = make_rows(2, start=10)
        asyncio.run(writer.submit(later))  # the log goes on
        assert _stored(pg_url)[-2:] == [r.prediction_id for r in later]
    finally:
        writer.close()
