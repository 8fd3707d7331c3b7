"""Windows read from the prediction log, on SQLite and PostgreSQL: bounds, time windows, chunking, labels,
values that bypassed the contract; requests of one and of many predictions, logged typed (with a layout) or
as documents. A last-N window ends inside a request (``WindowSummary.skip``): its predictions, labels, block
statistics and vectors leave the request's oldest predictions out.

The monitors' side (the same window folded into a sketch) is tested in tests/monitors/test_log_window.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import Engine, select, text

from core.database import Database, aware, open_database
from core.tabular import Columns
from predictions import typed
from predictions.batch import LogBatch
from predictions.models import PredictionBatch
from predictions.service import record_feedback
from predictions.windows import (
    BlockStat,
    Chunk,
    WindowSpec,
    WindowSummary,
    block_stats,
    labelled_arrays,
    labelled_chunks,
    narrow,
    read_chunks,
    read_vectors,
    summarize_blocks,
    summarize_window,
)
from tests.predictions.logdata import (
    CATEGORICAL,
    FEATURES,
    LAYOUT,
    NUMERIC,
    documents,
    log_columns,
    make_columns,
    write_requests,
)
from tests.support import postgres_schema


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
        assert chunk.rows == chunk.predictions.size == chunk.labels.size
        for name in NUMERIC:
            assert chunk.columns[name].size == chunk.rows, name
        for name in CATEGORICAL:
            assert sum(chunk.category_counts[name].values()) == chunk.rows, name
            categories[name].update(chunk.category_counts[name])

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
    chunk_rows: int = 25_000,
    now: datetime | None = None,
    labels: bool = True,
    model: str = "credit",
) -> tuple[WindowSummary | None, Rows]:
    """The window's summary and its rows."""
    summary = summarize_window(engine=engine, model_name=model, spec=spec, now=now)
    if summary is None:
        return None, collect([])
    return summary, chunks_of(engine, summary, chunk_rows=chunk_rows, labels=labels)


def chunks_of(
    engine: Engine, summary: WindowSummary, *, chunk_rows: int = 25_000, labels: bool = True
) -> Rows:
    chunks = read_chunks(
        engine=engine,
        summary=summary,
        numeric=NUMERIC,
        categorical=CATEGORICAL,
        chunk_rows=chunk_rows,
        labels=labels,
    )
    return collect(chunks)


def assert_rows(rows: Rows, cols: Columns, p: np.ndarray, labels: np.ndarray | None = None) -> None:
    """``rows`` hold exactly these predictions, in order."""
    n = len(p)
    assert rows.rows == n
    assert np.array_equal(rows.numeric["amount"], cols["amount"], equal_nan=True)
    assert np.array_equal(rows.numeric["count"], cols["count"].astype(np.float64))
    assert rows.categories["colour"] == Counter(cols["colour"].tolist())
    assert np.array_equal(rows.predictions, p, equal_nan=True)
    want = np.full(n, np.nan) if labels is None else labels
    assert np.array_equal(rows.labels, want, equal_nan=True)


def sliced(cols: Columns, part: slice | np.ndarray) -> Columns:
    return {name: values[part] for name, values in cols.items()}


def newest(sizes: Sequence[int], n: int) -> tuple[int, int]:
    """Of batches of ``sizes`` (oldest first), how many the newest ``n`` predictions touch, and how many
    predictions of the oldest of those are left out."""
    held = 0
    for k, size in enumerate(reversed(sizes), start=1):
        held += size
        if held >= n:
            return k, held - n
    return len(sizes), 0


def batch_ids(engine: Engine, model: str = "credit") -> list[tuple[int, int, datetime, int]]:
    """(id, size, logged_at, version) of the model's batches, in id order."""
    log = PredictionBatch
    stmt = select(log.id, log.size, log.logged_at, log.model_version).where(log.model_name == model)
    with engine.connect() as conn:
        return [(int(i), int(n), aware(w) or w, int(v)) for i, n, w, v in conn.execute(stmt.order_by(log.id))]


@pytest.mark.parametrize("per_request", [1, 7])
@pytest.mark.parametrize("layout", [None, LAYOUT], ids=["documents", "typed"])
def test_last_n_rows_of_one_version_in_id_order_and_in_chunks(
    database_url: str, per_request: int, layout: typed.Layout | None
) -> None:
    db = open_database(database_url)
    cols = make_columns(1_200, seed=5)
    p = np.random.default_rng(6).random(1_200)
    log_columns(db.engine, cols, features=FEATURES, probability=p, per_request=per_request, layout=layout)
    other = make_columns(40, seed=6)
    log_columns(db.engine, other, features=FEATURES, status="output_violation")  # not answered: left out
    log_columns(db.engine, other, features=FEATURES, model="other", layout=layout)
    log_columns(db.engine, make_columns(70, seed=7), features=FEATURES, version=2, per_request=per_request)

    sizes = [min(per_request, 1_200 - lo) for lo in range(0, 1_200, per_request)]
    touched, skip = newest(sizes, 1_000)
    assert (skip > 0) == (per_request > 1)  # with requests of 7 the window ends inside one
    summary, rows = read(db.engine, WindowSpec(rows=1_000, version=1), chunk_rows=128)
    assert summary is not None and summary.rows == 1_000 and summary.skip == skip
    assert summary.last_id - summary.first_id + 1 == touched  # nothing else was written in between
    assert summary.start is not None and summary.end is not None and summary.start < summary.end
    assert rows.chunks >= 8
    assert_rows(rows, sliced(cols, slice(200, None)), p[200:])

    everything, rows = read(db.engine, WindowSpec(rows=5_000, version=1))
    assert everything is not None and everything.rows == 1_200 and everything.skip == 0
    assert_rows(rows, cols, p)
    all_versions, rows = read(db.engine, WindowSpec())
    assert all_versions is not None and all_versions.rows == 1_270 and rows.rows == 1_270
    assert summarize_window(engine=db.engine, model_name="nobody", spec=WindowSpec(rows=10)) is None
    db.dispose()


def test_time_window_and_its_intersection_with_last_n(database_url: str) -> None:
    db = open_database(database_url)
    # half-second timestamps: the boundary row is stored with its microseconds by every writer path
    now = datetime(2026, 5, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    # 600 predictions one second apart, the newest at now - 1 s
    log_columns(
        db.engine, make_columns(600, seed=8), features=FEATURES, when=now, spacing=timedelta(seconds=1)
    )
    five, rows = read(db.engine, WindowSpec(minutes=5), now=now)
    assert five is not None and five.rows == 300 and rows.rows == 300
    assert five.start == now - timedelta(seconds=300) and five.end == now - timedelta(seconds=1)
    both, rows = read(db.engine, WindowSpec(rows=100, minutes=5), now=now)
    assert both is not None and both.rows == 100 and rows.rows == 100
    assert both.start == now - timedelta(seconds=100)
    later, rows = read(db.engine, WindowSpec(minutes=5), now=now + timedelta(hours=1))
    assert later is None and rows.rows == 0
    db.dispose()


@pytest.mark.parametrize("layout", [None, LAYOUT], ids=["documents", "typed"])
def test_a_window_by_minutes_takes_the_requests_of_those_minutes(
    database_url: str, layout: typed.Layout | None
) -> None:
    """A prediction's time is its request's: a time window takes whole requests; with a last-N bound too it
    ends inside the oldest request it reaches."""
    db = open_database(database_url)
    now = datetime(2026, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    cols = make_columns(600, seed=18)
    p = np.random.default_rng(19).random(600)
    # 120 requests of 5, ten seconds apart, the newest at now - 10 s
    ten = timedelta(seconds=10)
    log_columns(
        db.engine, cols, features=FEATURES, probability=p, when=now, spacing=ten, per_request=5, layout=layout
    )
    five, rows = read(db.engine, WindowSpec(minutes=5), now=now, chunk_rows=40)
    assert five is not None and five.since == now - timedelta(minutes=5)
    assert five.rows == 150 and five.skip == 0  # the 30 requests at now - 300 s ... now - 10 s
    assert five.start == now - timedelta(seconds=300) and five.end == now - ten
    assert_rows(rows, sliced(cols, slice(450, None)), p[450:])
    assert rows.chunks > 1
    both, rows = read(db.engine, WindowSpec(rows=12, minutes=5), now=now)
    assert both is not None and (both.rows, both.skip) == (12, 3)  # 5 + 5 + the newest 2 of a request
    assert both.start == now - 3 * ten and both.end == now - ten
    assert_rows(rows, sliced(cols, slice(588, None)), p[588:])
    wide, rows = read(db.engine, WindowSpec(rows=1_000, minutes=5), now=now)  # fewer in the minutes
    assert wide is not None and (wide.rows, wide.skip) == (150, 0)
    assert_rows(rows, sliced(cols, slice(450, None)), p[450:])
    db.dispose()


@pytest.mark.parametrize("per_request", [1, 6])
def test_feedback_labels_are_joined_to_their_predictions(database_url: str, per_request: int) -> None:
    db = open_database(database_url)
    cols = make_columns(900, seed=9)
    y = (np.random.default_rng(10).random(900) < 0.3).astype(np.float64)
    ids = log_columns(db.engine, cols, features=FEATURES, per_request=per_request, layout=LAYOUT)
    with db.session() as s:
        stored, unknown = record_feedback(
            session=s, model_name="credit", labels=[(pid, float(y[i])) for i, pid in enumerate(ids)][::2]
        )
    assert stored == 450 and not unknown
    want = np.full(900, np.nan)
    want[::2] = y[::2]
    summary, rows = read(db.engine, WindowSpec(rows=900), chunk_rows=200)
    assert summary is not None and rows.rows == 900
    assert np.array_equal(rows.labels, want, equal_nan=True)
    _, bare = read(db.engine, WindowSpec(rows=900), chunk_rows=200, labels=False)  # no label read
    assert bare.rows == 900 and np.isnan(bare.labels).all() and bare.labels.size == 900
    assert np.array_equal(bare.numeric["amount"], rows.numeric["amount"], equal_nan=True)
    assert np.array_equal(bare.predictions, rows.predictions, equal_nan=True)
    assert bare.categories == rows.categories
    p, labels = labelled_arrays(engine=db.engine, summary=summary)  # the labelled ones, from the feedback
    assert np.array_equal(labels, y[::2]) and np.array_equal(p, np.full(450, 0.5))
    db.dispose()


def test_stray_values_are_missing_and_read_alike_typed_or_not(database_url: str) -> None:
    """Requests that bypassed the contract (text in a numeric feature, a missing key) are logged with their
    documents: NaN where a number cannot be read, never a broken window; read the same as the same
    predictions logged without a typed copy at all (on PostgreSQL a range mixing both is read batch by
    batch)."""
    db = open_database(database_url)
    cols = make_columns(900, seed=10)
    p = np.random.default_rng(11).random(900)
    docs = documents(cols)
    for i in (2, 3):
        docs[i] = {"amount": "abc", "colour": "tab\tand\\slash"}
    docs[7] = {**docs[7], "amount": "12.5"}  # a number as text reads as that number
    typed_batches = write_requests(db.engine, docs, probability=p, layout=LAYOUT, per_request=3)
    assert [b.layout is None for b in typed_batches[:4]] == [True, True, True, False]  # 2 and 3; 7
    write_requests(db.engine, docs, probability=p, model="plain", per_request=3)  # documents only
    spec = WindowSpec(rows=900)
    _, rows = read(db.engine, spec, chunk_rows=200)
    assert rows.rows == 900
    assert np.isnan(rows.numeric["amount"][2:4]).all() and np.isnan(rows.numeric["count"][2:4]).all()
    assert rows.numeric["amount"][7] == 12.5
    keep = np.r_[0:2, 4:7, 8:900]
    assert np.array_equal(rows.numeric["amount"][keep], cols["amount"][keep], equal_nan=True)
    assert rows.categories["colour"]["tab\tand\\slash"] == 2
    assert np.array_equal(rows.predictions, p)
    for chunk_rows in (200, 7):
        _, plain_rows = read(db.engine, spec, chunk_rows=chunk_rows, model="plain")
        assert plain_rows.rows == rows.rows
        for name in NUMERIC:
            assert np.array_equal(plain_rows.numeric[name], rows.numeric[name], equal_nan=True), name
        assert plain_rows.categories == rows.categories
        assert np.array_equal(plain_rows.predictions, rows.predictions)
        assert np.array_equal(plain_rows.labels, rows.labels, equal_nan=True)
    db.dispose()


def _requests_with_labels(
    db: Database, *, layout: typed.Layout | None, n: int = 100, per_request: int = 10
) -> tuple[Columns, np.ndarray, np.ndarray, list[LogBatch], list[list[float | None]]]:
    """``n`` predictions in requests of ``per_request`` (multi-class vectors of width 3 too), a label on
    every prediction whose index is not a multiple of 3; the columns, outputs, labels (NaN: none), batches,
    vectors."""
    cols = make_columns(n, seed=21)
    p = np.random.default_rng(22).random(n)
    vectors: list[list[float | None]] = [[float(v), float(1 - v), 0.0] for v in p]
    start = datetime.now(UTC) - timedelta(minutes=1)
    batches = write_requests(
        db.engine,
        documents(cols),
        probability=p,
        layout=layout,
        per_request=per_request,
        vectors=vectors,
        start=start,
        spacing=timedelta(seconds=1),
    )
    y = np.full(n, np.nan)
    labelled = [i for i in range(n) if i % 3]
    y[labelled] = (np.arange(n)[labelled] % 2).astype(np.float64)
    all_ids = [pid for b in batches for pid in b.ids()]
    with db.session() as s:
        assert record_feedback(
            session=s, model_name="credit", labels=[(all_ids[i], float(y[i])) for i in labelled]
        ) == (len(labelled), [])
    return cols, p, y, batches, vectors


@pytest.mark.parametrize("layout", [None, LAYOUT], ids=["documents", "typed"])
def test_a_last_n_window_ending_inside_a_request_leaves_its_oldest_predictions_out(
    database_url: str, layout: typed.Layout | None
) -> None:
    db = open_database(database_url)
    cols, p, y, _, vectors = _requests_with_labels(db, layout=layout)
    stored = batch_ids(db.engine)
    assert [n for _, n, _, _ in stored] == [10] * 10
    spec = WindowSpec(rows=25)  # requests 9 and 8, and the newest 5 of request 7
    summary, rows = read(db.engine, spec)
    assert summary is not None
    assert (summary.rows, summary.skip) == (25, 5)
    assert (summary.first_id, summary.last_id) == (stored[7][0], stored[9][0])
    assert (summary.start, summary.end) == (stored[7][2], stored[9][2])
    assert_rows(rows, sliced(cols, slice(75, None)), p[75:], y[75:])
    for chunk_rows in (1, 4, 12):  # ranges of one batch or more, the first one cut
        assert_rows(
            chunks_of(db.engine, summary, chunk_rows=chunk_rows),
            sliced(cols, slice(75, None)),
            p[75:],
            y[75:],
        )

    # the labels of the predictions left out are not the window's (70..74 holds four of them)
    lp, ly = labelled_arrays(engine=db.engine, summary=summary)
    kept = [i for i in range(75, 100) if i % 3]
    assert np.array_equal(lp, p[kept]) and np.array_equal(ly, y[kept])
    parts = list(labelled_chunks(engine=db.engine, summary=summary, chunk_rows=4))
    assert np.array_equal(np.concatenate([a for a, _ in parts]), p[kept])
    assert np.array_equal(np.concatenate([b for _, b in parts]), y[kept])

    # the vectors of the same predictions
    got = list(read_vectors(engine=db.engine, summary=summary, width=3, chunk_rows=12))
    v = np.concatenate([a for a, _ in got])
    assert np.array_equal(v, np.array(vectors[75:], dtype=np.float64))
    assert np.array_equal(np.concatenate([b for _, b in got]), y[75:], equal_nan=True)

    # the window in two parts between batch ids: the first keeps the skip, the second starts whole
    first = narrow(summary, first_id=summary.first_id, last_id=stored[8][0], rows=15)
    second = narrow(summary, first_id=stored[9][0], last_id=summary.last_id, rows=10)
    assert (first.skip, second.skip) == (5, 0)
    assert_rows(chunks_of(db.engine, first), sliced(cols, slice(75, 90)), p[75:90], y[75:90])
    assert_rows(chunks_of(db.engine, second), sliced(cols, slice(90, None)), p[90:], y[90:])
    with pytest.raises(ValueError, match="not inside"):
        narrow(summary, first_id=stored[6][0], last_id=summary.last_id, rows=10)

    # block statistics: the window's predictions per aligned block of batch ids, the skip taken out
    for block_ids in (1, 2, 4):
        summary2, stats = summarize_blocks(
            engine=db.engine, model_name="credit", spec=spec, block_ids=block_ids
        )
        assert summary2 == summary
        assert stats == block_stats(engine=db.engine, summary=summary, block_ids=block_ids)
        assert stats == expected_blocks(stored[7:], block_ids, skip=5), block_ids
        assert sum(st.rows for st in stats) == 25
    db.dispose()


def expected_blocks(
    batches: Sequence[tuple[int, int, datetime, int]], block_ids: int, *, skip: int
) -> list[BlockStat]:
    """Block statistics of a window's batches (oldest first), computed here."""
    out: dict[int, BlockStat] = {}
    for k, (i, n, at, _) in enumerate(batches):
        block = i // block_ids
        rows = n - (skip if k == 0 else 0)
        if block in out:
            rows += out[block].rows
            at = min(at, out[block].oldest)
        out[block] = BlockStat(block, rows, at)
    return [out[b] for b in sorted(out)]


def test_one_scan_gives_the_summary_and_blocks_of_the_two_queries(database_url: str) -> None:
    """Requests of uneven sizes (1 to 40 predictions, some far larger than the rest, with gaps of other
    models' ids): for many last-N windows and block sizes, the one-scan :func:`summarize_blocks` (a cut
    batch, a cut across blocks, a window reaching the oldest batch) equals :func:`summarize_window` and
    :func:`block_stats` read apart."""
    db = open_database(database_url)
    rng = np.random.default_rng(41)
    sizes = rng.integers(1, 8, 220)
    sizes[rng.random(220) < 0.1] = 40
    start = datetime.now(UTC) - timedelta(minutes=30)
    docs = documents(make_columns(int(sizes.sum()), seed=42))
    lo = 0
    for k, n in enumerate(sizes.tolist()):
        write_requests(
            db.engine, docs[lo : lo + n], per_request=n, start=start + timedelta(seconds=k), layout=LAYOUT
        )
        if k % 9 == 0:  # another model's batch between two of this model's
            write_requests(db.engine, docs[:2], model="other", per_request=2, start=start)
        lo += n
    total = int(sizes.sum())
    for rows in (1, 3, 7, 40, 41, 100, 257, 600, total - 1, total, total + 5):
        spec = WindowSpec(rows=rows)
        for block_ids in (1, 3, 16, 64, 1024):
            summary, stats = summarize_blocks(
                engine=db.engine, model_name="credit", spec=spec, block_ids=block_ids
            )
            apart = summarize_window(engine=db.engine, model_name="credit", spec=spec)
            assert summary == apart, (rows, block_ids)
            assert summary is not None
            assert stats == block_stats(engine=db.engine, summary=summary, block_ids=block_ids), (
                rows,
                block_ids,
            )
            assert sum(st.rows for st in stats) == min(rows, total)
    assert summarize_blocks(engine=db.engine, model_name="none", spec=WindowSpec(rows=5), block_ids=4) == (
        None,
        [],
    )
    db.dispose()


def test_a_version_filter_takes_that_versions_requests_only(database_url: str) -> None:
    """Requests of two versions alternate in the log: a window of one version holds its predictions, its
    labels and its blocks only, and its last N end inside one of its requests."""
    db = open_database(database_url)
    cols = make_columns(80, seed=31)
    p = np.random.default_rng(32).random(80)
    docs = documents(cols)
    start = datetime.now(UTC) - timedelta(minutes=5)
    ids: list[str] = []
    version = np.zeros(80, dtype=np.int64)
    for k, lo in enumerate(range(0, 80, 4)):  # 20 requests of 4, versions 1, 2, 1, 2...
        v = 1 + k % 2
        version[lo : lo + 4] = v
        batches = write_requests(
            db.engine,
            docs[lo : lo + 4],
            probability=p[lo : lo + 4],
            version=v,
            per_request=4,
            start=start + timedelta(seconds=k),
            layout=LAYOUT if k % 3 else None,  # typed and documents mixed too
        )
        ids += [pid for b in batches for pid in b.ids()]
    y = (np.arange(80) % 2).astype(np.float64)
    with db.session() as s:
        assert (
            record_feedback(session=s, model_name="credit", labels=list(zip(ids, y.tolist(), strict=True)))[1]
            == []
        )
    two = np.flatnonzero(version == 2)
    summary, rows = read(db.engine, WindowSpec(version=2), chunk_rows=5)
    assert summary is not None and summary.rows == 40 and summary.skip == 0
    assert_rows(rows, sliced(cols, two), p[two], y[two])
    last = two[-10:]  # the newest 10 of version 2: two requests and the newest 2 of a third
    summary, rows = read(db.engine, WindowSpec(rows=10, version=2))
    assert summary is not None and (summary.rows, summary.skip) == (10, 2)
    assert_rows(rows, sliced(cols, last), p[last], y[last])
    lp, ly = labelled_arrays(engine=db.engine, summary=summary)
    assert np.array_equal(lp, p[last]) and np.array_equal(ly, y[last])
    stored = [b for b in batch_ids(db.engine) if b[3] == 2]
    stats = block_stats(engine=db.engine, summary=summary, block_ids=2)
    assert stats == expected_blocks(stored[-3:], 2, skip=2)
    assert sum(st.rows for st in stats) == 10
    ones, rows = read(db.engine, WindowSpec(rows=6, version=1))
    one = np.flatnonzero(version == 1)[-6:]
    assert ones is not None and (ones.rows, ones.skip) == (6, 2)
    assert_rows(rows, sliced(cols, one), p[one], y[one])
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
    """On PostgreSQL the summary of a last-N window needs no batch row: the (model_name, id) index carries
    status, logged_at, model_version and size, so the plan is an index-only scan."""
    with postgres_schema(postgres_url) as url:
        db = open_database(url)
        log_columns(db.engine, make_columns(2_000, seed=8), features=FEATURES, per_request=4)
        with db.engine.begin() as conn:
            definition = conn.execute(
                text("SELECT pg_get_indexdef('ix_prediction_batches_model_name_id'::regclass)")
            ).scalar_one()
        assert "INCLUDE (status, logged_at, model_version, size)" in definition
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE prediction_batches"))
            conn.execute(text("SET enable_seqscan = off"))  # a 500-row table: show the index suffices
            plan = "\n".join(
                conn.execute(
                    text(
                        "EXPLAIN SELECT count(*), sum(size), min(logged_at), max(logged_at), min(id), max(id)"
                        " FROM (SELECT id, logged_at, size FROM prediction_batches"
                        " WHERE model_name = 'credit' AND status = 'ok' AND model_version = 1"
                        " ORDER BY id DESC LIMIT 250) AS s"
                    )
                ).scalars()
            )
        assert "Index Only Scan" in plan and "Seq Scan" not in plan, plan
        summary = summarize_window(
            engine=db.engine, model_name="credit", spec=WindowSpec(rows=1_000, version=1)
        )
        assert summary is not None and summary.rows == 1_000 and summary.skip == 0
        assert summary.last_id - summary.first_id + 1 == 250
        db.dispose()
