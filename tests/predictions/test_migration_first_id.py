"""Migration 0020: ``prediction_batches`` keyed by its first prediction id, with nullable request ids.

On both backends, the log of the 0018 round trip converted to batches at 0019 (requests of 1, 32 and 2100
predictions, typed and document batches, output vectors, flags, output violations, ids that do not count up,
labels; on PostgreSQL daily partitions and the DEFAULT one) and a batch with an empty request id, upgraded
in one chunk and in chunks of 7: every batch keeps its columns, its ids as ``first_id``, its labels' pointers;
an empty request id becomes NULL; the schema is the models' (PostgreSQL: the primary key ``(first_id,
logged_at)`` on every partition, no other key); the service finds every prediction by id and writes batches
with and without a request id. Downgraded: the rows and schema of 0019 come back (a NULL request id as
``''``); upgraded again: the same log as before.

The writer's idempotent replay on the new key: a replayed batch, a line of one prediction a stored batch holds
(skipped), ids beside a stored run or at another time (written). A fill killed mid-way (PostgreSQL), in both
directions, finishes when run again, and so does a migration killed after its last commit; an id that is not
a lowercase canonical UUID stops the upgrade before it changes anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, text

from bench.migrate_log import fill_log
from core import migrate
from core.database import make_engine, open_database
from predictions.batch import LogBatch, first_id, ids_from, ids_of, pack_floats
from predictions.models import PredictionBatch
from predictions.service import (
    classify_write_error,
    logged_predictions,
    new_prediction_ids,
    recent_predictions,
    write_log_rows,
)
from tests.predictions.migrationdata import (
    CHUNK_ENV,
    _prediction_tables_match_the_models,
    _stamp,
    check_bench_log,
    fill_0017,
    kill_after,
)
from tests.support import database_at, postgres_schema

OLD = "0019_cloudevent_pairs"
NEW = "0020_log_first_id"
OLD_COLUMNS = (
    *("id", "model_name", "model_version", "logged_at", "source", "request_id", "protocol", "status"),
    *("latency_ms", "id_prefix", "id_low", "size", "layout", "numbers", "categories", "outputs", "vectors"),
    *("flags", "inputs"),
)
NEW_COLUMNS = tuple("first_id" if c == "id_prefix" else c for c in OLD_COLUMNS if c != "id_low")


@pytest.fixture(params=["sqlite", "postgresql"])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database at revision 0017, on each backend (filled, then brought to 0019 by the tests)."""
    with database_at(request, tmp_path, "0017_log_outputs") as url:
        yield url


# ---------------------------------------------------------------------------------------------- reading


def _rows(engine: Engine, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every batch row as the driver returns it (``first_id`` as text), oldest id first."""
    with engine.connect() as conn:
        found = conn.execute(text(f"SELECT {', '.join(columns)} FROM prediction_batches ORDER BY id"))
        rows = [dict(r._mapping) for r in found]
    for row in rows:
        if row.get("first_id") is not None:
            row["first_id"] = str(row["first_id"])
    return rows


def _schema(engine: Engine) -> dict[str, Any]:
    """The log's columns, keys, indexes (and partitions, on PostgreSQL)."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            return {
                "columns": sorted(
                    conn.execute(
                        text(
                            "SELECT column_name, data_type, is_nullable, column_default, "
                            "character_maximum_length FROM information_schema.columns "
                            "WHERE table_schema = current_schema() AND table_name = 'prediction_batches'"
                        )
                    ).all()
                ),
                "constraints": sorted(
                    conn.execute(
                        text(
                            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                            "WHERE conrelid = to_regclass('prediction_batches')"
                        )
                    ).all()
                ),
                "indexes": sorted(
                    conn.execute(
                        text(
                            "SELECT tablename, indexname, indexdef FROM pg_indexes "
                            "WHERE schemaname = current_schema() AND tablename LIKE 'prediction_batches%'"
                        )
                    ).all()
                ),
            }
        indexes = []
        for _, name, unique, origin, _partial in conn.exec_driver_sql(
            "PRAGMA index_list(prediction_batches)"
        ):
            cols = [r[2] for r in conn.exec_driver_sql(f"PRAGMA index_info('{name}')")]
            indexes.append((name if origin == "c" else origin, unique, cols))
        return {
            "columns": conn.exec_driver_sql("PRAGMA table_info(prediction_batches)").all(),
            "indexes": sorted(indexes),
        }


def _at_0019(url: str) -> None:
    """The 0018 round trip's log converted to batches at 0019, and a batch with an empty request id."""
    fill_0017(url)
    migrate.upgrade(url, OLD)
    engine = create_engine(url)
    try:
        pid = new_prediction_ids(1)[0]
        _insert_at_0019(engine, request_id="", prefix=pid[:33], low=int(pid[33:], 16))
    finally:
        engine.dispose()


def _insert_at_0019(engine: Engine, *, request_id: str, prefix: str, low: int) -> None:
    """One batch of one prediction as a 0019 server wrote it (``id_prefix`` and ``id_low``)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO prediction_batches (model_name, model_version, logged_at, source, "
                "request_id, protocol, status, latency_ms, id_prefix, id_low, size, outputs) "
                "VALUES ('credit', 1, :t, 'serve', :r, 'v1', 'ok', 1.0, :p, :l, 1, :o)"
            ),
            {
                "t": datetime.now(UTC),
                "r": request_id,
                "p": prefix,
                "l": low,
                "o": bytes.fromhex(pack_floats([0.5])),
            },
        )


def _upgraded_as(before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of 0019 as 0020 holds them."""
    out = []
    for row in before:
        new = {k: v for k, v in row.items() if k not in ("id_prefix", "id_low")}
        new["first_id"] = first_id(row["id_prefix"], row["id_low"])
        new["request_id"] = row["request_id"] or None
        out.append(new)
    return out


# ---------------------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("chunk", [None, 7], ids=["chunk-default", "chunk-7"])
def test_the_log_is_keyed_by_first_ids_and_back(
    log_url: str, chunk: int | None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    url = log_url
    pg = url.startswith("postgresql")
    _at_0019(url)
    engine = create_engine(url)
    try:
        before, schema = _rows(engine, OLD_COLUMNS), _schema(engine)
        with engine.connect() as conn:
            labels = conn.execute(
                text("SELECT prediction_id, log_id, position FROM prediction_feedback")
            ).all()
        assert any(r["request_id"] == "" for r in before) and len(before) > 10
        if chunk:
            monkeypatch.setenv(CHUNK_ENV, str(chunk))
        capfd.readouterr()
        migrate.upgrade(url)
        assert migrate.current(url) == NEW
        err = capfd.readouterr().err
        if pg:
            assert f"prediction batches: {len(before)} of {len(before)} first ids filled (100%)" in err
            if chunk:
                assert f"prediction batches: {chunk} of {len(before)} first ids filled (" in err
        after = _rows(engine, NEW_COLUMNS)
        assert after == _upgraded_as(before)
        _prediction_tables_match_the_models(engine)
        if pg:  # the key on every partition, the DEFAULT one included
            with engine.connect() as conn:
                parts = conn.execute(
                    text(
                        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                        "WHERE i.inhparent = to_regclass('prediction_batches')"
                    )
                ).scalars()
                keyed = conn.execute(
                    text(
                        "SELECT tablename FROM pg_indexes WHERE schemaname = current_schema() "
                        "AND indexdef LIKE '%UNIQUE INDEX%(first_id, logged_at)'"
                    )
                ).scalars()
                assert "prediction_batches_default" in (names := set(parts)) and names <= set(keyed)
        # every prediction found by its id, where its labels point
        where = {pid: (r["id"], i) for r in after for i, pid in enumerate(ids_from(r["first_id"], r["size"]))}
        assert all(where[pid] == (log_id, position) for pid, log_id, position in labels if log_id is not None)
        db = open_database(url, upgrade=False)
        try:
            with db.session() as s:
                for model in {r["model_name"] for r in after}:
                    ids = [
                        pid
                        for r in after
                        if r["model_name"] == model
                        for pid in ids_from(r["first_id"], r["size"])
                    ]
                    found = logged_predictions(session=s, model_name=model, ids=ids)
                    assert {pid: (p.log_id, p.position) for pid, p in found.items()} == {
                        pid: where[pid] for pid in ids
                    }
            # the writer: a batch without a request id and one with the caller's
            now = datetime.now(UTC)
            fresh = [_batch(now, None), _batch(now, "caller-1")]
            assert write_log_rows(engine=db.engine, rows=fresh, idempotent=False) == 4
            with db.session() as s:
                recent = recent_predictions(session=s, model_name="fresh")
            assert [(p.prediction_id, p.request_id) for p in recent] == [
                *((pid, "caller-1") for pid in reversed(fresh[1].ids())),
                *((pid, None) for pid in reversed(fresh[0].ids())),
            ]
        finally:
            db.dispose()
        written = _rows(engine, NEW_COLUMNS)
        migrate.downgrade(url, OLD)
        assert migrate.current(url) == OLD
        if pg:
            assert f"of {len(written)} prefixes restored (100%)" in capfd.readouterr().err
        back = _rows(engine, OLD_COLUMNS)
        assert back[: len(before)] == before
        assert [
            (r["request_id"], ids_of(r["id_prefix"], r["id_low"], r["size"])) for r in back[len(before) :]
        ] == [
            ("", fresh[0].ids()),
            ("caller-1", fresh[1].ids()),
        ]
        assert _schema(engine) == schema
        migrate.upgrade(url)  # and up again: the same log
        assert _rows(engine, NEW_COLUMNS) == written
        _prediction_tables_match_the_models(engine)
    finally:
        engine.dispose()


def _batch(at: datetime, request_id: str | None, model: str = "fresh", size: int = 2) -> LogBatch:
    ids = new_prediction_ids(size)
    return LogBatch(
        ids[0][:33], int(ids[0][33:], 16), size, request_id, model, 1, at, 1.0, "ok", "v1", "serve",
        None, None, None, pack_floats([0.5] * size), None, None, [{"x": float(i)} for i in range(size)],
    )  # fmt: skip


def test_an_id_that_is_not_a_canonical_uuid_stops_the_upgrade_before_any_change(log_url: str) -> None:
    migrate.upgrade(log_url, OLD)
    engine = create_engine(log_url)
    try:
        _insert_at_0019(engine, request_id="r", prefix=new_prediction_ids(1)[0][:33].upper(), low=5)
        before = _rows(engine, OLD_COLUMNS)
        with pytest.raises(RuntimeError, match="1 batches hold ids that are not lowercase canonical UUIDs"):
            migrate.upgrade(log_url)
        assert migrate.current(log_url) == OLD and _rows(engine, OLD_COLUMNS) == before
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------------------------- the writer


def test_a_replay_skips_what_a_stored_batch_holds(database_url: str) -> None:
    """The idempotent write probes the primary key's range of the id's prefix: a batch replayed, or one
    prediction (an older version's spool line) inside a stored run at its time, is skipped; ids beside the
    run, or at another time, are written. A fresh write of a stored batch is a duplicate on PostgreSQL
    (the writer then writes idempotently) and skipped on SQLite."""
    db = open_database(database_url)
    engine = make_engine(database_url)
    try:
        at = datetime.now(UTC).replace(microsecond=0)
        stored = _batch(at, "r", model="m", size=5)._replace(id_low=100)
        prefix = stored.id_prefix
        assert write_log_rows(engine=engine, rows=[stored], idempotent=True) == 5

        def one(low: int, when: datetime = at) -> LogBatch:
            return stored._replace(
                id_low=low, size=1, logged_at=when, outputs=pack_floats([0.25]), inputs=[{}]
            )

        inside = [one(100), one(102), one(104)]
        beside = [one(99), one(105), one(102, at + timedelta(seconds=1))]
        write_log_rows(engine=engine, rows=[stored, *inside, *beside], idempotent=True)
        if engine.dialect.name == "postgresql":
            with pytest.raises(Exception) as caught:
                write_log_rows(engine=engine, rows=[stored], idempotent=False)
            assert classify_write_error(caught.value) == "duplicate"
        else:
            write_log_rows(engine=engine, rows=[stored], idempotent=False)
        with db.session() as s:
            found = s.execute(
                select(PredictionBatch.first_id, PredictionBatch.size, PredictionBatch.logged_at).order_by(
                    PredictionBatch.id
                )
            ).all()
        assert [(str(f), n) for f, n, _ in found] == [
            (f"{prefix}064", 5),
            (f"{prefix}063", 1),
            (f"{prefix}069", 1),
            (f"{prefix}066", 1),
        ]
        with db.session() as s:  # the id inside the run is found in the run; the others in their own rows
            known = logged_predictions(session=s, model_name="m", ids=[f"{prefix}067", f"{prefix}063"])
        assert known[f"{prefix}067"].position == 3 and known[f"{prefix}063"].position == 0
    finally:
        engine.dispose()
        db.dispose()


# ---------------------------------------------------------------------------------------------- killed


def _filled(url: str, column: str) -> tuple[int, int]:
    """(rows with ``column`` set, rows without)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            done, left = conn.execute(
                text(f"SELECT count({column}), count(*) - count({column}) FROM prediction_batches")
            ).one()
        return int(done), int(left)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_killed_fill_finishes_when_run_again(postgres_url: str) -> None:
    with postgres_schema(postgres_url, migrated=False) as url:
        migrate.upgrade(url, "0017_log_outputs")
        filled = fill_log(url, 6000)
        migrate.upgrade(url, OLD)
        engine = create_engine(url)
        before = _rows(engine, OLD_COLUMNS)
        engine.dispose()
        printed = kill_after(url, "upgrade", "head", 3, 40, "prediction batches:")
        assert f"prediction batches: 120 of {len(before)} first ids filled" in printed
        assert migrate.current(url) == OLD
        done, left = _filled(url, "first_id")
        assert done >= 120 and left > 0
        migrate.upgrade(url)  # resumes
        assert migrate.current(url) == NEW
        engine = create_engine(url)
        after = _rows(engine, NEW_COLUMNS)
        engine.dispose()
        assert after == _upgraded_as(before)
        _stamp(url, OLD)  # as if killed after the last commit, before alembic recorded the revision
        migrate.upgrade(url)
        assert migrate.current(url) == NEW
        check_bench_log(url, filled, sample=600)
        kill_after(url, "downgrade", OLD, 3, 40, "prediction batches:")
        assert migrate.current(url) == NEW
        done, left = _filled(url, "id_prefix")
        assert done >= 120 and left > 0
        migrate.downgrade(url, OLD)
        assert migrate.current(url) == OLD
        engine = create_engine(url)
        assert _rows(engine, OLD_COLUMNS) == before
        engine.dispose()
        _stamp(url, NEW)  # killed after the downgrade's last commit
        migrate.downgrade(url, OLD)
        assert migrate.current(url) == OLD
        migrate.upgrade(url)
        check_bench_log(url, filled, sample=600)
