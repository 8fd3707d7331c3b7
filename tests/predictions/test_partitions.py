"""The prediction log partitioned by time on PostgreSQL (migration 0009, predictions/partitions.py).

A log built at revision 0008 keeps every row, id and label through the upgrade (and back through the
downgrade), on both backends; on PostgreSQL retention drops whole partitions (log and feedback), deletes
old rows of the DEFAULT partition, and a partition created over rows of the DEFAULT one takes them in.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, MetaData, Table, create_engine, text
from typer.testing import CliRunner

from core import migrate
from core.config import Settings, get_settings
from core.database import Base, Database, open_database
from core.runtime import Runtime
from predictions import partitions
from predictions.models import LOG_COLUMNS
from predictions.partitions import AHEAD, Span, missing, slot
from predictions.scheduled import purge_expired
from predictions.service import (
    LogRow,
    apply_retention,
    prepare_partitions,
    record_feedback,
    retention_cutoff,
    write_log_rows,
)
from service.cli import app
from tests.predictions.test_prediction_log import make_rows
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
    assert Span(datetime(2026, 11, 30, tzinfo=UTC), week.end).name() == "prediction_log_p20261130"
    assert week.name("prediction_feedback").startswith("prediction_feedback_p2026112")
    odd = Span(datetime(2026, 11, 30, 12, tzinfo=UTC), week.end)
    assert odd.name() == "prediction_log_p20261130120000"
    assert partitions.is_partition_table(odd.name()) and partitions.is_partition_table(
        "prediction_log_default"
    )
    assert not partitions.is_partition_table("prediction_log")


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


@pytest.fixture(params=["sqlite", "postgresql"])
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database at revision 0008 (the unpartitioned log), on each backend."""
    with database_at(request, tmp_path, "0008_alerts") as url:
        yield url


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL schema at revision 0008."""
    with postgres_schema(postgres_url, migrated=False) as url:
        migrate.upgrade(url, "0008_alerts")
        yield url


def _fill_0008(engine: Engine) -> tuple[list[LogRow], dict[str, float]]:
    """Rows of two models over five days (and one 40 days old), ids with gaps, labels on some of them."""
    rows: list[LogRow] = []
    for days_ago in (40, 4, 3, 2, 1, 0):
        rows += make_rows(4, start=len(rows), when=_at(days_ago), model="m" if days_ago % 2 else "other")
    _insert_0008(engine, rows)
    labels = {row.prediction_id: float(i % 2) for i, row in enumerate(rows) if i % 3 == 0}
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
    return [r for r in rows if r.prediction_id in kept], {p: y for p, y in labels.items() if p in kept}


def _insert_0008(engine: Engine, rows: list[LogRow]) -> None:
    """Rows into the log of revision 0008, through its reflected table (today's writer also fills the typed
    columns of 0010)."""
    table = Table("prediction_log", MetaData(), autoload_with=engine)
    columns = LOG_COLUMNS[: LOG_COLUMNS.index("layout")]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{c: getattr(r, c) for c in columns} for r in rows])


def _log(engine: Engine) -> set[tuple[int, str, str, Any]]:
    with engine.connect() as conn:
        return {
            (int(i), str(p), str(m), _utc(w))
            for i, p, m, w in conn.execute(
                text("SELECT id, prediction_id, model_name, logged_at FROM prediction_log")
            )
        }


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
    """prediction_id -> the partition holding the row."""
    with engine.connect() as conn:
        return {
            str(p): str(t)
            for p, t in conn.execute(text(f"SELECT prediction_id, tableoid::regclass FROM {table}"))
        }


def _exists(engine: Engine, name: str) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": name}).scalar())


def test_the_upgrade_keeps_every_row_id_and_label_and_the_downgrade_brings_them_back(old_url: str) -> None:
    engine = create_engine(old_url)
    try:
        rows, labels = _fill_0008(engine)
        before = _log(engine)
        assert len(before) == len(rows) == 22 and len(labels) >= 6
        migrate.upgrade(old_url)
        assert _log(engine) == before  # every id, prediction id, model and time
        assert _labels(engine) == labels
        with engine.connect() as conn:  # each label carries its prediction's time
            assert conn.execute(
                text(
                    "SELECT count(*) FROM prediction_feedback f JOIN prediction_log p "
                    "ON p.prediction_id = f.prediction_id AND p.logged_at = f.logged_at"
                )
            ).scalar() == len(labels)
        if engine.dialect.name == "postgresql":
            where = _where(engine, "prediction_log")
            for row in rows:
                day = row.logged_at.astimezone(UTC).strftime("%Y%m%d")
                assert where[row.prediction_id] == f"prediction_log_p{day}"
            assert set(_where(engine, "prediction_feedback").values()) <= {
                f"prediction_feedback_p{_at(d):%Y%m%d}" for d in (40, 4, 3, 2, 1, 0)
            }
            assert _exists(engine, f"prediction_log_p{TODAY + DAY:%Y%m%d}")  # tomorrow's, before any row
        # new rows get ids above the old ones; the feedback of a new row works on the new keys
        high = max(i for i, *_ in before)
        new = make_rows(2, start=100)
        write_log_rows(engine=engine, rows=new, idempotent=False)
        ids = {p: i for i, p, *_ in _log(engine)}
        assert min(ids[r.prediction_id] for r in new) > high
        db = open_database(old_url, upgrade=False)
        with db.session() as s:
            assert record_feedback(session=s, model_name="m", labels=[(new[0].prediction_id, 1.0)]) == (1, [])
            assert record_feedback(session=s, model_name="m", labels=[(new[0].prediction_id, 0.0)]) == (1, [])
        db.dispose()
        assert _labels(engine)[new[0].prediction_id] == 0.0  # the resent label replaced the first
        after = _log(engine)
        migrate.downgrade(old_url, "0008_alerts")
        assert _log(engine) == after
        assert _labels(engine) == {**labels, new[0].prediction_id: 0.0}
        migrate.upgrade(old_url)  # and up again
        assert _log(engine) == after
    finally:
        engine.dispose()


def test_the_migration_builds_what_the_models_describe(old_url: str) -> None:
    """PostgreSQL: exactly the models (the partitions left to ``include_object``). SQLite keeps the log's
    unique prediction_id and the feedback's foreign key of 0002: those two differences and no other."""
    migrate.upgrade(old_url)
    engine = create_engine(old_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"include_object": partitions.include_object})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    ours = sorted(str(d[0]) for d in diff if "prediction_" in repr(d))
    if engine.dialect.name == "postgresql":
        assert ours == [], diff
    else:
        assert ours == ["add_constraint", "remove_constraint", "remove_fk"], diff


# ---------------------------------------------------------------- PostgreSQL: partitions at work


def _upgraded(pg_url: str) -> tuple[Database, Engine, list[LogRow], dict[str, float]]:
    engine = create_engine(pg_url)
    rows, labels = _fill_0008(engine)
    migrate.upgrade(pg_url)
    return open_database(pg_url, upgrade=False), engine, rows, labels


@pytest.mark.postgres
def test_replaying_a_batch_twice_writes_it_once(pg_url: str) -> None:
    db, engine, rows, _ = _upgraded(pg_url)
    try:
        batch = make_rows(5, start=200)
        assert write_log_rows(engine=engine, rows=batch, idempotent=True) == 5
        write_log_rows(engine=engine, rows=batch, idempotent=True)  # a spool replayed after a lost commit
        write_log_rows(engine=engine, rows=rows[:3], idempotent=True)  # rows converted by the migration
        with engine.connect() as conn:
            n, distinct = conn.execute(
                text("SELECT count(*), count(DISTINCT prediction_id) FROM prediction_log")
            ).one()
        assert n == distinct == len(rows) + 5
    finally:
        engine.dispose()
        db.dispose()


@pytest.mark.postgres
def test_retention_drops_whole_partitions_and_purges_the_default_partition(pg_url: str) -> None:
    db, engine, rows, labels = _upgraded(pg_url)
    try:
        ancient = make_rows(2, start=300, when=_at(400))  # older than any partition: the DEFAULT one
        write_log_rows(engine=engine, rows=ancient, idempotent=True)
        with db.session() as s:
            record_feedback(session=s, model_name="m", labels=[(ancient[0].prediction_id, 1.0)])
        assert set(_where(engine, "prediction_log").values()) >= {"prediction_log_default"}
        assert _where(engine, "prediction_log")[ancient[0].prediction_id] == "prediction_log_default"
        assert (
            _where(engine, "prediction_feedback")[ancient[0].prediction_id] == "prediction_feedback_default"
        )

        cutoff = TODAY - 2 * DAY  # day -4 and -3 (and the 40-day-old one) expire whole; -2 onwards stay
        done = apply_retention(db=db, before=cutoff, partition_days=1)
        expired = {f"p{_at(d):%Y%m%d}" for d in (40, 4, 3)}
        assert sorted(name for name, _ in done.dropped) == sorted(f"prediction_log_{p}" for p in expired)
        held = {
            f"prediction_log_p{_at(d):%Y%m%d}": sum(r.logged_at == _at(d) for r in rows) for d in (40, 4, 3)
        }
        assert dict(done.dropped) == held and sorted(held.values()) == [3, 3, 4]  # ids 2 and 7 were deleted
        assert done.deleted == 2 and done.removed == 12  # the two ancient rows, one by one
        for p in expired:
            assert not _exists(engine, f"prediction_log_{p}") and not _exists(
                engine, f"prediction_feedback_{p}"
            )
        for d in (2, 1, 0):
            assert _exists(engine, f"prediction_log_p{_at(d):%Y%m%d}")
            assert _exists(engine, f"prediction_feedback_p{_at(d):%Y%m%d}")
        kept = {r.prediction_id for r in rows if r.logged_at >= cutoff}
        assert {p for _, p, *_ in _log(engine)} == kept
        assert _labels(engine) == {p: y for p, y in labels.items() if p in kept}  # dropped with their rows
        assert _exists(engine, "prediction_log_default")
        # the coming week's partitions were created
        for d in range(8):
            assert _exists(engine, f"prediction_log_p{TODAY + d * DAY:%Y%m%d}")
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
        day2 = {r.prediction_id for r in rows if r.logged_at == _at(2)}
        assert len(day2) == 4 and day2 <= {
            p for _, p, *_ in _log(engine)
        }  # kept whole, older than the cutoff

        # the CLI cuts at the exact time: day -2's four rows go one by one, the partition stays
        monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", pg_url)
        get_settings.cache_clear()
        days = (datetime.now(UTC) - cutoff) / DAY
        r = CliRunner().invoke(app, ["predictions", "purge", "--days", f"{days:.6f}", "--dry-run"])
        assert r.exit_code == 0, r.output
        assert "would delete 4 predictions of other" in r.stdout and "would drop" not in r.stdout
        r = CliRunner().invoke(app, ["predictions", "purge", "--days", f"{days:.6f}", "--yes"])
        assert r.exit_code == 0, r.output
        assert "deleted 4 predictions" in r.stdout
        assert not day2 & {p for _, p, *_ in _log(engine)}
        assert _exists(engine, f"prediction_log_p{_at(2):%Y%m%d}")

        # cut at today's midnight: the CLI names the partitions it drops and what they held
        days = (datetime.now(UTC) - TODAY - timedelta(seconds=30)) / DAY
        r = CliRunner().invoke(app, ["predictions", "purge", "--days", f"{days:.9f}", "--dry-run"])
        assert r.exit_code == 0, r.output
        for d in (2, 1):
            assert f"would drop partition prediction_log_p{_at(d):%Y%m%d}" in r.stdout
        r = CliRunner().invoke(app, ["predictions", "purge", "--days", f"{days:.9f}", "--yes"])
        assert r.exit_code == 0, r.output
        assert (
            f"dropped partition prediction_log_p{_at(2):%Y%m%d} and its feedback's (0 predictions)"
            in r.stdout
        )
        assert (
            f"dropped partition prediction_log_p{_at(1):%Y%m%d} and its feedback's (4 predictions)"
            in r.stdout
        )
        assert "deleted 4 predictions" in r.stdout
        assert {p for _, p, *_ in _log(engine)} == {r.prediction_id for r in rows if r.logged_at == _at(0)}
    finally:
        engine.dispose()
        db.dispose()


@pytest.mark.postgres
def test_a_new_partition_takes_in_the_rows_the_default_partition_held(pg_url: str) -> None:
    db, engine, _, _ = _upgraded(pg_url)
    try:
        later = TODAY + 30 * DAY
        future = make_rows(3, start=400, when=later + timedelta(hours=1))  # a skewed clock: no partition yet
        write_log_rows(engine=engine, rows=future, idempotent=False)
        with db.session() as s:
            record_feedback(session=s, model_name="m", labels=[(future[0].prediction_id, 1.0)])
        ids = {p: i for i, p, *_ in _log(engine)}
        assert {_where(engine, "prediction_log")[r.prediction_id] for r in future} == {
            "prediction_log_default"
        }
        created = prepare_partitions(db=db, now=later, days=1)
        name = f"p{later:%Y%m%d}"
        assert created[0] == f"prediction_log_{name}" and len(created) == AHEAD // DAY
        assert {_where(engine, "prediction_log")[r.prediction_id] for r in future} == {
            f"prediction_log_{name}"
        }
        assert _where(engine, "prediction_feedback")[future[0].prediction_id] == f"prediction_feedback_{name}"
        assert {p: i for i, p, *_ in _log(engine)} == ids  # moved with their ids
        assert _labels(engine)[future[0].prediction_id] == 1.0
    finally:
        engine.dispose()
        db.dispose()


@pytest.mark.postgres
def test_the_retention_job_at_start_up_creates_the_coming_weeks_partitions(postgres_url: str) -> None:
    with postgres_schema(postgres_url) as url:
        db = open_database(url, upgrade=False)
        try:
            engine = db.engine
            assert not _exists(engine, f"prediction_log_p{TODAY + 7 * DAY:%Y%m%d}")  # the migration: 2 days
            runtime = Runtime(settings=Settings(database_url=url, log_partition_days=1), db=db)
            assert purge_expired(runtime) == 0
            for d in range(8):
                assert _exists(engine, f"prediction_log_p{TODAY + d * DAY:%Y%m%d}")
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
            write_log_rows(engine=engine, rows=make_rows(2, when=TODAY + 5 * DAY), idempotent=False)
            assert set(_where(engine, "prediction_log").values()) == {"prediction_log_default"}
            monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", url)
            get_settings.cache_clear()
            r = CliRunner().invoke(app, ["predictions", "purge", "--dry-run"])
            assert r.exit_code == 0 and "nothing to delete" in r.stdout and "created" not in r.stdout
            assert not _exists(engine, f"prediction_log_p{TODAY + 5 * DAY:%Y%m%d}")
            r = CliRunner().invoke(app, ["predictions", "purge", "--yes"])
            assert r.exit_code == 0, r.output
            assert "nothing to delete" in r.stdout
            assert f"prediction_log_p{TODAY + 5 * DAY:%Y%m%d}" in r.stdout  # among the partitions created
            assert set(_where(engine, "prediction_log").values()) == {
                f"prediction_log_p{TODAY + 5 * DAY:%Y%m%d}"
            }
        finally:
            engine.dispose()


@pytest.mark.postgres
def test_a_busy_log_makes_the_job_skip_its_partition_changes_until_the_next_pass(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db, engine, rows, _ = _upgraded(pg_url)
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT_MS", 100)
    monkeypatch.setattr(partitions, "ATTEMPTS", 2)
    settings = Settings(database_url=pg_url, retention_days=2, log_partition_days=1)  # cutoff: in day -2
    runtime = Runtime(settings=settings, db=db)
    oldest = f"prediction_log_p{_at(40):%Y%m%d}"
    try:
        with engine.connect() as reader:  # a long window read: a shared lock on the log until it ends
            reader.execute(text("SELECT count(*) FROM prediction_log"))
            with caplog.at_level("WARNING", logger="driftwarden.predictions"):
                assert purge_expired(runtime) == 0
            assert "prediction_log is busy" in caplog.text
            assert _exists(engine, oldest)
            reader.rollback()
        assert purge_expired(runtime) == sum(r.logged_at < TODAY - 2 * DAY for r in rows)
        assert not _exists(engine, oldest)
    finally:
        engine.dispose()
        db.dispose()
