"""Windows read from the prediction log, on SQLite and PostgreSQL: bounds, time windows, chunking, labels,
values that bypassed the contract, and the two readers (generic and PostgreSQL blocks) yielding the same rows.

The monitors' side (the same window folded into a sketch) is tested in tests/monitors/test_log_window.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import Engine, text

from core.database import open_database
from core.tabular import Columns
from predictions.service import record_feedback
from predictions.windows import (
    Chunk,
    Reader,
    WindowSpec,
    WindowSummary,
    choose_reader,
    read_chunks,
    summarize_window,
)
from tests.predictions.logdata import log_columns
from tests.support import postgres_schema

NUMERIC = ["amount", "count"]
CATEGORICAL = ["colour"]
FEATURES = NUMERIC + CATEGORICAL


def make_columns(n: int, *, seed: int) -> Columns:
    """Two numeric features (one with missing values) and one categorical (with missing values)."""
    rng = np.random.default_rng(seed)
    amount = np.round(rng.lognormal(5, 1, n), 2)
    amount[rng.random(n) < 0.05] = np.nan
    colour = rng.choice(np.array(["red", "green", "blue"], dtype=object), n)
    colour[rng.random(n) < 0.05] = None
    return {"amount": amount, "count": rng.poisson(3, n).astype(np.int64), "colour": colour}


@dataclass
class Rows:
    """A window's chunks put back together."""

    chunks: int
    rows: int
    numeric: dict[str, np.ndarray]
    categories: dict[str, Counter[str | None]]
    predictions: np.ndarray
    labels: np.ndarray


def collect(chunks: Iterable[Chunk]) -> Rows:
    parts = list(chunks)
    categories: dict[str, Counter[str | None]] = {name: Counter() for name in CATEGORICAL}
    for chunk in parts:
        for name in CATEGORICAL:  # a column of text (generic reader) or counts (blocks reader)
            if name in chunk.category_counts:
                categories[name].update(chunk.category_counts[name])
            else:
                categories[name].update(chunk.columns[name].tolist())

    def joined(values: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(values) if values else np.array([], dtype=np.float64)

    return Rows(
        chunks=len(parts),
        rows=sum(c.rows for c in parts),
        numeric={name: joined([c.columns[name] for c in parts]) for name in NUMERIC},
        categories=categories,
        predictions=joined([c.predictions for c in parts]),
        labels=joined([c.labels for c in parts]),
    )


def read(
    engine: Engine,
    spec: WindowSpec,
    *,
    reader: Reader = Reader.AUTO,
    chunk_rows: int = 25_000,
    now: datetime | None = None,
    labels: bool = True,
) -> tuple[WindowSummary | None, Rows]:
    """The window's summary and its rows, read by ``reader``."""
    summary = summarize_window(engine=engine, model_name="credit", spec=spec, now=now)
    if summary is None:
        return None, collect([])
    chunks = read_chunks(
        engine=engine,
        summary=summary,
        numeric=NUMERIC,
        categorical=CATEGORICAL,
        chunk_rows=chunk_rows,
        reader=reader,
        labels=labels,
    )
    return summary, collect(chunks)


def readers(engine: Engine) -> list[Reader]:
    pg = engine.dialect.name == "postgresql"
    return [Reader.GENERIC, Reader.BLOCKS, Reader.TYPED] if pg else [Reader.GENERIC]


def test_last_n_rows_of_one_version_in_id_order_and_in_chunks(database_url: str) -> None:
    db = open_database(database_url)
    cols = make_columns(1_200, seed=5)
    p = np.random.default_rng(6).random(1_200)
    log_columns(db.engine, cols, features=FEATURES, probability=p)
    other = make_columns(40, seed=6)
    log_columns(db.engine, other, features=FEATURES, status="output_violation")  # not answered: left out
    log_columns(db.engine, other, features=FEATURES, model="other")
    log_columns(db.engine, make_columns(70, seed=7), features=FEATURES, version=2)

    spec = WindowSpec(rows=1_000, version=1)
    for reader in readers(db.engine):
        summary, rows = read(db.engine, spec, reader=reader, chunk_rows=128)
        assert summary is not None and summary.rows == 1_000 and rows.rows == 1_000
        assert summary.last_id - summary.first_id + 1 == 1_000  # nothing else was written in between
        assert summary.start is not None and summary.end is not None and summary.start < summary.end
        assert rows.chunks >= (8 if reader is Reader.GENERIC else 1)
        assert np.array_equal(rows.numeric["amount"], cols["amount"][200:], equal_nan=True)
        assert np.array_equal(rows.numeric["count"], cols["count"][200:].astype(np.float64))
        assert rows.categories["colour"] == Counter(cols["colour"][200:].tolist())
        assert np.array_equal(rows.predictions, p[200:])
        assert np.isnan(rows.labels).all()

    everything, rows = read(db.engine, WindowSpec(rows=5_000, version=1))
    assert everything is not None and everything.rows == 1_200 and rows.rows == 1_200
    all_versions, rows = read(db.engine, WindowSpec())
    assert all_versions is not None and all_versions.rows == 1_270 and rows.rows == 1_270
    assert summarize_window(engine=db.engine, model_name="nobody", spec=WindowSpec(rows=10)) is None
    db.dispose()


def test_time_window_and_its_intersection_with_last_n(database_url: str) -> None:
    db = open_database(database_url)
    # half-second timestamps: the boundary row is stored with its microseconds by every writer path
    now = datetime(2026, 5, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    # 600 rows one second apart, the newest at now - 1 s
    log_columns(
        db.engine, make_columns(600, seed=8), features=FEATURES, when=now, spacing=timedelta(seconds=1)
    )
    for reader in readers(db.engine):
        five, rows = read(db.engine, WindowSpec(minutes=5), reader=reader, now=now)
        assert five is not None and five.rows == 300 and rows.rows == 300
        assert five.start == now - timedelta(seconds=300) and five.end == now - timedelta(seconds=1)
        both, rows = read(db.engine, WindowSpec(rows=100, minutes=5), reader=reader, now=now)
        assert both is not None and both.rows == 100 and rows.rows == 100
        assert both.start == now - timedelta(seconds=100)
        later, rows = read(db.engine, WindowSpec(minutes=5), reader=reader, now=now + timedelta(hours=1))
        assert later is None and rows.rows == 0
    db.dispose()


def test_feedback_labels_are_joined_to_their_predictions(database_url: str) -> None:
    db = open_database(database_url)
    cols = make_columns(900, seed=9)
    y = (np.random.default_rng(10).random(900) < 0.3).astype(np.float64)
    ids = log_columns(db.engine, cols, features=FEATURES)
    with db.session() as s:
        stored, unknown = record_feedback(
            session=s, model_name="credit", labels=[(pid, float(y[i])) for i, pid in enumerate(ids)][::2]
        )
    assert stored == 450 and not unknown
    want = np.full(900, np.nan)
    want[::2] = y[::2]
    for reader in readers(db.engine):
        _, rows = read(db.engine, WindowSpec(rows=900), reader=reader, chunk_rows=200)
        assert np.array_equal(rows.labels, want, equal_nan=True)
        if reader is not Reader.GENERIC:  # without the join: no label, the rest unchanged
            _, bare = read(db.engine, WindowSpec(rows=900), reader=reader, chunk_rows=200, labels=False)
            assert bare.rows == 900 and np.isnan(bare.labels).all() and bare.labels.size == 900
            assert np.array_equal(bare.numeric["amount"], rows.numeric["amount"], equal_nan=True)
            assert np.array_equal(bare.predictions, rows.predictions, equal_nan=True)
            assert bare.categories == rows.categories
    db.dispose()


def test_readers_agree_and_stray_values_are_missing(database_url: str) -> None:
    """Rows that bypassed the contract (text in a numeric feature, a missing key) give NaN, never break a
    window; on PostgreSQL the blocks reader re-reads such a range and agrees exactly with the generic one.
    """
    db = open_database(database_url)
    cols = make_columns(900, seed=10)
    log_columns(db.engine, cols, features=FEATURES, probability=np.random.default_rng(11).random(900))
    doc = "CAST(:doc AS JSONB)" if db.engine.dialect.name == "postgresql" else ":doc"
    with db.engine.begin() as conn:
        conn.execute(
            text(f"update prediction_log set inputs = {doc} where id in (3, 4)"),
            {"doc": '{"amount": "abc", "colour": "tab\\tand\\\\slash"}'},
        )
    spec = WindowSpec(rows=900)
    _, generic = read(db.engine, spec, reader=Reader.GENERIC, chunk_rows=200)
    assert generic.rows == 900
    assert np.isnan(generic.numeric["amount"][2:4]).all() and np.isnan(generic.numeric["count"][2:4]).all()
    assert np.array_equal(generic.numeric["amount"][4:], cols["amount"][4:], equal_nan=True)
    assert generic.categories["colour"]["tab\tand\\slash"] == 2
    if db.engine.dialect.name == "postgresql":
        assert choose_reader(engine=db.engine) is Reader.TYPED
        _, blocks = read(db.engine, spec, reader=Reader.BLOCKS)
        assert blocks.rows == generic.rows
        for name in NUMERIC:
            assert np.array_equal(blocks.numeric[name], generic.numeric[name], equal_nan=True), name
        assert blocks.categories == generic.categories
        assert np.array_equal(blocks.predictions, generic.predictions)
        assert np.array_equal(blocks.labels, generic.labels, equal_nan=True)
    else:
        assert choose_reader(engine=db.engine) is Reader.GENERIC
        with pytest.raises(ValueError, match="needs PostgreSQL"):
            choose_reader(engine=db.engine, reader=Reader.BLOCKS)
    db.dispose()


def test_window_spec_is_validated_and_described() -> None:
    with pytest.raises(ValueError, match="rows must be positive"):
        WindowSpec(rows=0)
    with pytest.raises(ValueError, match="minutes must be positive"):
        WindowSpec(minutes=-1)
    assert WindowSpec(rows=100, minutes=5, version=2).describe() == (
        "last 100 predictions within the last 5 minutes of version 2"
    )
    assert WindowSpec().describe() == "every prediction"


@pytest.mark.postgres
def test_the_window_summary_reads_only_the_covering_index(postgres_url: str) -> None:
    """On PostgreSQL the summary of a last-N window needs no log row: the (model_name, id) index carries
    status, logged_at and model_version (migration 0011), so the plan is an index-only scan."""
    with postgres_schema(postgres_url) as url:
        db = open_database(url)
        log_columns(db.engine, make_columns(2_000, seed=8), features=FEATURES)
        with db.engine.begin() as conn:
            definition = conn.execute(
                text("SELECT pg_get_indexdef('ix_prediction_log_model_name_id'::regclass)")
            ).scalar_one()
        assert "INCLUDE (status, logged_at, model_version)" in definition
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE prediction_log"))
            conn.execute(text("SET enable_seqscan = off"))  # a 2,000-row table: show the index suffices
            plan = "\n".join(
                conn.execute(
                    text(
                        "EXPLAIN SELECT count(*), min(logged_at), max(logged_at), min(id), max(id) FROM"
                        " (SELECT id, logged_at FROM prediction_log WHERE model_name = 'credit'"
                        " AND status = 'ok' AND model_version = 1 ORDER BY id DESC LIMIT 1000) AS s"
                    )
                ).scalars()
            )
        assert "Index Only Scan" in plan and "Seq Scan" not in plan, plan
        summary = summarize_window(
            engine=db.engine, model_name="credit", spec=WindowSpec(rows=1_000, version=1)
        )
        assert summary is not None and summary.rows == 1_000
        db.dispose()
