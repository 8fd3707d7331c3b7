"""A window read in chunks of about ``chunk_rows`` predictions: ranges of batch ids, each one query on
PostgreSQL, fetched ahead on two threads; a multi-class window's vectors with their labels."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.sql.elements import ColumnElement

from predictions import typed
from predictions.batch import as_bytes
from predictions.models import PredictionBatch, PredictionStatus
from predictions.windows.decoding import Batches, decode_batches, holds_all, known_layouts
from predictions.windows.labels import range_labels
from predictions.windows.spec import CHUNK_ROWS, NO_SORT, Chunk, WindowSummary, filters

T = TypeVar("T")


def _ranges(first: int, last: int, rows: int, chunk_rows: int) -> list[tuple[int, int]]:
    """Batch id ranges expected to hold about ``chunk_rows`` predictions each (ids are shared by models)."""
    span = last - first + 1
    step = max(1, -(-chunk_rows * span // max(rows, 1)))
    return [(lo, min(lo + step - 1, last)) for lo in range(first, last + 1, step)]


def range_where(summary: WindowSummary, lo: int, hi: int) -> list[ColumnElement[bool]]:
    where = filters(model_name=summary.model_name, spec=summary.spec, since=summary.since)
    return [*where, PredictionBatch.id >= lo, PredictionBatch.id <= hi]


def _fetch_rows(engine: Engine, summary: WindowSummary, lo: int, hi: int) -> Batches:
    """A range's batches, one database row each."""
    log = PredictionBatch
    stmt = (
        select(log.id, log.size, log.layout, log.numbers, log.categories, log.outputs, log.inputs, log.source)
        .where(*range_where(summary, lo, hi))
        .order_by(log.id)
    )
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    return Batches(
        ids=np.array([r[0] for r in rows], dtype=np.int64),
        sizes=np.array([r[1] for r in rows], dtype=np.int64),
        layouts=[None if r[2] is None else int(r[2]) for r in rows],
        numbers=[as_bytes(r[3]) for r in rows],
        categories=[r[4] for r in rows],
        outputs=[as_bytes(r[5]) or b"" for r in rows],
        inputs=[r[6] for r in rows],
        sources=[str(r[7]) for r in rows],
    )


# PostgreSQL: one row per range, every column of the range concatenated in id order (the rows come sorted
# from the subquery: one sort for every aggregate); the ids come along, so the reader checks the order; the
# sources one line each (a few letters a batch: the window's predictions by source cost no other read)
_RANGE_SQL = """
SELECT count(*), count(layout), min(layout), max(layout), count(numbers),
    string_agg(int8send(id), ''::bytea), string_agg(int8send(size::int8), ''::bytea),
    string_agg(numbers, ''::bytea), string_agg(categories, E'\\n'), string_agg(outputs, ''::bytea),
    string_agg(source, E'\\n')
FROM (
    SELECT p.id, p.size, p.layout, p.numbers, p.categories, p.outputs, p.source
    FROM prediction_batches p
    WHERE p.model_name = %(model_name)s AND p.status = %(status)s AND p.id BETWEEN %(lo)s AND %(hi)s {extra}
    ORDER BY p.id
) AS rows
"""


def range_params(summary: WindowSummary, sql: str = _RANGE_SQL) -> tuple[str, dict[str, Any]]:
    """``sql`` with the window's filters in place of ``{extra}``, and its parameters (but the id range)."""
    extra = ""
    params: dict[str, Any] = {"model_name": summary.model_name, "status": PredictionStatus.OK.value}
    if summary.spec.version is not None:
        extra += " AND p.model_version = %(version)s"
        params["version"] = summary.spec.version
    if summary.since is not None:
        extra += " AND p.logged_at >= %(since)s"
        params["since"] = summary.since
    if summary.spec.until is not None:
        extra += " AND p.logged_at < %(until)s"
        params["until"] = summary.spec.until
    return sql.replace("{extra}", extra), params


def _fetch_joined(
    engine: Engine,
    summary: WindowSummary,
    lo: int,
    hi: int,
    layouts: dict[int, typed.Layout],
    asked: Sequence[str],
) -> Batches | None:
    """A range in one row (PostgreSQL); None when its batches are not all typed in one known layout holding
    every asked feature. Sorts are off for the statement: the range's index scans come in id order (a
    Merge Append over the partitions), where a planner without statistics sorts the wide rows on disk."""
    sql, params = range_params(summary)
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(NO_SORT)
            cur.execute(sql, {**params, "lo": lo, "hi": hi}, binary=True)
            n, typed_n, low, high, numbered, ids, sizes, numbers, texts, outputs, sources = cur.fetchone()
        raw.commit()
    finally:
        raw.close()
    n = int(n)
    if n and (typed_n != n or numbered != n or low != high):
        return None
    if n and (int(low) not in layouts or not holds_all(layouts[int(low)], asked)):
        return None
    id_array = np.frombuffer(bytes(ids or b""), dtype=">i8").astype(np.int64)
    if id_array.size > 1 and not np.all(np.diff(id_array) > 0):
        return None
    total_sizes = np.frombuffer(bytes(sizes or b""), dtype=">i8").astype(np.int64)
    # the whole range typed in its one layout (the texts are the rows' lines, in order)
    return Batches(
        ids=id_array,
        sizes=total_sizes,
        layouts=[],
        numbers=[],
        categories=[],
        outputs=[bytes(outputs or b"")],
        inputs=[],
        joined=(int(low), bytes(numbers or b""), texts) if n else None,
        sources=sources.split("\n") if sources else [],
    )


def _fetch(
    engine: Engine,
    summary: WindowSummary,
    lo: int,
    hi: int,
    layouts: dict[int, typed.Layout],
    asked: Sequence[str],
) -> Batches:
    if engine.dialect.name == "postgresql":
        joined = _fetch_joined(engine, summary, lo, hi, layouts, asked)
        if joined is not None:
            return joined
    return _fetch_rows(engine, summary, lo, hi)


def _prefetched(
    fetch: Callable[[int, int], T], ranges: Sequence[tuple[int, int]], prefetch: int
) -> Iterator[tuple[tuple[int, int], T]]:
    """``fetch`` of each id range, in order, with ``prefetch`` threads fetching the next ranges meanwhile."""
    if prefetch <= 0:
        for lo, hi in ranges:
            yield (lo, hi), fetch(lo, hi)
        return
    with ThreadPoolExecutor(max_workers=prefetch, thread_name_prefix="dw-window") as pool:
        pending: deque[tuple[tuple[int, int], Future[T]]] = deque()
        todo = iter(ranges)
        for lo, hi in itertools.islice(todo, prefetch):
            pending.append(((lo, hi), pool.submit(fetch, lo, hi)))
        while pending:
            (lo, hi), future = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(fetch, nxt[0], nxt[1])))
            yield (lo, hi), future.result()


def read_chunks(
    *,
    engine: Engine,
    summary: WindowSummary,
    numeric: Sequence[str],
    categorical: Sequence[str],
    chunk_rows: int = CHUNK_ROWS,
    labels: bool = True,
) -> Iterator[Chunk]:
    """The predictions of a summarized window in log order, chunk by chunk: named features (categoricals
    counted), predictions and labels (without ``labels`` every label is NaN: read them apart with
    :func:`labelled_arrays`)."""
    layouts = known_layouts(engine)
    ranges = _ranges(summary.first_id, summary.last_id, summary.rows + summary.skip, chunk_rows)
    prefetch = 2 if engine.dialect.name == "postgresql" else 0
    asked = (*numeric, *categorical)

    def fetch(lo: int, hi: int) -> Batches:
        return _fetch(engine, summary, lo, hi, layouts, asked)

    for (lo, hi), got in _prefetched(fetch, ranges, prefetch):
        if not got.ids.size:
            continue
        skip = summary.skip if lo == summary.first_id else 0
        found = range_labels(engine, summary, got, lo, hi) if labels else None
        yield decode_batches(got, layouts, numeric=numeric, categorical=categorical, skip=skip, labels=found)


def read_vectors(
    *, engine: Engine, summary: WindowSummary, width: int, chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A summarized window's whole answers (a multi-class model's ``[rows, width]`` probability vectors) and
    labels (NaN without one), in log order, chunk by chunk; a batch without vectors of that width is NaN."""
    log = PredictionBatch
    ranges = _ranges(summary.first_id, summary.last_id, summary.rows + summary.skip, chunk_rows)
    for lo, hi in ranges:
        stmt = select(log.id, log.size, log.vectors).where(*range_where(summary, lo, hi)).order_by(log.id)
        with engine.connect() as conn:
            rows = conn.execute(stmt).all()
        if not rows:
            continue
        got = Batches(
            ids=np.array([r[0] for r in rows], dtype=np.int64),
            sizes=np.array([r[1] for r in rows], dtype=np.int64),
            layouts=[],
            numbers=[],
            categories=[],
            outputs=[],
            inputs=[],
        )
        parts = []
        for _, size, blob in rows:
            data = as_bytes(blob)
            if data is not None and len(data) == 8 * size * width:
                parts.append(np.frombuffer(data, dtype="<f8").reshape(size, width))
            else:
                parts.append(np.full((size, width), np.nan))
        vectors = np.concatenate(parts).astype(np.float64)
        labels = range_labels(engine, summary, got, lo, hi)
        skip = summary.skip if lo == summary.first_id else 0
        yield vectors[skip:], labels[skip:]
