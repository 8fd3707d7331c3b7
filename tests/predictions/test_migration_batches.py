"""Migration 0018: a log of one row per prediction (0017) converted in place to one batch row per request.

On both backends, a log as a 0017 server wrote it (requests of 1, 32 and 2100 predictions with ids from
``new_prediction_ids``, typed rows with and without unseen categories, rows whose documents could not be
typed or hold a key outside the layout, multi-class rows with output vectors, a request where one row has
no vector, flags, output violations, ids that do not count up, labels with 0015's copies; on PostgreSQL
rows in three daily partitions and the DEFAULT one, and a label without its prediction) is upgraded, in
one chunk and in chunks of 7 rows: every prediction is in exactly one batch at its position, in order,
with its id, time, inputs, output, vector and flags; its label points at it; the schema is the models'
(keys, INCLUDE lists, sequence, partitions mirrored); the service reads, labels and writes the converted
log. Then downgraded: the rows come back as they were (the documents of typed rows as the typed copy reads
them), column by column, in their order, with their labels and the 0017 schema; and upgraded again.

A conversion killed mid-way (SIGKILL of a child process) finishes when run again, in both directions, and
so does one killed after its last commit; a label whose batch is gone survives the downgrade (PostgreSQL)
or is dropped and counted (SQLite's foreign key); an id a batch cannot store stops the upgrade before it
changes anything. A million-row log converts on each backend (the time is printed).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    Engine,
    create_engine,
    insert,
    inspect,
    select,
    text,
)

from bench.migrate_log import Filled, expected_row, fill_log, sizes
from core import migrate
from core.database import aware, open_database
from predictions.batch import LogBatch, as_bytes, floats, ids_from, pack_floats
from predictions.models import PredictionBatch, PredictionFeedback
from predictions.service import (
    count_predictions,
    decode_documents,
    load_layouts,
    logged_predictions,
    recent_predictions,
    record_feedback,
    write_log_rows,
)
from tests.predictions.migrationdata import (
    CHUNK_ENV,
    LAYOUT,
    OLD_LOG,
    VECTOR_MODEL,
    _credit,
    _feedback,
    _normal,
    _prediction_tables_match_the_models,
    _request,
    _same_float,
    _stamp,
    _typed_view,
    check_bench_log,
    fill_0017,
    kill_after,
)
from tests.support import database_at

OLD = "0017_log_outputs"
NEW = "0018_log_batches"  # the revision under test (later ones may follow it)

ROW_COLUMNS = [c.name for c in OLD_LOG.columns if c.name != "id"]


@pytest.fixture(params=["sqlite", "postgresql"])
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database at revision 0017 (one log row per prediction), on each backend."""
    with database_at(request, tmp_path, OLD) as url:
        yield url


# ---------------------------------------------------------------------------------------------- the 0017 log


def _read_log(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        found = conn.execute(select(OLD_LOG).order_by(OLD_LOG.c.id)).mappings().all()
    return [_normal(dict(r)) for r in found]


# ---------------------------------------------------------------------------------------------- expectations


def _kept_documents(rows: list[dict[str, Any]]) -> set[str]:
    """Requests whose typed batches keep their documents too (a key outside the layout)."""
    names = set(LAYOUT.numeric) | set(LAYOUT.categorical)
    return {r["request_id"] for r in rows if r["layout"] is not None and not names.issuperset(r["inputs"])}


def _expected_document(row: dict[str, Any], kept: set[str]) -> dict[str, Any]:
    if row["layout"] is None or row["request_id"] in kept:
        return row["inputs"]
    return _typed_view(row["inputs"])


def _same_vector(a: Sequence[float | None] | None, b: Sequence[float | None] | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return len(a) == len(b) and all(_same_float(x, y) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------------------------------------- schema


def _schema(engine: Engine) -> dict[str, Any]:
    """What the log and the feedback are made of: columns, keys, indexes (and partitions, the id
    sequence on PostgreSQL)."""
    out: dict[str, Any] = {}
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            for table in ("prediction_log", "prediction_feedback"):
                out[table] = {
                    "columns": sorted(
                        conn.execute(
                            text(
                                "SELECT column_name, data_type, is_nullable, column_default, "
                                "character_maximum_length FROM information_schema.columns "
                                "WHERE table_schema = current_schema() AND table_name = :t"
                            ),
                            {"t": table},
                        ).all()
                    ),
                    "constraints": sorted(
                        conn.execute(
                            text(
                                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                                "WHERE conrelid = to_regclass(:t)"
                            ),
                            {"t": table},
                        ).all()
                    ),
                    "indexes": sorted(
                        conn.execute(
                            text(
                                "SELECT indexname, regexp_replace(indexdef, ' ON [^ ]+\\.', ' ON ') "
                                "FROM pg_indexes WHERE schemaname = current_schema() AND tablename = :t"
                            ),
                            {"t": table},
                        ).all()
                    ),
                    "partitioned by": conn.execute(
                        text("SELECT pg_get_partkeydef(to_regclass(:t))"), {"t": table}
                    ).scalar(),
                }
            out["log partitions"] = _pg_partition_bounds(conn, "prediction_log")
            out["sequence"] = conn.execute(
                text("SELECT pg_get_serial_sequence('prediction_log', 'id')")
            ).scalar()
            out["sequence"] = (out["sequence"] or "").rsplit(".", 1)[-1]
        else:
            for table in ("prediction_log", "prediction_feedback"):
                info = conn.exec_driver_sql(f"PRAGMA table_info({table})").all()
                indexes = []
                for _, name, unique, origin, _partial in conn.exec_driver_sql(f"PRAGMA index_list({table})"):
                    cols = [r[2] for r in conn.exec_driver_sql(f"PRAGMA index_info('{name}')")]
                    indexes.append((name if origin == "c" else origin, unique, cols))
                fks = conn.exec_driver_sql(f"PRAGMA foreign_key_list({table})").all()
                out[table] = {
                    "columns": info,
                    "indexes": sorted(indexes),
                    "foreign keys": [tuple(f[2:]) for f in fks],
                }
    return out


def _pg_partition_bounds(conn: Any, table: str) -> list[tuple[str, str]]:
    found = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t) ORDER BY 1"
        ),
        {"t": table},
    ).all()
    return [(name[len(table) + 1 :], bound) for name, bound in found]


# ---------------------------------------------------------------------------------------------- checks


def check_upgraded(
    url: str, rows: list[dict[str, Any]], feedback: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every prediction of ``rows`` in exactly one batch at its position with all it had; the labels point
    at it; the service reads the log and writes to it. Returns the rows it wrote (as 0017 would hold them)."""
    engine = create_engine(url)
    try:
        names = set(inspect(engine).get_table_names())
        assert "prediction_log" not in names and "prediction_batches" in names
        with engine.connect() as conn:
            batches = conn.execute(select(PredictionBatch.__table__).order_by(PredictionBatch.id)).all()
            layouts = load_layouts(conn)
            positions = {
                f.prediction_id: (f.log_id, f.position)
                for f in conn.execute(select(PredictionFeedback.__table__)).all()
            }
        kept = _kept_documents(rows)
        found: list[tuple[str, Any, int]] = []  # (prediction id, batch, position) in batch order
        documents: dict[int, list[dict[str, Any]]] = {}
        for b in batches:
            assert b.source == "serve"
            found += [(pid, b, i) for i, pid in enumerate(ids_from(b.first_id, b.size))]
        assert [pid for pid, _, _ in found] == [r["prediction_id"] for r in rows]  # each once, in order
        for row, (_, b, i) in zip(rows, found, strict=True):
            assert aware(b.logged_at) == row["logged_at"]
            for name in ("request_id", "model_name", "model_version", "status", "protocol", "latency_ms"):
                assert getattr(b, name) == row[name], name
            assert _same_float(float(floats(as_bytes(b.outputs), b.size)[i]), row["probability"])
            vectors = as_bytes(b.vectors)
            vector = None
            if vectors is not None:
                width = len(vectors) // (8 * b.size)
                vector = floats(vectors, b.size * width).reshape(b.size, width)[i].tolist()
            assert _same_vector(vector, row["outputs"]), row
            assert (None if b.flags is None else b.flags[i]) == row["flags"]
            assert b.layout == row["layout"]
            if row["layout"] is not None:
                w = 8 * LAYOUT.width
                numbers = as_bytes(b.numbers)
                assert numbers is not None and numbers[i * w : (i + 1) * w] == row["numbers"]
                assert (b.inputs is not None) == (row["request_id"] in kept)
            else:
                assert b.numbers is None and b.categories is None and b.inputs is not None
            if b.id not in documents:
                documents[b.id] = decode_documents(b, layouts.get(b.layout) if b.layout is not None else None)
            assert documents[b.id][i] == _expected_document(row, kept), row
            label = feedback.get(row["prediction_id"])
            if label is not None:
                assert positions[row["prediction_id"]] == (b.id, i)
        # the labels of the log's rows and nothing else moved; a label without its prediction stays as it was
        assert set(positions) == set(feedback)
        logged = {r["prediction_id"] for r in rows}
        assert all(positions[pid] == (None, None) for pid in feedback if pid not in logged)
        _prediction_tables_match_the_models(engine)
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                batch_parts = _pg_partition_bounds(conn, "prediction_batches")
                feedback_parts = _pg_partition_bounds(conn, "prediction_feedback")
                in_default = conn.execute(text("SELECT request_id FROM prediction_batches_default")).scalars()
                assert set(in_default) == {"ancient"}
            assert batch_parts == feedback_parts and len(batch_parts) >= 5  # today, tomorrow, 2 days, default
    finally:
        engine.dispose()
    return _service_reads(url, rows, feedback, kept)


def _service_reads(
    url: str, rows: list[dict[str, Any]], feedback: dict[str, dict[str, Any]], kept: set[str]
) -> list[dict[str, Any]]:
    db = open_database(url, upgrade=False)
    try:
        with db.session() as s:
            assert count_predictions(session=s) == len(rows)
            for model in ("credit", VECTOR_MODEL):
                mine = [r for r in rows if r["model_name"] == model]
                assert count_predictions(session=s, model_name=model) == len(mine)
                logged = {p.prediction_id: p for p in recent_predictions(session=s, model_name=model)}
                assert set(logged) == {r["prediction_id"] for r in mine}
                known = logged_predictions(
                    session=s, model_name=model, ids=[r["prediction_id"] for r in mine]
                )
                for row in mine:
                    p = logged[row["prediction_id"]]
                    assert p.inputs == _expected_document(row, kept)
                    assert _same_float(p.probability, row["probability"])
                    assert _same_vector(p.outputs, row["outputs"])
                    assert p.flags == row["flags"] and p.logged_at == row["logged_at"]
                    assert (p.request_id, p.model_version, p.status) == (
                        row["request_id"],
                        row["model_version"],
                        row["status"],
                    )
                    k = known[row["prediction_id"]]
                    assert _same_float(k.probability, row["probability"])
                    assert (k.logged_at, k.model_version, k.status) == (
                        row["logged_at"],
                        row["model_version"],
                        row["status"],
                    )
                    label = feedback.get(row["prediction_id"])
                    if label is not None:  # the label's copies are what the batch says
                        assert _same_float(label["probability"], k.probability)
        # the writer of the new code appends to the converted log: ids after the converted ones
        fresh = _request("after", [_credit(1), _credit(2)], at=datetime.now(UTC))
        ids = [r["prediction_id"] for r in fresh]
        prefix, low = ids[0][:33], int(ids[0][33:], 16)
        batch = LogBatch(
            prefix, low, 2, "after", "credit", 1, fresh[0]["logged_at"], 1.0, "ok", "v1", "serve",
            None, None, None, pack_floats([0.25, 0.75]), None, None, [r["inputs"] for r in fresh],
        )  # fmt: skip
        assert write_log_rows(engine=db.engine, rows=[batch], idempotent=True) == 2
        with db.session() as s:
            newest = s.scalars(select(PredictionBatch).order_by(PredictionBatch.id.desc()).limit(2)).all()
            assert newest[0].request_id == "after" and newest[0].id > newest[1].id
            assert count_predictions(session=s) == len(rows) + 2
        some = [r["prediction_id"] for r in rows if r["model_name"] == "credit"][:3]
        with db.session() as s:
            stored, unknown = record_feedback(
                session=s, model_name="credit", labels=[(pid, 1.0) for pid in some] + [("nope", 0.0)]
            )
        held = sum(1 for pid in some if pid in feedback and feedback[pid]["label"] == 1.0)
        assert (stored, unknown) == (3 - held, ["nope"])  # a label the log already holds is not stored again
        with db.session() as s:
            known = logged_predictions(session=s, model_name="credit", ids=some)
            copies = {
                f.prediction_id: (f.log_id, f.position, f.label)
                for f in s.execute(
                    select(PredictionFeedback).where(PredictionFeedback.prediction_id.in_(some))
                ).scalars()
            }
        assert copies == {pid: (known[pid].log_id, known[pid].position, 1.0) for pid in some}
    finally:
        db.dispose()
    return [
        {**r, "probability": p, "latency_ms": 1.0, "layout": None, "numbers": None, "categories": None}
        for r, p in zip(fresh, (0.25, 0.75), strict=True)
    ]


def check_downgraded(
    url: str, rows: list[dict[str, Any]], feedback: dict[str, dict[str, Any]], schema: dict[str, Any]
) -> None:
    """The 0017 log back: the same rows column by column (the documents of typed rows as their typed copy
    reads them), in their order; the labels point at them; the schema as it was."""
    engine = create_engine(url)
    try:
        assert "prediction_batches" not in inspect(engine).get_table_names()
        back = _read_log(engine)
        kept = _kept_documents(rows)
        assert [r["prediction_id"] for r in back] == [r["prediction_id"] for r in rows]
        for old, new in zip(rows, back, strict=True):
            for name in ROW_COLUMNS:
                if name == "inputs":
                    assert new["inputs"] == _expected_document(old, kept), old
                elif name == "outputs":
                    assert _same_vector(new["outputs"], old["outputs"])
                else:
                    assert new[name] == old[name], (name, old)
        ids = {r["prediction_id"]: r["id"] for r in back}
        labels = _feedback(engine)
        assert set(labels) == set(feedback)
        for pid, label in labels.items():
            assert label == {**feedback[pid], "log_id": ids.get(pid)}, pid
        assert _schema(engine) == schema
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("chunk", [None, 7], ids=["chunk-default", "chunk-7"])
def test_the_log_converts_to_batches_and_back(
    old_url: str, chunk: int | None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    fill_0017(old_url)
    engine = create_engine(old_url)
    rows, feedback, schema = _read_log(engine), _feedback(engine), _schema(engine)
    engine.dispose()
    if chunk:
        monkeypatch.setenv(CHUNK_ENV, str(chunk))
    migrate.upgrade(old_url)
    assert migrate.current(old_url) == migrate.head()
    err = capfd.readouterr().err
    assert f"prediction log: {len(rows)} of {len(rows)} predictions converted (100%)" in err
    if chunk:
        assert f"prediction log: {chunk} of {len(rows)} predictions converted (0%)" in err
    written = check_upgraded(old_url, rows, feedback)
    if not chunk:  # one batch per request and id run (a chunk boundary cuts runs)
        engine = create_engine(old_url)
        with engine.connect() as conn:
            shape = conn.execute(
                text("SELECT request_id, count(*), sum(size) FROM prediction_batches GROUP BY request_id")
            ).all()
        engine.dispose()
        runs = {name: n for name, n, _ in shape}
        assert runs["one"] == runs["thirty-two"] == runs["text"] == runs["extra-key"] == 1
        assert runs["shuffled"] == 4 and runs["big"] == 2 and runs["multi-class-mixed"] == 3
    # the labels as they are now (three recorded by the new code in check_upgraded) go back with their rows
    engine = create_engine(old_url)
    feedback = _feedback(engine)
    engine.dispose()
    rows += written
    migrate.downgrade(old_url, OLD)
    assert migrate.current(old_url) == OLD
    assert f"prediction log: {len(rows)} of {len(rows)} predictions restored (100%)" in capfd.readouterr().err
    check_downgraded(old_url, rows, feedback, schema)
    # and up again: the downgraded log is a 0017 log like any other
    migrate.upgrade(old_url)
    engine = create_engine(old_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT sum(size) FROM prediction_batches")).scalar() == len(rows)
    engine.dispose()


def test_an_empty_log_converts_quietly(old_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    migrate.upgrade(old_url)
    migrate.downgrade(old_url, OLD)
    migrate.upgrade(old_url)
    assert "prediction log" not in capfd.readouterr().err
    engine = create_engine(old_url)
    try:
        _prediction_tables_match_the_models(engine)
    finally:
        engine.dispose()


def test_an_id_a_batch_cannot_hold_stops_the_upgrade_before_any_change(old_url: str) -> None:
    rows = _request("odd", [_credit(1), _credit(2)], at=datetime.now(UTC))
    rows[1]["prediction_id"] = rows[1]["prediction_id"][:-3] + "XYZ"
    engine = create_engine(old_url)
    try:
        with engine.begin() as conn:
            for row in rows:
                conn.execute(insert(OLD_LOG).values(**row))
        with pytest.raises(RuntimeError, match="1 prediction ids are not of the form"):
            migrate.upgrade(old_url)
        assert migrate.current(old_url) == OLD
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM prediction_log")).scalar() == 2
    finally:
        engine.dispose()


def test_a_label_whose_batch_is_gone_goes_back_without_a_row(
    old_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL keeps it without a log id; SQLite's 0017 foreign key cannot hold it: dropped, counted."""
    fill_log(old_url, 200)
    migrate.upgrade(old_url)
    engine = create_engine(old_url)
    try:
        with engine.begin() as conn:
            gone = conn.execute(text("SELECT prediction_id, log_id FROM prediction_feedback LIMIT 1")).one()
            conn.execute(text("DELETE FROM prediction_batches WHERE id = :i"), {"i": gone.log_id})
            size = conn.execute(text("SELECT sum(size) FROM prediction_batches")).scalar()
        capfd.readouterr()
        migrate.downgrade(old_url, OLD)
        labels = _feedback(engine)
        assert _counts(old_url) == (size, None)
    finally:
        engine.dispose()
    assert len(labels) == (20 if old_url.startswith("postgresql") else 19)
    if old_url.startswith("postgresql"):
        assert labels[gone.prediction_id]["log_id"] is None
    else:
        assert (
            "prediction log: 1 labels of predictions no longer logged were dropped" in capfd.readouterr().err
        )
    assert all(label["log_id"] is not None for pid, label in labels.items() if pid != gone.prediction_id)


# ---------------------------------------------------------------------------------------------- a bench log


def check_bench_log_downgraded(url: str, filled: Filled) -> None:
    """The rows of a :func:`bench.migrate_log.fill_log` log back at 0017 (all of them, in order)."""
    n = filled.rows
    engine = create_engine(url)
    try:
        back = _read_log(engine)
        labels = _feedback(engine)
    finally:
        engine.dispose()
    assert len(back) == n
    k = 0
    for r, size in enumerate(sizes(n)):
        for i in range(size):
            row, old = back[k], expected_row(r, i, k, filled.start, filled.step)
            for name in ROW_COLUMNS:
                if name == "inputs" and old["layout"] is not None:
                    assert row["inputs"] == _typed_view(old["inputs"]), k
                else:
                    assert row[name] == old[name], (name, k)
            k += 1
    ids = {r["prediction_id"]: r["id"] for r in back}
    assert len(labels) == filled.labels
    assert all(label["log_id"] == ids[pid] for pid, label in labels.items())


def _counts(url: str) -> tuple[int | None, int | None]:
    """(rows of prediction_log, predictions of prediction_batches); None for a table that is not there."""
    engine = create_engine(url)
    try:
        names = set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            log = (
                conn.execute(text("SELECT count(*) FROM prediction_log")).scalar()
                if "prediction_log" in names
                else None
            )
            held = None
            if "prediction_batches" in names:
                held = conn.execute(text("SELECT coalesce(sum(size), 0) FROM prediction_batches")).scalar()
        return log, held
    finally:
        engine.dispose()


def test_a_killed_conversion_finishes_when_run_again(old_url: str) -> None:
    n, chunk = 6000, 40
    filled = fill_log(old_url, n)
    printed = kill_after(old_url, "upgrade", "head", 5, chunk)
    assert f"prediction log: {5 * chunk} of {n} predictions converted" in printed
    log, held = _counts(old_url)
    assert migrate.current(old_url) == OLD
    assert (
        log is not None and held is not None and 0 < log < n and log + held == n
    )  # nothing lost, nothing twice
    migrate.upgrade(old_url)  # resumes (the default chunk)
    assert migrate.current(old_url) == migrate.head() and _counts(old_url) == (None, n)
    _stamp(old_url, OLD)  # as if killed after the last commit, before alembic recorded the revision
    migrate.upgrade(old_url)
    assert migrate.current(old_url) == migrate.head() and _counts(old_url) == (None, n)
    check_bench_log(old_url, filled)
    printed = kill_after(old_url, "downgrade", OLD, 5, chunk)
    log, held = _counts(old_url)
    assert migrate.current(old_url) == NEW  # the later revisions went down first; 0018 was cut short
    assert log is not None and held is not None and 0 < log < n and log + held == n, printed
    migrate.downgrade(old_url, OLD)
    assert migrate.current(old_url) == OLD and _counts(old_url) == (n, None)
    _stamp(old_url, migrate.head())
    migrate.downgrade(old_url, OLD)
    assert migrate.current(old_url) == OLD and _counts(old_url) == (n, None)
    check_bench_log_downgraded(old_url, filled)


def test_a_million_rows_convert(old_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """1M rows (60,607 requests of 1..32 predictions, 100k labels): the upgrade's time (to head: 0020's first
    ids of the batches included) is printed."""
    n = 1_000_000
    started = time.perf_counter()
    filled = fill_log(old_url, n)
    fill_seconds = time.perf_counter() - started
    started = time.perf_counter()
    migrate.upgrade(old_url)
    seconds = time.perf_counter() - started
    check_bench_log(old_url, filled, sample=5000)
    with capsys.disabled():
        backend = "postgresql" if old_url.startswith("postgresql") else "sqlite"
        print(f"\n{backend}: {n} rows filled in {fill_seconds:.1f} s, upgraded in {seconds:.1f} s")
