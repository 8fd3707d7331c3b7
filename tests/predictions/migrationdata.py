"""The prediction log's migration tests' data and checks: a 0017 log filled and read back, the typed
copies expected, the tables compared with the models, and a migration killed part-way."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Engine,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    insert,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from bench.migrate_log import Filled, expected_row, sizes
from core.database import Base, aware, open_database
from predictions import typed
from predictions.batch import ids_from
from predictions.models import PredictionBatch, PredictionFeedback
from predictions.partitions import include_object
from predictions.service import decode_documents, load_layouts, logged_predictions, new_prediction_ids

ROOT = Path(__file__).resolve().parents[2]


CHUNK_ENV = "DRIFTWARDEN_LOG_MIGRATION_CHUNK"


DAY = timedelta(days=1)


LAYOUT = typed.make_layout(["age", "income"], ["city", "plan"], [["paris", "rome"], ["a", "b"]])


VECTOR_MODEL = "iris"


_json = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


OLD_LOG = Table(
    "prediction_log",
    MetaData(),
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    Column("prediction_id", String(36)),
    Column("request_id", String(128)),
    Column("model_name", String(128)),
    Column("model_version", Integer),
    Column("logged_at", DateTime(timezone=True)),
    Column("inputs", _json),
    Column("probability", Float),
    Column("flags", _json),
    Column("latency_ms", Float),
    Column("status", String(24)),
    Column("protocol", String(8)),
    Column("layout", BigInteger),
    Column("numbers", LargeBinary),
    Column("categories", Text),
    Column("outputs", _json),
)


FEEDBACK = Table(
    "prediction_feedback",
    MetaData(),
    Column("prediction_id", String(36)),
    Column("logged_at", DateTime(timezone=True)),
    Column("model_name", String(128)),
    Column("label", Float),
    Column("received_at", DateTime(timezone=True)),
    Column("log_id", BigInteger),
    Column("probability", Float),
    Column("model_version", Integer),
    Column("status", String(24)),
)


def _today() -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _typed_rows(docs: list[dict[str, Any]]) -> list[tuple[int | None, bytes | None, str | None]]:
    """Each row's typed copy as the 0017 writer stored it (layout, numbers, categories); none when the
    request's values cannot be typed (then no row of it has one)."""
    encoded = typed.encode_rows(LAYOUT, docs)
    if encoded is None:
        return [(None, None, None)] * len(docs)
    step = 8 * LAYOUT.width
    return [(LAYOUT.id, encoded.data[i * step : (i + 1) * step], encoded.others[i]) for i in range(len(docs))]


def _request(
    name: str,
    docs: list[dict[str, Any]],
    *,
    at: datetime,
    ids: list[str] | None = None,
    model: str = "credit",
    version: int = 1,
    probabilities: list[float | None] | None = None,
    vectors: list[list[float | None] | None] | None = None,
    flags: list[list[str] | None] | None = None,
    status: str = "ok",
    protocol: str = "v1",
    typed_copy: bool = True,
) -> list[dict[str, Any]]:
    """One request's log rows, as the 0017 writer made them."""
    n = len(docs)
    ids = ids or new_prediction_ids(n)
    copies = _typed_rows(docs) if typed_copy else [(None, None, None)] * n
    probabilities = probabilities or [round(0.1 + 0.8 * i / max(1, n), 6) for i in range(n)]
    return [
        {
            "prediction_id": ids[i],
            "request_id": name,
            "model_name": model,
            "model_version": version,
            "logged_at": at,
            "inputs": docs[i],
            "probability": probabilities[i],
            "flags": None if flags is None else flags[i],
            "latency_ms": 2.5,
            "status": status,
            "protocol": protocol,
            "layout": copies[i][0],
            "numbers": copies[i][1],
            "categories": copies[i][2],
            "outputs": None if vectors is None else vectors[i],
        }
        for i in range(n)
    ]


def _credit(i: int) -> dict[str, Any]:
    """A credit row document: ints and floats, nulls, an absent value, unseen categories now and then."""
    doc: dict[str, Any] = {
        "age": 20 + i if i % 7 else None,
        "income": 1000.5 * i if i % 2 else 3000 + i,
        "city": ["paris", "rome", "berlin", None, ""][i % 5],
        "plan": ["a", "b", None][i % 3],
    }
    if i % 11 == 4:
        del doc["income"]  # absent: missing, as null
    if i % 13 == 6:
        del doc["plan"]
    return doc


def old_rows() -> list[dict[str, Any]]:
    """The 0017 log of the round-trip test, oldest id first."""
    today = _today()
    now = datetime.now(UTC).replace(microsecond=123456)
    rows: list[dict[str, Any]] = []
    rows += _request("one", [_credit(1)], at=now - timedelta(minutes=5))
    rows += _request(
        "thirty-two",
        [_credit(i) for i in range(32)],
        at=today - DAY + timedelta(hours=3, microseconds=7),
        version=2,
        flags=[["age:observed_range"] if i % 4 == 0 else None for i in range(32)],
        protocol="v2",
    )
    texts = [{"age": 30, "income": 10.0, "city": "rome"}, {"age": 31, "income": "n/a", "city": "paris"}]
    rows += _request("text", texts + [_credit(i) for i in range(3)], at=now - timedelta(minutes=4))
    extra = [{**_credit(i), "note": f"seen {i}"} for i in range(4)]
    rows += _request("extra-key", extra, at=now - timedelta(minutes=3))
    rows += _request(
        "multi-class",
        [{"petal": 1.5 + i} for i in range(3)],
        at=now - timedelta(minutes=2),
        model=VECTOR_MODEL,
        probabilities=[0.7, 0.5, 0.8],
        vectors=[[0.2, 0.7, 0.1], [0.5, 0.25, 0.25], [0.1, 0.1, 0.8]],
        typed_copy=False,
    )
    rows += _request(
        "multi-class-violation",
        [{"petal": -1.0}],
        at=now - timedelta(minutes=2),
        model=VECTOR_MODEL,
        probabilities=[None],
        vectors=[[None, None, None]],
        status="output_violation",
        typed_copy=False,
    )
    rows += _request(
        "multi-class-mixed",  # one row without its vector: kept apart, no vector is lost
        [{"petal": 2.0}, {"petal": 2.5}, {"petal": 3.0}],
        at=now - timedelta(minutes=1),
        model=VECTOR_MODEL,
        vectors=[[0.3, 0.3, 0.4], None, [0.6, 0.2, 0.2]],
        typed_copy=False,
    )
    rows += _request(
        "violation",
        [_credit(2), _credit(3)],
        at=now - timedelta(seconds=50),
        probabilities=[None, None],
        status="output_violation",
    )
    shuffled = new_prediction_ids(4)
    shuffled = [shuffled[2], shuffled[0], shuffled[3], shuffled[1]]  # not counting up: one batch each
    rows += _request("shuffled", [_credit(i) for i in range(4)], at=now - timedelta(seconds=40), ids=shuffled)
    rows += _request(
        "big",  # 2100 ids: two runs of new_prediction_ids (2048 + 52)
        [_credit(i) for i in range(2100)],
        at=today - 2 * DAY + timedelta(hours=5),
        flags=[["income:observed_range"] if i % 100 == 0 else None for i in range(2100)],
    )
    rows += _request("ancient", [texts[1], _credit(5)], at=today - 40 * DAY, typed_copy=False)
    rows += _request("last", [_credit(8)], at=now - timedelta(seconds=1), version=2)
    return rows


def _pg_partitions(conn: Any) -> None:
    """The daily partitions retention would have made for the rows two days and one day old."""
    for days in (1, 2):
        day = _today() - days * DAY
        bounds = f"FOR VALUES FROM ('{day.isoformat()}') TO ('{(day + DAY).isoformat()}')"
        for table in ("prediction_log", "prediction_feedback"):
            conn.execute(
                text(f"CREATE TABLE IF NOT EXISTS {table}_p{day:%Y%m%d} PARTITION OF {table} {bounds}")
            )


LABELLED = re.compile(r"^(one|thirty-two|text|extra-key|multi-class|big|ancient|violation)$")


def fill_0017(url: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Write :func:`old_rows` and labels (with 0015's copies) at 0017; returns the rows (with their ids) and
    the feedback rows by prediction id."""
    rows = old_rows()
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                _pg_partitions(conn)
            conn.execute(
                text(
                    "INSERT INTO prediction_log_layouts (id, numeric, categorical, categories) "
                    "VALUES (:i, :n, :c, :k)"
                ),
                dict(zip("inck", (LAYOUT.id, *LAYOUT.as_json()), strict=True)),
            )
            for row in rows:  # one statement per row: ids in this order
                conn.execute(insert(OLD_LOG).values(**row))
            ids = dict(conn.execute(select(OLD_LOG.c.prediction_id, OLD_LOG.c.id)).all())
            for row in rows:
                row["id"] = ids[row["prediction_id"]]
            labelled = [r for i, r in enumerate(rows) if LABELLED.match(r["request_id"]) and i % 3 != 1]
            received = datetime.now(UTC).replace(microsecond=0)
            for i, row in enumerate(labelled):
                conn.execute(
                    insert(FEEDBACK).values(
                        prediction_id=row["prediction_id"],
                        logged_at=row["logged_at"],
                        model_name=row["model_name"],
                        label=float(i % 2),
                        received_at=received,
                        log_id=row["id"],
                        probability=row["probability"],
                        model_version=row["model_version"],
                        status=row["status"],
                    )
                )
            if engine.dialect.name == "postgresql":  # a label whose prediction the log does not hold
                conn.execute(
                    insert(FEEDBACK).values(
                        prediction_id="0190ffff-0000-7000-8000-000000000abc",
                        logged_at=_today() - DAY,
                        model_name="credit",
                        label=1.0,
                        received_at=received,
                        log_id=999_999,  # a row long gone: after the upgrade it must not name a batch
                    )
                )
        return rows, _feedback(engine)
    finally:
        engine.dispose()


def _feedback(engine: Engine) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        found = conn.execute(select(FEEDBACK)).mappings().all()
    return {f["prediction_id"]: _normal(dict(f)) for f in found}


def _normal(row: dict[str, Any]) -> dict[str, Any]:
    """Times as aware UTC (SQLite returns naive ones)."""
    return {k: aware(v) if isinstance(v, datetime) else v for k, v in row.items()}


def _typed_view(doc: dict[str, Any]) -> dict[str, Any]:
    """A document as its typed copy reads back: every numeric as a float (missing: None), a categorical's
    text when it has one (missing: left out)."""
    out: dict[str, Any] = {}
    for name in LAYOUT.numeric:
        value = doc.get(name)
        out[name] = None if value is None else float(value)
    for name in LAYOUT.categorical:
        if doc.get(name) is not None:
            out[name] = doc[name]
    return out


def _same_float(a: float | None, b: float | None) -> bool:
    a = None if a is None or (isinstance(a, float) and math.isnan(a)) else a
    b = None if b is None or (isinstance(b, float) and math.isnan(b)) else b
    return a == b


def _pg_keys_and_indexes_are_the_models(engine: Engine) -> None:
    """What compare_metadata does not look at: the partitioned keys, the indexes' INCLUDE lists (from the
    models), the id sequence."""

    def include(table: Table, name: str) -> str:
        index = next(i for i in table.indexes if i.name == name)
        return ", ".join(index.dialect_options["postgresql"]["include"])

    with engine.connect() as conn:
        keys: dict[str, str] = dict(
            conn.execute(
                text(
                    "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE conrelid = to_regclass(:t)"
                ),
                {"t": "prediction_batches"},
            ).all()
        )
        assert keys == {"pk_prediction_batches": "PRIMARY KEY (first_id, logged_at)"}
        indexes: dict[str, str] = dict(  # definitions without quotes ("position" is a keyword)
            conn.execute(
                text(
                    "SELECT indexname, replace(indexdef, '\"', '') FROM pg_indexes "
                    "WHERE schemaname = current_schema() "
                    "AND tablename IN ('prediction_batches', 'prediction_feedback')"
                )
            ).all()
        )
        batches, feedback = PredictionBatch.__table__, PredictionFeedback.__table__
        assert isinstance(batches, Table) and isinstance(feedback, Table)
        name = "ix_prediction_batches_model_name_id"
        assert indexes[name].endswith(f"(model_name, id) INCLUDE ({include(batches, name)})")
        name = "ix_prediction_feedback_model_name_log_id"
        assert indexes[name].endswith(f"(model_name, log_id) INCLUDE ({include(feedback, name)})")
        assert indexes["ix_prediction_batches_model_name_logged_at"].endswith("(model_name, logged_at)")
        sequence = conn.execute(text("SELECT pg_get_serial_sequence('prediction_batches', 'id')")).scalar()
        assert sequence is not None and sequence.endswith(".prediction_batches_id_seq")
        kind = conn.execute(
            text(
                "SELECT data_type FROM pg_sequences WHERE schemaname = current_schema() "
                "AND sequencename = 'prediction_batches_id_seq'"
            )
        ).scalar()
        assert kind == "bigint"
        assert conn.execute(text("SELECT pg_get_partkeydef('prediction_batches'::regclass)")).scalar() == (
            "RANGE (logged_at)"
        )


def _prediction_tables_match_the_models(engine: Engine) -> None:
    def include(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
        partition = re.match(r"^prediction_(batches|feedback|log)_(p\d{8}(\d{6})?|default)$", name or "")
        if type_ == "table" and reflected and compare_to is None and partition is not None:
            return False
        return include_object(obj, name, type_, reflected, compare_to)  # SQLite's first-id key

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": include})
        diff = compare_metadata(context, Base.metadata)
    ours = [d for d in diff if "prediction_" in repr(d)]
    assert ours == [], ours
    if engine.dialect.name == "postgresql":
        _pg_keys_and_indexes_are_the_models(engine)


def check_bench_log(url: str, filled: Filled, *, sample: int | None = None) -> None:
    """The batches of a :func:`bench.migrate_log.fill_log` log: the counts, the labels' pointers (all), and
    the predictions (all, or a sample spread over the log) against the rows it wrote."""
    n = filled.rows
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT sum(size) FROM prediction_batches")).scalar() == n
            batches = conn.execute(text("SELECT count(*) FROM prediction_batches")).scalar()
            assert batches is not None and filled.requests <= batches < filled.requests * 1.1
            labels = conn.execute(
                text(
                    "SELECT f.prediction_id, f.position, b.first_id, b.size FROM prediction_feedback f "
                    "LEFT JOIN prediction_batches b ON b.id = f.log_id AND b.model_name = f.model_name"
                )
            ).all()
            assert len(labels) == filled.labels == n // 10
            for pid, position, first, size in labels:  # each label points at its prediction
                assert first is not None and 0 <= position < size, pid
                assert ids_from(str(first), size)[position] == pid
        every = max(1, n // sample) if sample else 1
        wanted: dict[str, dict[str, Any]] = {}
        k = 0
        for r, size in enumerate(sizes(n)):
            for i in range(size):
                if k % every == 0 or k == n - 1:
                    row = expected_row(r, i, k, filled.start, filled.step)
                    wanted[row["prediction_id"]] = row
                k += 1
        db = open_database(url, upgrade=False)
        try:
            with db.session() as s:
                layouts = load_layouts(s)
                for model in ("credit", "iris"):
                    ids = [pid for pid, row in wanted.items() if row["model_name"] == model]
                    known = logged_predictions(session=s, model_name=model, ids=ids)
                    assert set(known) == set(ids)
                    by_batch: dict[int, list[tuple[str, int]]] = {}
                    for pid in ids:
                        by_batch.setdefault(known[pid].log_id, []).append((pid, known[pid].position))
                    for start in range(0, len(by_batch), 500):
                        keys = list(by_batch)[start : start + 500]
                        for b in s.scalars(select(PredictionBatch).where(PredictionBatch.id.in_(keys))):
                            docs = decode_documents(
                                b, layouts.get(b.layout) if b.layout is not None else None
                            )
                            for pid, i in by_batch[b.id]:
                                row = wanted[pid]
                                assert aware(b.logged_at) == row["logged_at"]
                                assert b.request_id == row["request_id"] and b.status == row["status"]
                                assert _same_float(known[pid].probability, row["probability"])
                                assert (None if b.flags is None else b.flags[i]) == row["flags"]
                                expected = row["inputs"]
                                if row["layout"] is not None:
                                    expected = _typed_view(expected)
                                    assert b.inputs is None
                                assert docs[i] == expected, (pid, docs[i], expected)
        finally:
            db.dispose()
    finally:
        engine.dispose()


def kill_after(
    url: str, action: str, revision: str, lines: int, chunk: int, marker: str = "prediction log:"
) -> str:
    """Run ``migrate.<action>`` in a child process (chunks of ``chunk`` rows) and SIGKILL it once it has
    printed ``lines`` progress lines starting with ``marker`` (one migration's lines: it is then converting
    the next chunk); returns what it printed."""
    code = f"from core import migrate; migrate.{action}({url!r}, {revision!r})"
    env = {**os.environ, CHUNK_ENV: str(chunk)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    seen: list[str] = []
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    try:
        for line in proc.stderr:
            seen.append(line)
            if sum(s.startswith(marker) and "%" in s for s in seen) >= lines:
                proc.send_signal(signal.SIGKILL)
                break
            assert time.monotonic() < deadline, "".join(seen)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)
    return "".join(seen)


def _stamp(url: str, revision: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    finally:
        engine.dispose()
