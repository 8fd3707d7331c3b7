"""A row the database refuses for its values does not block the log (issue 11: "lose nothing").

The writer is called directly (the request contract, which refuses NUL in stored fields, is bypassed): the
refused row (one request's batch of predictions) goes to the dead-letter file with the database's error,
every other row of its write is written, later rows are written at once, and the refusal is counted (in
predictions), exported and fails the ``prediction_log`` health check. The same for a poison row already in
the spool. A database that is really down still spools. Dead-letter lines an older version wrote (one
prediction per line) are shown and re-imported into the new table.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import UTC, datetime, timedelta
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
from predictions.batch import ids_from
from predictions.health import log_check
from predictions.models import LOG_COLUMNS, PredictionBatch
from predictions.rejected import DeadLetter
from predictions.service import classify_write_error, recent_predictions
from predictions.spool import Spool
from predictions.writer import LogUnavailable, LogWriter
from service.cli import app
from service.serving.metrics import Metrics
from tests.predictions.logdata import ids, make_rows, old_line, old_rows
from tests.predictions.poisondata import _no_model, _nul

runner = CliRunner()


def _stored(url: str) -> list[str]:
    """Every logged prediction id, in log order."""
    db = open_database(url)
    with db.session() as s:
        batches = s.scalars(select(PredictionBatch).order_by(PredictionBatch.id))
        found = [pid for b in batches for pid in ids_from(b.first_id, b.size)]
    db.dispose()
    return found


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
        rows = make_rows(41, per_request=3)  # 14 requests: 13 of 3 predictions, the last of 2
        rows[5] = _nul(rows[5])  # predictions 15, 16, 17
        asyncio.run(writer.submit(rows))  # durable: one write of 14 rows, answered once it is handled
        good = ids(rows[:5] + rows[6:])
        assert _stored(pg_url) == good  # every good prediction, in order, at once
        rejected = list(DeadLetter(tmp_path / "spool").read())
        assert [r.row.ids() for r in rejected] == [rows[5].ids()]  # the whole request, as one line
        assert rejected[0].row.inputs == rows[5].inputs and rejected[0].source == "direct"
        assert rejected[0].row == rows[5]  # every column of it, to re-import once fixed
        assert "UntranslatableCharacter" in rejected[0].error and "\\u0000" in rejected[0].error
        s = writer.stats
        assert s.rows_rejected == 3 and s.rows_written == 38 and s.rows_dropped == 0  # predictions
        assert s.database_ok and writer.spool.pending_rows == 0 and s.rows_spooled == 0

        later = make_rows(5, start=100, per_request=5)
        t0 = time.monotonic()
        asyncio.run(writer.submit(later))
        assert time.monotonic() - t0 < 3.0  # not held behind the poison row
        assert _stored(pg_url) == good + ids(later)
        assert writer.spool.pending_rows == 0 and writer.stats.rows_rejected == 3

        status = check.fn()
        assert not status.ok and status.value == 3.0
        assert "3 log rows refused" in status.detail and "rejected.jsonl" in status.detail
        exposed = generate_latest(metrics.registry).decode()
        assert "driftwarden_prediction_log_rows_rejected_total 3.0" in exposed
        assert "driftwarden_prediction_log_rows_dropped_total 0.0" in exposed
    finally:
        writer.close()


def test_a_poison_row_in_the_spool_is_replayed_past(pg_url: str, tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    rows = make_rows(30, per_request=2)  # 15 requests of 2
    rows[0] = _nul(rows[0])  # the very first row of the replay
    rows[14] = _no_model(rows[14])  # the last
    left = Spool(spool_dir)  # what a previous process left behind
    left.append(rows[:10], sync=True)
    left.append(rows[10:], sync=True)
    left.close()
    writer = _writer(pg_url, spool_dir)
    writer.start()
    try:
        assert writer.flush(timeout_s=20), "the spool did not drain"
        assert _stored(pg_url) == ids(rows[1:14])
        rejected = list(DeadLetter(spool_dir).read())
        assert [r.row.ids() for r in rejected] == [rows[0].ids(), rows[14].ids()]
        assert {r.source for r in rejected} == {"spool"}
        assert "NotNullViolation" in rejected[1].error
        s = writer.stats
        assert s.rows_replayed == 26 and s.rows_rejected == 4 and s.rows_dropped == 0 and s.database_ok
        assert writer.spool.pending_rows == 0
        later = make_rows(3, start=50, per_request=3)
        asyncio.run(writer.submit(later))
        assert _stored(pg_url)[-3:] == ids(later)
        assert not log_check(writer)[0].fn().ok
    finally:
        writer.close()
    # the dead-letter file survives a restart and is not replayed by the next process
    again = _writer(pg_url, spool_dir)
    again.start()
    assert again.flush(timeout_s=10)
    again.close()
    assert again.stats.rows_replayed == 0 and again.stats.rows_rejected == 0
    assert len(list(DeadLetter(spool_dir).read())) == 2 and len(_stored(pg_url)) == 26 + 3
    assert log_check(again)[0].fn().ok  # a new process has refused nothing


def test_an_integrity_refusal_is_set_aside_on_both_backends(database_url: str, tmp_path: Path) -> None:
    open_database(database_url).dispose()  # creates the tables (SQLite)
    writer = _writer(database_url, tmp_path / "spool")
    writer.start()
    try:
        rows = make_rows(8, per_request=2)
        rows[1] = _no_model(rows[1])
        asyncio.run(writer.submit(rows))
        assert _stored(database_url) == ids(rows[:1] + rows[2:])
        (rejected,) = DeadLetter(tmp_path / "spool").read()
        assert rejected.row.ids() == rows[1].ids()
        assert rejected.error.startswith(("IntegrityError", "NotNullViolation")), rejected.error
        assert writer.stats.rows_rejected == 2 and writer.stats.database_ok
    finally:
        writer.close()


def test_a_database_that_is_down_still_spools_and_a_poison_row_is_set_aside_at_the_replay(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'late.db'}"  # no tables yet: every write fails, as if it were down
    writer = _writer(url, tmp_path / "spool")
    writer.start()
    try:
        rows = make_rows(20, per_request=4)
        rows[2] = _no_model(rows[2])
        asyncio.run(writer.submit(rows))
        assert writer.spool.pending_rows == 20 and not writer.stats.database_ok  # an outage: all spooled
        assert writer.stats.rows_rejected == 0 and not (tmp_path / "spool" / "rejected.jsonl").exists()
        migrate.upgrade(url)  # the database comes back
        assert writer.flush(timeout_s=20)
        assert _stored(url) == ids(rows[:2] + rows[3:])
        assert writer.stats.rows_replayed == 16 and writer.stats.rows_rejected == 4
        assert [r.row.ids() for r in DeadLetter(tmp_path / "spool").read()] == [rows[2].ids()]
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
    assert classify_write_error(orjson.JSONEncodeError("x")) == "data"
    for outage in (
        psycopg.OperationalError("connection refused"),
        psycopg.InterfaceError("the connection is closed"),
        psycopg.errors.UndefinedTable("no prediction_batches"),  # the schema's fault, not a row's
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
    rows = make_rows(6)  # requests of one prediction: a refused row is one prediction here
    rows[1], rows[4] = _nul(rows[1]), _nul(rows[4])
    writer = _writer(pg_url, spool_dir)
    writer.start()
    asyncio.run(writer.submit(rows))
    writer.close()
    assert writer.stats.rows_rejected == 2 and len(_stored(pg_url)) == 4

    shown = runner.invoke(app, ["predictions", "rejected", str(spool_dir)])
    assert shown.exit_code == 0, shown.output
    assert rows[1].ids()[0] in shown.output and rows[4].ids()[0] in shown.output
    assert "UntranslatableCharacter" in shown.output and "2 refused predictions in 1 files" in shown.output

    # the operator fixes one row (drops the NUL) and leaves the other as it is
    dead = DeadLetter(spool_dir)
    lines = dead.path.read_bytes().splitlines(keepends=True)
    fixed = orjson.loads(lines[0])
    inputs = LOG_COLUMNS.index("inputs")
    fixed["row"][inputs] = [{**d, "c": d["c"].replace("\u0000", "")} for d in fixed["row"][inputs]]
    dead.path.write_bytes(orjson.dumps(fixed) + b"\n" + lines[1])
    done = runner.invoke(app, ["predictions", "rejected", str(dead.path), "--import"])
    assert done.exit_code == 0, done.output
    assert "1 predictions written to the log, 1 refused again (kept)" in done.output
    assert _stored(pg_url) == ids(rows[:1] + rows[2:4] + rows[5:] + rows[1:2])  # the fixed one last
    (left,) = dead.read()
    assert left.row.ids() == rows[4].ids() and "UntranslatableCharacter" in left.error
    again = runner.invoke(app, ["predictions", "rejected", str(dead.path), "--import"])  # idempotent
    assert "0 predictions written to the log, 1 refused again (kept)" in again.output
    assert len(_stored(pg_url)) == 5

    dead.path.write_bytes(b"not json\n")
    bad = runner.invoke(app, ["predictions", "rejected", str(dead.path), "--import"])
    assert bad.exit_code != 0 and "rejected.jsonl:1: not a dead-letter row" in bad.output
    assert dead.path.read_bytes() == b"not json\n"  # left as it was


def test_the_dead_letter_counts_are_predictions(pg_url: str, tmp_path: Path) -> None:
    """A refused request of three predictions is one line; what it holds (and what a re-import writes or
    keeps) is three predictions, as the writer's counters and the health check count them."""
    spool_dir = tmp_path / "spool"
    rows = make_rows(7, per_request=3)  # 3, 3, 1
    rows[0], rows[2] = _nul(rows[0]), _nul(rows[2])
    writer = _writer(pg_url, spool_dir)
    writer.start()
    asyncio.run(writer.submit(rows))
    writer.close()
    assert writer.stats.rows_rejected == 4 and _stored(pg_url) == rows[1].ids()
    dead = DeadLetter(spool_dir)
    lines = dead.path.read_bytes().splitlines(keepends=True)
    fixed = orjson.loads(lines[0])  # the request of three, fixed
    inputs = LOG_COLUMNS.index("inputs")
    fixed["row"][inputs] = [{**d, "c": "ab"} for d in fixed["row"][inputs]]
    dead.path.write_bytes(orjson.dumps(fixed) + b"\n" + lines[1])
    assert dead.reimport(engine=make_engine(pg_url)) == (3, 1)  # predictions written, refused again
    assert sorted(_stored(pg_url)) == sorted(rows[0].ids() + rows[1].ids())


def test_an_older_versions_dead_letter_lines_are_shown_and_reimported(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of one prediction each, of every width an older version wrote (11 values before the typed
    columns, 14 before the outputs, 15): each is read as a batch of one and re-imported into the new table;
    one refused again stays, written the new way."""
    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", database_url)
    get_settings.cache_clear()
    open_database(database_url).dispose()
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    old = old_rows(4, when=at, per_request=2)
    old[1]["outputs"] = [0.3, 0.7]
    old[3]["model_name"] = None  # refused on both backends (NOT NULL)
    widths = [11, 15, 14, 15]
    records = [
        {
            "rejected_at": at.isoformat(),
            "error": "DataError: the older version's message",
            "source": "direct",
            "row": old_line(row)[:width],
        }
        for row, width in zip(old, widths, strict=True)
    ]
    dead = DeadLetter(spool_dir)
    dead.path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    shown = runner.invoke(app, ["predictions", "rejected", str(spool_dir)])
    assert shown.exit_code == 0, shown.output
    assert all(row["prediction_id"] in shown.output for row in old)
    assert "4 refused predictions in 1 files" in shown.output
    assert [r.row.ids() for r in dead.read()] == [[row["prediction_id"]] for row in old]

    done = runner.invoke(app, ["predictions", "rejected", str(dead.path), "--import"])
    assert done.exit_code == 0, done.output
    assert "3 predictions written to the log, 1 refused again (kept)" in done.output
    assert _stored(database_url) == [row["prediction_id"] for row in old[:3]]
    db = open_database(database_url, upgrade=False)
    with db.session() as s:
        logged = {p.prediction_id: p for p in recent_predictions(session=s, model_name="m")}
    db.dispose()
    for row in old[:3]:
        back = logged[row["prediction_id"]]
        assert (back.inputs, back.probability, back.flags, back.logged_at) == (
            row["inputs"],
            row["probability"],
            row["flags"],
            at,
        )
    assert logged[old[1]["prediction_id"]].outputs == [0.3, 0.7]
    (left,) = dead.read()
    assert left.row.ids() == [old[3]["prediction_id"]] and left.row.model_name is None
    assert len(orjson.loads(dead.path.read_bytes())["row"]) == len(LOG_COLUMNS)  # the new line format
    again = runner.invoke(app, ["predictions", "rejected", str(dead.path), "--import"])
    assert "0 predictions written to the log, 1 refused again (kept)" in again.output
    assert len(_stored(database_url)) == 3


def test_a_dead_letter_file_that_cannot_be_written_counts_the_row_as_lost(
    pg_url: str, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    (spool_dir / "rejected.jsonl").mkdir(parents=True)  # the "file" cannot be opened for appending
    writer = _writer(pg_url, spool_dir)
    writer.start()
    try:
        rows = make_rows(5, per_request=2)  # 2, 2, 1
        rows[1] = _nul(rows[1])
        with pytest.raises(LogUnavailable):  # durable: no answer for a row neither stored nor on disk
            asyncio.run(writer.submit(rows))
        assert _stored(pg_url) == ids(rows[:1] + rows[2:])
        s = writer.stats
        assert s.rows_dropped == 2 and s.rows_rejected == 0 and s.last_drop_at is not None
        status = log_check(writer)[0].fn()
        assert not status.ok and "2 log rows lost" in status.detail
        later = make_rows(2, start=10, per_request=2)
        asyncio.run(writer.submit(later))  # the log goes on
        assert _stored(pg_url)[-2:] == ids(later)
    finally:
        writer.close()
