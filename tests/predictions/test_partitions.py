"""The prediction log partitioned by time on PostgreSQL (migrations 0009 and 0018, predictions/partitions.py).

A log built at revision 0008 keeps every prediction (its id, model and time) and label through the upgrade
to the batches of 0018 (and back through the downgrade), on both backends; on PostgreSQL retention drops
whole partitions (batches and feedback), deletes old batches of the DEFAULT partition, and a partition
created over rows of the DEFAULT one takes them in. Every count is of predictions, not of batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from pydantic import SecretStr
from sqlalchemy import Engine, create_engine, inspect, text
from typer.testing import CliRunner

from core import migrate
from core.config import Settings, get_settings
from core.database import Base, Database, open_database
from core.runtime import Runtime
from predictions import partitions
from predictions.batch import LogBatch, as_bytes, ids_from
from predictions.models import LOG_TABLE_COLUMNS
from predictions.partitions import AHEAD, Span, missing, slot
from predictions.scheduled import purge_expired
from predictions.service import (
    apply_retention,
    prepare_partitions,
    record_feedback,
    retention_cutoff,
    write_log_rows,
)
from service.cli import app
from tests.predictions.logdata import ids, make_rows, old_rows, write_rows_as_they_were
from tests.support import database_at, postgres_schema

DAY = timedelta(days=1)
TODAY = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture(autouse=True)
def _today() -> None:
    """TODAY as each test starts (partitions are named by UTC day; a long session may cross midnight)."""
    global TODAY
    TODAY = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _at(days_ago: int, hour: int = 6) -> datetime:
    return TODAY - days_ago * DAY + timedelta(hours=hour)


# ---------------------------------------------------------------- planning (no database)


def test_slots_are_aligned_to_whole_multiples_of_their_length_since_1970() -> None:
    moment = datetime(2026, 11, 30, 15, 30, tzinfo=UTC)
    assert slot(moment, 1) == Span(datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    week = slot(moment, 7)
    assert week.end - week.start == 7 * DAY and week.start <= moment < week.end
    assert (week.start - partitions.EPOCH) % (7 * DAY) == timedelta(0)
    assert Span(datetime(2026, 11, 30, tzinfo=UTC), week.end).name() == "prediction_batches_p20261130"
    assert week.name("prediction_feedback").startswith("prediction_feedback_p2026112")
    odd = Span(datetime(2026, 11, 30, 12, tzinfo=UTC), week.end)
    assert odd.name() == "prediction_batches_p20261130120000"
    for name in (odd.name(), "prediction_batches_default", "prediction_feedback_default"):
        assert partitions.is_partition_table(name), name
    assert not partitions.is_partition_table("prediction_batches")
    assert not partitions.is_partition_table("prediction_feedback")


def test_missing_ranges_fill_the_gaps_and_never_overlap_existing_partitions() -> None:
    day = datetime(2026, 11, 30, tzinfo=UTC)
    have = [Span(day + DAY, day + 2 * DAY), Span(day + 4 * DAY, day + 5 * DAY)]
    daily = missing(have, day + timedelta(hours=15), day + 7 * DAY, 1)
    assert [s.start for s in daily] == [day, day + 2 * DAY, day + 3 * DAY, day + 5 * DAY, day + 6 * DAY]
    assert all(s.end - s.start == DAY for s in daily)
    # a longer setting: aligned slots, clipped to the daily partitions that exist (no overlap, no gap)
    weekly = missing(have, day, day + 14 * DAY, 7)
    spans = sorted([*have, *weekly])
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:], strict=False))
    covered = sum(((s.end - s.start) for s in spans), timedelta(0))
    assert spans[0].start <= day and spans[-1].end >= day + 14 * DAY
    assert covered == spans[-1].end - spans[0].start  # contiguous
    assert missing(spans, day, day + 14 * DAY, 7) == []


# ---------------------------------------------------------------- a log built at revision 0008

Row = dict[str, Any]


@pytest.fixture(params=["sqlite", "postgresql"])
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database at revision 0008 (the unpartitioned log of one row per prediction), on each backend."""
    with database_at(request, tmp_path, "0008_alerts") as url:
        yield url


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL schema at revision 0008."""
    with postgres_schema(postgres_url, migrated=False) as url:
        migrate.upgrade(url, "0008_alerts")
        yield url


def _fill_0008(engine: Engine) -> tuple[list[Row], dict[str, float]]:
    """Predictions of two models over five days (and one 40 days old), two per request, as revision 0008
    logged them (one row each); ids with gaps (two rows deleted: their requests keep one prediction);
    labels on some of them."""
    rows: list[Row] = []
    for days_ago in (40, 4, 3, 2, 1, 0):
        model = "m" if days_ago % 2 else "other"
        rows += old_rows(4, start=len(rows), when=_at(days_ago), model=model, per_request=2)
    write_rows_as_they_were(engine, rows)
    labels = {row["prediction_id"]: float(i % 2) for i, row in enumerate(rows) if i % 3 == 0}
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM prediction_log WHERE id IN (2, 7)"))  # gaps in the ids
        for pid, label in labels.items():
            conn.execute(
                text(
                    "INSERT INTO prediction_feedback (prediction_id, model_name, label, received_at) "
                    "SELECT prediction_id, model_name, :y, logged_at FROM prediction_log "
                    "WHERE prediction_id = :p"
                ),
                {"p": pid, "y": label},
            )
    with engine.connect() as conn:
        kept = set(conn.execute(text("SELECT prediction_id FROM prediction_log")).scalars())
    assert len(kept) == len(rows) - 2
    return [r for r in rows if r["prediction_id"] in kept], {p: y for p, y in labels.items() if p in kept}


def _log(engine: Engine) -> set[tuple[str, str, datetime]]:
    """(prediction id, model, time) of every logged prediction: from the batches, or from the log of one row
    per prediction of a revision before 0018."""
    with engine.connect() as conn:
        if inspect(conn).has_table(partitions.LOG):
            found = conn.execute(text("SELECT first_id, size, model_name, logged_at FROM prediction_batches"))
            return {(pid, str(m), _utc(w)) for first, n, m, w in found for pid in ids_from(str(first), n)}
        found = conn.execute(text("SELECT prediction_id, model_name, logged_at FROM prediction_log"))
        return {(str(p), str(m), _utc(w)) for p, m, w in found}


def _batches(engine: Engine) -> dict[str, tuple[int, int, datetime]]:
    """prediction id -> (its batch's id, its position there, its time)."""
    with engine.connect() as conn:
        found = conn.execute(text("SELECT id, first_id, size, logged_at FROM prediction_batches"))
        return {
            pid: (int(i), position, _utc(w))
            for i, first, n, w in found
            for position, pid in enumerate(ids_from(str(first), n))
        }


def _read_batches(engine: Engine, limit: int) -> list[LogBatch]:
    """The oldest ``limit`` batches as the writer carries them (binary columns as hex)."""
    with engine.connect() as conn:
        found = conn.execute(
            text(f"SELECT {', '.join(LOG_TABLE_COLUMNS)} FROM prediction_batches ORDER BY id LIMIT :n"),
            {"n": limit},
        ).all()
    out: list[LogBatch] = []
    for row in found:
        values = dict(zip(LOG_TABLE_COLUMNS, row, strict=True))
        first = str(values.pop("first_id"))
        values.update(id_prefix=first[:33], id_low=int(first[33:], 16))
        for name in ("numbers", "outputs", "vectors"):
            blob = as_bytes(values[name])
            values[name] = None if blob is None else blob.hex()
        out.append(LogBatch(**values))
    return out


def _labels(engine: Engine) -> dict[str, float]:
    with engine.connect() as conn:
        return {
            str(p): float(y)
            for p, y in conn.execute(text("SELECT prediction_id, label FROM prediction_feedback"))
        }


def _utc(value: Any) -> datetime:
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _where(engine: Engine, table: str) -> dict[str, str]:
    """prediction_id -> the partition of ``table`` holding it."""
    with engine.connect() as conn:
        if table == partitions.LOG:
            found = conn.execute(text("SELECT first_id, size, tableoid::regclass FROM prediction_batches"))
            return {pid: str(t) for first, n, t in found for pid in ids_from(str(first), n)}
        return {
            str(p): str(t)
            for p, t in conn.execute(text(f"SELECT prediction_id, tableoid::regclass FROM {table}"))
        }


def _exists(engine: Engine, name: str) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": name}).scalar())


def _pids(engine: Engine) -> set[str]:
    return {p for p, *_ in _log(engine)}


def test_the_upgrade_keeps_every_prediction_and_label_and_the_downgrade_brings_them_back(
    old_url: str,
) -> None:
    engine = create_engine(old_url)
    try:
        rows, labels = _fill_0008(engine)
        before = _log(engine)
        assert len(before) == len(rows) == 22 and len(labels) >= 6
        migrate.upgrade(old_url)
        assert _log(engine) == before  # every prediction id, model and time
        assert _labels(engine) == labels
        where = _batches(engine)
        assert len({batch for batch, _, _ in where.values()}) == 12  # a batch per request
        with engine.connect() as conn:  # each label points at its prediction: batch, position and time
            for pid, log_id, position, logged_at in conn.execute(
                text("SELECT prediction_id, log_id, position, logged_at FROM prediction_feedback")
            ):
                assert (log_id, position, _utc(logged_at)) == where[pid], pid
        if engine.dialect.name == "postgresql":
            part = _where(engine, partitions.LOG)
            for row in rows:
                assert part[row["prediction_id"]] == f"prediction_batches_p{row['logged_at']:%Y%m%d}"
            assert set(_where(engine, "prediction_feedback").values()) <= {
                f"prediction_feedback_p{_at(d):%Y%m%d}" for d in (40, 4, 3, 2, 1, 0)
            }
            assert _exists(engine, f"prediction_batches_p{TODAY + DAY:%Y%m%d}")  # tomorrow's, before any row
        # a new batch gets an id above the converted ones; the feedback of a new prediction works
        high = max(batch for batch, _, _ in where.values())
        new = make_rows(2, start=100, per_request=2)
        write_log_rows(engine=engine, rows=new, idempotent=False)
        now = _batches(engine)
        assert len({now[p][0] for p in ids(new)}) == 1 and now[ids(new)[0]][0] > high  # one batch, above
        db = open_database(old_url, upgrade=False)
        with db.session() as s:
            assert record_feedback(session=s, model_name="m", labels=[(ids(new)[1], 1.0)]) == (1, [])
            assert record_feedback(session=s, model_name="m", labels=[(ids(new)[1], 0.0)]) == (1, [])
        db.dispose()
        assert _labels(engine)[ids(new)[1]] == 0.0  # the resent label replaced the first
        after = _log(engine)
        migrate.downgrade(old_url, "0008_alerts")
        assert not inspect(engine).has_table(partitions.LOG)
        assert _log(engine) == after  # one row per prediction again
        assert _labels(engine) == {**labels, ids(new)[1]: 0.0}
        migrate.upgrade(old_url)  # and up again
        assert _log(engine) == after
        assert _labels(engine) == {**labels, ids(new)[1]: 0.0}
    finally:
        engine.dispose()


def test_the_migration_builds_what_the_models_describe(old_url: str) -> None:
    """Exactly the models on both backends (PostgreSQL's partitions left to ``include_object``)."""
    migrate.upgrade(old_url)
    engine = create_engine(old_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"include_object": partitions.include_object})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    ours = sorted(str(d[0]) for d in diff if "prediction_" in repr(d))
    assert ours == [], diff


# ---------------------------------------------------------------- PostgreSQL: partitions at work


def _upgraded(pg_url: str) -> tuple[Database, Engine, list[Row], dict[str, float]]:
    engine = create_engine(pg_url)
    rows, labels = _fill_0008(engine)
    migrate.upgrade(pg_url)
    return open_database(pg_url, upgrade=False), engine, rows, labels


@pytest.mark.postgres
def test_replaying_a_batch_twice_writes_it_once(pg_url: str) -> None:
    db, engine, rows, _ = _upgraded(pg_url)
    try:
        batch = make_rows(5, start=200, per_request=5)
        assert write_log_rows(engine=engine, rows=batch, idempotent=True) == 5
        write_log_rows(engine=engine, rows=batch, idempotent=True)  # a spool replayed after a lost commit
        converted = _read_batches(engine, 3)  # batches the migration made, in their partitions
        assert sum(b.size for b in converted) == 5
        write_log_rows(engine=engine, rows=converted, idempotent=True)
        with engine.connect() as conn:
            n, batches = conn.execute(text("SELECT sum(size), count(*) FROM prediction_batches")).one()
        assert n == len(_log(engine)) == len(rows) + 5 and batches == 12 + 1
    finally:
        engine.dispose()
        db.dispose()


@pytest.mark.postgres
def test_retention_drops_whole_partitions_and_purges_the_default_partition(pg_url: str) -> None:
    db, engine, rows, labels = _upgraded(pg_url)
    try:
        ancient = make_rows(2, start=300, when=_at(400), per_request=2)  # older than any partition: DEFAULT
        write_log_rows(engine=engine, rows=ancient, idempotent=True)
        with db.session() as s:
            assert record_feedback(session=s, model_name="m", labels=[(ids(ancient)[1], 1.0)]) == (1, [])
        part = _where(engine, partitions.LOG)
        assert {part[p] for p in ids(ancient)} == {"prediction_batches_default"}
        assert _where(engine, "prediction_feedback")[ids(ancient)[1]] == "prediction_feedback_default"

        cutoff = TODAY - 2 * DAY  # day -4 and -3 (and the 40-day-old one) expire whole; -2 onwards stay
        done = apply_retention(db=db, before=cutoff, partition_days=1)
        expired = {f"p{_at(d):%Y%m%d}" for d in (40, 4, 3)}
        assert sorted(name for name, _ in done.dropped) == sorted(f"prediction_batches_{p}" for p in expired)
        held = {
            f"prediction_batches_p{_at(d):%Y%m%d}": sum(r["logged_at"] == _at(d) for r in rows)
            for d in (40, 4, 3)
        }
        # predictions, not batches (two each): the rows deleted at 0008 left requests of one
        assert dict(done.dropped) == held and sorted(held.values()) == [3, 3, 4]
        assert done.deleted == 2 and done.removed == 12  # the ancient request of two, deleted
        for p in expired:
            assert not _exists(engine, f"prediction_batches_{p}") and not _exists(
                engine, f"prediction_feedback_{p}"
            )
        for d in (2, 1, 0):
            assert _exists(engine, f"prediction_batches_p{_at(d):%Y%m%d}")
            assert _exists(engine, f"prediction_feedback_p{_at(d):%Y%m%d}")
        kept = {r["prediction_id"] for r in rows if r["logged_at"] >= cutoff}
        assert _pids(engine) == kept
        assert _labels(engine) == {p: y for p, y in labels.items() if p in kept}  # dropped with their rows
        assert _exists(engine, "prediction_batches_default")
        # the coming week's partitions were created
        for d in range(8):
            assert _exists(engine, f"prediction_batches_p{TODAY + d * DAY:%Y%m%d}")
        assert done.created
        again = apply_retention(db=db, before=cutoff, partition_days=1)
        assert again.created == [] and again.dropped == [] and again.deleted == 0
    finally:
        engine.dispose()
        db.dispose()


@pytest.mark.postgres
def test_the_job_keeps_the_partition_holding_the_cutoff_whole_and_purge_cuts_exactly(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, engine, rows, _ = _upgraded(pg_url)
    try:
        cutoff = TODAY - 2 * DAY + timedelta(hours=12)  # inside day -2's partition, after its rows (06:00)
        assert retention_cutoff(db=db, before=cutoff) == TODAY - 2 * DAY
        done = apply_retention(db=db, before=cutoff, partition_days=1, whole_partitions=True)
        assert done.deleted == 0 and len(done.dropped) == 3
        day2 = {r["prediction_id"] for r in rows if r["logged_at"] == _at(2)}
        assert len(day2) == 4 and day2 <= _pids(engine)  # kept whole, older than the cutoff

        # the CLI cuts at the exact time: day -2's four predictions (two batches) go one by one
        monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", pg_url)
        get_settings.cache_clear()
        days = (datetime.now(UTC) - cutoff) / DAY
        r = CliRunner().invoke(app, ["predictions", "purge", "--days", f"{days:.6f}", "--dry-run"])
        assert r.exit_code == 0, r.output
        assert "would delete 4 predictions of other" in r.stdout and "would drop" not in r.stdout
        r = CliRunner().invoke(app, ["predictions", "purge", "--days", f"{days:.6f}", "--yes"])
        assert r.exit_code == 0, r.output
        assert "deleted 4 predictions" in r.stdout
        assert not day2 & _pids(engine)
        assert _exists(engine, f"prediction_batches_p{_at(2):%Y%m%d}")

        # cut at today's midnight: the CLI names the partitions it drops and the predictions they held
        days = (datetime.now(UTC) - TODAY - timedelta(seconds=30)) / DAY
        r = CliRunner().invoke(app, ["predictions", "purge", "--days", f"{days:.9f}", "--dry-run"])
        assert r.exit_code == 0, r.output
        for d in (2, 1):
            assert f"would drop partition prediction_batches_p{_at(d):%Y%m%d}" in r.stdout
        r = CliRunner().invoke(app, ["predictions", "purge", "--days", f"{days:.9f}", "--yes"])
        assert r.exit_code == 0, r.output
        assert (
            f"dropped partition prediction_batches_p{_at(2):%Y%m%d} and its feedback's (0 predictions)"
            in r.stdout
        )
        assert (
            f"dropped partition prediction_batches_p{_at(1):%Y%m%d} and its feedback's (4 predictions)"
            in r.stdout
        )
        assert "deleted 4 predictions" in r.stdout
        assert _pids(engine) == {r["prediction_id"] for r in rows if r["logged_at"] == _at(0)}
    finally:
        engine.dispose()
        db.dispose()


@pytest.mark.postgres
def test_a_new_partition_takes_in_the_rows_the_default_partition_held(pg_url: str) -> None:
    db, engine, _, _ = _upgraded(pg_url)
    try:
        later = TODAY + 30 * DAY
        future = make_rows(3, start=400, when=later + timedelta(hours=1), per_request=3)  # a skewed clock
        write_log_rows(engine=engine, rows=future, idempotent=False)
        with db.session() as s:
            assert record_feedback(session=s, model_name="m", labels=[(ids(future)[2], 1.0)]) == (1, [])
        where = _batches(engine)
        assert {_where(engine, partitions.LOG)[p] for p in ids(future)} == {"prediction_batches_default"}
        created = prepare_partitions(db=db, now=later, days=1)
        name = f"p{later:%Y%m%d}"
        assert created[0] == f"prediction_batches_{name}" and len(created) == AHEAD // DAY
        assert {_where(engine, partitions.LOG)[p] for p in ids(future)} == {f"prediction_batches_{name}"}
        assert _where(engine, "prediction_feedback")[ids(future)[2]] == f"prediction_feedback_{name}"
        assert _batches(engine) == where  # moved with their batch ids and positions
        assert _labels(engine)[ids(future)[2]] == 1.0
        with engine.connect() as conn:  # the label still points at its prediction
            assert conn.execute(
                text("SELECT log_id, position FROM prediction_feedback WHERE prediction_id = :p"),
                {"p": ids(future)[2]},
            ).one() == tuple(where[ids(future)[2]][:2])
    finally:
        engine.dispose()
        db.dispose()


@pytest.mark.postgres
def test_the_retention_job_at_start_up_creates_the_coming_weeks_partitions(postgres_url: str) -> None:
    with postgres_schema(postgres_url) as url:
        db = open_database(url, upgrade=False)
        try:
            engine = db.engine
            assert not _exists(
                engine, f"prediction_batches_p{TODAY + 7 * DAY:%Y%m%d}"
            )  # the migration: 2 days
            runtime = Runtime(settings=Settings(database_url=SecretStr(url), log_partition_days=1), db=db)
            assert purge_expired(runtime) == 0
            for d in range(8):
                assert _exists(engine, f"prediction_batches_p{TODAY + d * DAY:%Y%m%d}")
                assert _exists(engine, f"prediction_feedback_p{TODAY + d * DAY:%Y%m%d}")
        finally:
            db.dispose()


@pytest.mark.postgres
def test_purge_with_yes_makes_the_coming_weeks_partitions_when_nothing_is_old(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with postgres_schema(postgres_url) as url:
        engine = create_engine(url)
        try:
            future = make_rows(2, when=TODAY + 5 * DAY, per_request=2)
            write_log_rows(engine=engine, rows=future, idempotent=False)
            assert set(_where(engine, partitions.LOG).values()) == {"prediction_batches_default"}
            monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", url)
            get_settings.cache_clear()
            r = CliRunner().invoke(app, ["predictions", "purge", "--dry-run"])
            assert r.exit_code == 0 and "nothing to delete" in r.stdout and "created" not in r.stdout
            assert not _exists(engine, f"prediction_batches_p{TODAY + 5 * DAY:%Y%m%d}")
            r = CliRunner().invoke(app, ["predictions", "purge", "--yes"])
            assert r.exit_code == 0, r.output
            assert "nothing to delete" in r.stdout
            assert f"prediction_batches_p{TODAY + 5 * DAY:%Y%m%d}" in r.stdout  # among the partitions created
            assert set(_where(engine, partitions.LOG).values()) == {
                f"prediction_batches_p{TODAY + 5 * DAY:%Y%m%d}"
            }
            assert _pids(engine) == set(ids(future))
        finally:
            engine.dispose()


@pytest.mark.postgres
def test_a_busy_log_makes_the_job_skip_its_partition_changes_until_the_next_pass(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db, engine, rows, _ = _upgraded(pg_url)
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT_MS", 100)
    monkeypatch.setattr(partitions, "ATTEMPTS", 2)
    # retention of 2 days: the cutoff is inside day -2
    settings = Settings(database_url=SecretStr(pg_url), retention_days=2, log_partition_days=1)
    runtime = Runtime(settings=settings, db=db)
    oldest = f"prediction_batches_p{_at(40):%Y%m%d}"
    try:
        with engine.connect() as reader:  # a long window read: a shared lock on the log until it ends
            reader.execute(text("SELECT count(*) FROM prediction_batches"))
            with caplog.at_level("WARNING", logger="driftwarden.predictions"):
                assert purge_expired(runtime) == 0
            assert "prediction_batches is busy" in caplog.text
            assert _exists(engine, oldest)
            reader.rollback()
        # the predictions of the partitions dropped (3 + 3 + 4 in two batches each), not their batches
        assert purge_expired(runtime) == sum(r["logged_at"] < TODAY - 2 * DAY for r in rows) == 10
        assert not _exists(engine, oldest)
    finally:
        engine.dispose()
        db.dispose()
