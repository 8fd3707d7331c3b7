"""Windows of the prediction log, read from the database in chunks of numpy columns (for the monitors).

A window is the last ``rows`` answered predictions and/or those of the last ``minutes`` of one model
(optionally of one version), in insertion (``id``) order. It is read in two steps:

1. **Summary** (:func:`summarize_window`, one aggregate query): row count, first/last ``logged_at``
   and the id range of the window (for a last-N window an index scan of the newest N ids on
   ``(model_name, id)``); rows written while the window is read get higher ids and are left out.
2. **Rows** (:func:`read_chunks`), chunk by chunk: the named input features, the ``probability``
   column, and the label from a left join of ``prediction_feedback`` (on ``prediction_id``; on
   PostgreSQL also on ``logged_at``, the partition key of both tables, within the window's time span,
   so that only the label partitions of the window's days are read). Each chunk arrives as numpy
   columns (categoricals may arrive already counted); the caller folds it into its summary and drops
   it: memory is bounded by ``chunk_rows``, never by the window.

Three readers yield the same values:

- ``generic`` (SQLite and PostgreSQL): SQLAlchemy Core with a streaming cursor (``yield_per``;
  a server-side cursor on PostgreSQL); each feature is extracted in SQL (``json_extract`` on
  SQLite, ``->>`` on PostgreSQL) so rows arrive as flat scalars.
- ``typed`` (PostgreSQL, the default there): the typed copy of the inputs written at insert time
  (:mod:`predictions.typed`: numeric features and category codes as packed float64 in the order of a
  recorded layout). Per id range one query returns one row: every typed value of the range concatenated
  in id order (``string_agg`` over the rows sorted once), with probability, label and ids as
  ``float8send``/``int8send``; the client reads it with ``np.frombuffer`` and counts codes with
  ``np.bincount``. A range whose rows are not all typed in one layout holding every asked feature
  (rows logged before migration 0010, a row that could not be typed) is read by the blocks reader, so a
  window may mix both and the values stay exact.
- ``blocks`` (PostgreSQL): the window is cut into id ranges of about ``chunk_rows``
  rows; each range is one query returning each row as one short binary value, its JSON document
  with probability and label (``{"p": ..., "y": ..., "x": inputs}``, no per-feature work in SQL).
  The values are joined by newlines and parsed by pyarrow's JSON reader in C++; categorical columns
  are counted in Arrow (``value_counts``), never as one Python string per row. Two threads fetch
  the next ranges while the current one is counted. This beats ``COPY (SELECT inputs->>'f', ...) TO
  STDOUT``: extracting and formatting every feature costs the server more than printing the
  document once, and reading COPY's one-message-per-row stream from Python costs seconds by itself.
  A range holding a value the JSON schema rejects (a row that bypassed the input contract) is
  re-read with the generic reader, so both agree exactly.

A third reader, ``aggregate`` (PostgreSQL, selectable, not the default: slower here), returns counts
instead of rows: :mod:`predictions.aggregates`.

Values: a numeric feature is a float (JSON ``null``, an absent key or a value of another type is NaN);
a categorical feature is its text (``None`` when absent); a prediction or label without a value is NaN.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import Engine, and_, func, literal, select
from sqlalchemy.sql.elements import ColumnElement

from core.config import Settings
from core.database import aware
from core.tabular import as_float
from predictions import typed
from predictions.models import PredictionFeedback, PredictionLog, PredictionLogLayout, PredictionStatus
from predictions.service import feedback_join

T = TypeVar("T")

CHUNK_ROWS: int = Settings.model_fields["monitor_chunk_rows"].default
"""Rows per chunk unless told otherwise: the default of the ``monitor_chunk_rows`` setting. The monitors
sketch in-memory columns in chunks of the same size."""


class Reader(enum.StrEnum):
    AUTO = "auto"  # typed on PostgreSQL, generic elsewhere
    GENERIC = "generic"
    BLOCKS = "blocks"
    TYPED = "typed"  # PostgreSQL: the typed columns (predictions/typed.py); ranges without them: blocks
    AGGREGATE = "aggregate"  # PostgreSQL: counts computed in the database (predictions/aggregates.py)


@dataclass(frozen=True)
class WindowSpec:
    """Which rows form a window: the last ``rows`` and/or the last ``minutes`` (both: the intersection)."""

    rows: int | None = None
    minutes: float | None = None
    version: int | None = None  # only predictions of this model version (None: every version)

    def __post_init__(self) -> None:
        if self.rows is not None and self.rows <= 0:
            raise ValueError(f"window rows must be positive, got {self.rows}")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"window minutes must be positive, got {self.minutes}")

    def describe(self) -> str:
        parts = []
        if self.rows is not None:
            parts.append(f"last {self.rows} predictions")
        if self.minutes is not None:
            parts.append(f"last {self.minutes:g} minutes")
        what = " within the ".join(parts) or "every prediction"
        return what + ("" if self.version is None else f" of version {self.version}")


@dataclass(frozen=True)
class WindowSummary:
    """Where a non-empty window lies in the log: its row count, time span and id range."""

    model_name: str
    spec: WindowSpec
    rows: int
    start: datetime | None
    end: datetime | None
    first_id: int
    last_id: int
    since: datetime | None  # the time bound (now - minutes); None without one


@dataclass
class Chunk:
    """One chunk of a window as numpy columns.

    ``columns`` holds every numeric feature (floats) and, from the generic reader, every categorical
    feature (text or None); the blocks reader counts categoricals instead (``category_counts``).
    """

    rows: int
    columns: dict[str, np.ndarray]
    predictions: np.ndarray
    labels: np.ndarray
    category_counts: dict[str, Counter[str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Bounds:
    low: int  # inclusive
    high: int  # inclusive
    since: datetime | None


def _filters(
    *, model_name: str, spec: WindowSpec, since: datetime | None, upto: int | None = None
) -> list[ColumnElement[bool]]:
    log = PredictionLog
    out: list[ColumnElement[bool]] = [log.model_name == model_name, log.status == PredictionStatus.OK.value]
    if spec.version is not None:
        out.append(log.model_version == spec.version)
    if since is not None:
        out.append(log.logged_at >= since)
    if upto is not None:
        out.append(log.id <= upto)
    return out


def _since(spec: WindowSpec, now: datetime | None) -> datetime | None:
    """The window's time bound (None without one)."""
    if spec.minutes is None:
        return None
    return (now or datetime.now(UTC)).astimezone(UTC) - timedelta(minutes=spec.minutes)  # SQLite: naive UTC


def newest_id(
    *, engine: Engine, model_name: str, spec: WindowSpec, now: datetime | None = None
) -> int | None:
    """The id of the window's newest row (None: the window is empty); one backward index probe.

    A run that reads blocks before its summary is known bounds the summary by it (``upto``), so both see
    the same newest row while new rows keep arriving."""
    since = _since(spec, now)
    stmt = select(func.max(PredictionLog.id)).where(*_filters(model_name=model_name, spec=spec, since=since))
    with engine.connect() as conn:
        found = conn.execute(stmt).scalar()
    return None if found is None else int(found)


def choose_reader(*, engine: Engine, reader: Reader | str = Reader.AUTO) -> Reader:
    """The reader to use on ``engine`` (``auto``: typed on PostgreSQL, generic elsewhere)."""
    reader = Reader(reader)
    if reader is Reader.AUTO:
        reader = Reader.TYPED if engine.dialect.name == "postgresql" else Reader.GENERIC
    if reader in (Reader.BLOCKS, Reader.TYPED, Reader.AGGREGATE) and engine.dialect.name != "postgresql":
        raise ValueError(f"the {reader.value} reader needs PostgreSQL")
    return reader


def summarize_window(
    *, engine: Engine, model_name: str, spec: WindowSpec, now: datetime | None = None, upto: int | None = None
) -> WindowSummary | None:
    """One query: the window's row count, time span and id range (None when the window is empty); ``upto``:
    the window as it stood when its newest row had this id (newer rows are left out)."""
    since = _since(spec, now)
    where = _filters(model_name=model_name, spec=spec, since=since, upto=upto)
    rows = select(PredictionLog.id, PredictionLog.logged_at).where(*where)
    if spec.rows is not None:
        rows = rows.order_by(PredictionLog.id.desc()).limit(spec.rows)
    sub = rows.subquery()
    stmt = select(
        func.count(),
        func.min(sub.c.logged_at),
        func.max(sub.c.logged_at),
        func.min(sub.c.id),
        func.max(sub.c.id),
    )
    with engine.connect() as conn:
        n, start, end, low, high = conn.execute(stmt).one()
    if not n:
        return None
    return WindowSummary(
        model_name=model_name,
        spec=spec,
        rows=int(n),
        start=aware(start),
        end=aware(end),
        first_id=int(low),
        last_id=int(high),
        since=since,
    )


@dataclass(frozen=True)
class BlockStat:
    """An aligned block of a window's ids: its index (``id // block_ids``), rows and oldest ``logged_at``."""

    block: int
    rows: int
    oldest: datetime


_BLOCK_STATS_SQL = """
SELECT p.id / %(block_ids)s AS block, count(*), min(p.logged_at)
FROM prediction_log p
WHERE p.model_name = %(model_name)s AND p.status = %(status)s AND p.id BETWEEN %(lo)s AND %(hi)s {version}
GROUP BY 1
"""

# The planner cannot know that ``id / B`` has few values: it expects a group per row and sorts the window's
# index entries (on disk beyond work_mem: a 1M-row window's statistics took 5-6 s instead of 2 at load 13);
# without sorts it hashes the few groups. The setting lasts for the statement's own transaction.
_NO_SORT = "SET LOCAL enable_sort = off"


def block_stats(*, engine: Engine, summary: WindowSummary, block_ids: int) -> list[BlockStat]:
    """Per aligned block of ``block_ids`` ids holding rows of the window's id range: its row count and oldest
    ``logged_at`` (model, status and version filters, not the time bound: a block whose oldest row is older
    than the window's ``since`` is cut by it). PostgreSQL; an index-only scan of ``(model_name, id)``."""
    if engine.dialect.name != "postgresql":
        raise ValueError("block statistics need PostgreSQL")
    params: dict[str, Any] = {
        "block_ids": block_ids,
        "model_name": summary.model_name,
        "status": PredictionStatus.OK.value,
        "lo": summary.first_id,
        "hi": summary.last_id,
    }
    version = ""
    if summary.spec.version is not None:
        version = "AND p.model_version = %(version)s"
        params["version"] = summary.spec.version
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(_NO_SORT)
            cur.execute(_BLOCK_STATS_SQL.replace("{version}", version), params)
            found = sorted(cur.fetchall())
        raw.commit()
    finally:
        raw.close()
    return [BlockStat(int(b), int(n), aware(at) or datetime.min.replace(tzinfo=UTC)) for b, n, at in found]


def summarize_blocks(
    *,
    engine: Engine,
    model_name: str,
    spec: WindowSpec,
    block_ids: int,
    now: datetime | None = None,
    upto: int | None = None,
) -> tuple[WindowSummary | None, list[BlockStat]]:
    """:func:`summarize_window` and :func:`block_stats` of the window (PostgreSQL; ``upto`` as there).
    Without a time bound, one index-only scan gives both: the window is then every row of its id range that
    passes the filters, so its rows grouped by block are the blocks' statistics."""
    if spec.minutes is not None:
        summary = summarize_window(engine=engine, model_name=model_name, spec=spec, now=now, upto=upto)
        if summary is None:
            return None, []
        return summary, block_stats(engine=engine, summary=summary, block_ids=block_ids)
    rows = select(PredictionLog.id, PredictionLog.logged_at).where(
        *_filters(model_name=model_name, spec=spec, since=None, upto=upto)
    )
    if spec.rows is not None:
        rows = rows.order_by(PredictionLog.id.desc()).limit(spec.rows)
    sub = rows.subquery()
    block = sub.c.id.op("/")(literal(block_ids)).label("block")
    stmt = select(
        block,
        func.count(),
        func.min(sub.c.logged_at),
        func.max(sub.c.logged_at),
        func.min(sub.c.id),
        func.max(sub.c.id),
    ).group_by(block)
    with engine.connect() as conn:
        conn.exec_driver_sql(_NO_SORT)
        found = sorted(conn.execute(stmt).all(), key=lambda row: int(row[0]))
    if not found:
        return None, []
    stats = [
        BlockStat(int(b), int(n), aware(low) or datetime.min.replace(tzinfo=UTC)) for b, n, low, *_ in found
    ]
    summary = WindowSummary(
        model_name=model_name,
        spec=spec,
        rows=sum(st.rows for st in stats),
        start=min(st.oldest for st in stats),
        end=max(aware(row[3]) or datetime.min.replace(tzinfo=UTC) for row in found),
        first_id=int(found[0][4]),
        last_id=int(found[-1][5]),
        since=None,
    )
    return summary, stats


def narrow(summary: WindowSummary, *, first_id: int, last_id: int, rows: int) -> WindowSummary:
    """The part of ``summary``'s window between two ids (``rows``: about how many it holds, which sizes the
    chunks), for :func:`read_chunks`; the filters (and the labels' time span) stay the window's."""
    if first_id < summary.first_id or last_id > summary.last_id or first_id > last_id:
        raise ValueError(f"ids {first_id}..{last_id} are not inside {summary.first_id}..{summary.last_id}")
    return replace(summary, first_id=first_id, last_id=last_id, rows=max(rows, 1))


def _window_where(*, model_name: str, spec: WindowSpec, bounds: _Bounds) -> ColumnElement[bool]:
    where = _filters(model_name=model_name, spec=spec, since=bounds.since)
    where.append(PredictionLog.id <= bounds.high)
    where.append(PredictionLog.id >= bounds.low)
    return and_(*where)


def _feature_expr(engine: Engine, name: str) -> ColumnElement[Any]:
    """The raw value of one input feature, extracted in SQL (NULL when absent)."""
    if engine.dialect.name == "postgresql":
        return PredictionLog.inputs.op("->>")(literal(name)).label(None)
    quoted = name.replace('"', '""')
    return func.json_extract(PredictionLog.inputs, literal(f'$."{quoted}"')).label(None)


def _as_floats(values: tuple[Any, ...] | list[Any]) -> np.ndarray:
    """Floats from a column of raw scalars (None -> NaN; text that is no number -> NaN)."""
    try:
        return np.array(values, dtype=np.float64)  # None becomes NaN
    except (TypeError, ValueError):
        return as_float(np.array(values, dtype=object))


def _labelled_rows(
    engine: Engine,
    columns: Sequence[ColumnElement[Any] | Any],
    where: ColumnElement[bool],
    span: tuple[datetime | None, datetime | None],
) -> Any:
    """``columns`` of the window's rows and each one's label (NULL without one), in id order."""
    fb = PredictionFeedback
    labels_on = feedback_join(engine.dialect.name, since=span[0], until=span[1])
    return (
        select(*columns, fb.label)
        .select_from(PredictionLog)
        .outerjoin(fb, labels_on)
        .where(where)
        .order_by(PredictionLog.id)
    )


def _generic_chunks(
    *,
    engine: Engine,
    where: ColumnElement[bool],
    numeric: Sequence[str],
    categorical: Sequence[str],
    chunk_rows: int,
    span: tuple[datetime | None, datetime | None] = (None, None),
) -> Iterator[Chunk]:
    names = [*numeric, *categorical]
    stmt = _labelled_rows(
        engine, [*[_feature_expr(engine, n) for n in names], PredictionLog.probability], where, span
    )
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=chunk_rows).execute(stmt)
        for part in result.partitions():
            cols = list(zip(*part, strict=True))
            columns: dict[str, np.ndarray] = {}
            for i, name in enumerate(numeric):
                columns[name] = _as_floats(cols[i])
            for i, name in enumerate(categorical, start=len(numeric)):
                columns[name] = np.array([None if v is None else str(v) for v in cols[i]], dtype=object)
            yield Chunk(
                rows=len(part),
                columns=columns,
                predictions=_as_floats(cols[-2]),
                labels=_as_floats(cols[-1]),
            )


# ---------------------------------------------------------------- PostgreSQL: JSON blocks + pyarrow

_BLOCK_SQL = """
SELECT convert_to('{"p":' || coalesce(
            nullif(nullif(nullif(p.probability, 'NaN'), 'Infinity'), '-Infinity')::text, 'null')
        || ',"y":' || coalesce({label}::text, 'null')
        || ',"x":' || p.inputs::text || '}', 'UTF8')
FROM prediction_log p {join}
WHERE p.model_name = %(model_name)s AND p.status = %(status)s AND p.id BETWEEN %(lo)s AND %(hi)s {extra}
ORDER BY p.id
"""


# each row's label: joined (the window's time span on the labels prunes their partitions, see
# predictions.service.feedback_join), or left out when the caller reads the labels apart (a join per range
# scanned every label of the window for each range: 46 ranges of a 1M-row window with 100k labels, 4.5 s)
_LABELS_JOIN = (
    "LEFT JOIN prediction_feedback f ON f.prediction_id = p.prediction_id AND f.logged_at = p.logged_at"
)
_LABELS_SPAN = " AND f.logged_at BETWEEN %(start)s AND %(end)s"


def _block_sql(
    spec: WindowSpec, since: datetime | None, span: bool, template: str = _BLOCK_SQL, *, labels: bool = True
) -> str:
    extra = ""
    if spec.version is not None:
        extra += " AND p.model_version = %(version)s"
    if since is not None:
        extra += " AND p.logged_at >= %(since)s"
    join = (_LABELS_JOIN + (_LABELS_SPAN if span else "")) if labels else ""
    label = "f.label" if labels else "NULL::float8"
    return template.replace("{extra}", extra).replace("{join}", join).replace("{label}", label)


def _fetch_block(engine: Engine, sql: str, params: dict[str, Any]) -> bytes:
    """One id range of the window as newline-separated JSON lines (one short bytea per row, binary)."""
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(sql, params, binary=True)
            lines = [row[0] for row in cur.fetchall()]
        raw.commit()
    finally:
        raw.close()
    return b"\n".join(lines)


def _block_ranges(first: int, last: int, rows: int, chunk_rows: int) -> list[tuple[int, int]]:
    """Id ranges expected to hold about ``chunk_rows`` rows each (ids may be shared with other models)."""
    span = last - first + 1
    step = max(1, -(-chunk_rows * span // max(rows, 1)))
    return [(lo, min(lo + step - 1, last)) for lo in range(first, last + 1, step)]


def _block_chunk(block: bytes, *, numeric: Sequence[str], categorical: Sequence[str]) -> Chunk:
    """Parse one block with pyarrow's JSON reader; categoricals are counted in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pajson

    fields = [(name, pa.float64()) for name in numeric] + [(name, pa.string()) for name in categorical]
    schema = pa.schema([("p", pa.float64()), ("y", pa.float64()), ("x", pa.struct(fields))])
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pajson.read_json(pa.py_buffer(block), parse_options=options)
    x = table.column("x").combine_chunks()
    columns = {name: pc.struct_field(x, name).to_numpy(zero_copy_only=False) for name in numeric}
    counts: dict[str, Counter[str | None]] = {}
    for name in categorical:
        tally = pc.value_counts(pc.struct_field(x, name)).to_pylist()
        counts[name] = Counter({item["values"]: int(item["counts"]) for item in tally})
    return Chunk(
        rows=table.num_rows,
        columns=columns,
        predictions=table.column("p").to_numpy(zero_copy_only=False),
        labels=table.column("y").to_numpy(zero_copy_only=False),
        category_counts=counts,
    )


def _block_query(
    summary: WindowSummary, template: str = _BLOCK_SQL, *, labels: bool = True
) -> tuple[str, dict[str, Any]]:
    """The SQL of one id range of ``summary``'s window and its parameters (without ``lo`` and ``hi``);
    without ``labels`` every row's label is NULL and the labels are not joined."""
    spec = summary.spec
    span = summary.start is not None and summary.end is not None and labels
    sql = _block_sql(spec, summary.since, span, template, labels=labels)
    base: dict[str, Any] = {"model_name": summary.model_name, "status": PredictionStatus.OK.value}
    if span:
        base.update(start=summary.start, end=summary.end)
    if spec.version is not None:
        base["version"] = spec.version
    if summary.since is not None:
        base["since"] = summary.since
    return sql, base


def _block_range(
    block: bytes,
    *,
    engine: Engine,
    summary: WindowSummary,
    lo: int,
    hi: int,
    numeric: Sequence[str],
    categorical: Sequence[str],
    chunk_rows: int,
) -> Iterator[Chunk]:
    """The chunk of one fetched block; a range the JSON schema rejects is re-read by the generic reader."""
    import pyarrow as pa

    if not block:
        return
    try:
        chunk = _block_chunk(block, numeric=numeric, categorical=categorical)
    except pa.ArrowInvalid:
        # a row bypassed the contract (e.g. text in a numeric feature): read this range row by row
        bad = _Bounds(low=lo, high=hi, since=summary.since)
        where = _window_where(model_name=summary.model_name, spec=summary.spec, bounds=bad)
        yield from _generic_chunks(
            engine=engine,
            where=where,
            numeric=numeric,
            categorical=categorical,
            chunk_rows=chunk_rows,
            span=(summary.start, summary.end),
        )
        return
    yield chunk


def _prefetched(
    fetch: Callable[[Engine, str, dict[str, Any]], T],
    engine: Engine,
    sql: str,
    base: dict[str, Any],
    ranges: Sequence[tuple[int, int]],
    prefetch: int,
) -> Iterator[tuple[tuple[int, int], T]]:
    """``fetch`` of each id range, in order, with ``prefetch`` threads fetching the next ranges meanwhile."""
    with ThreadPoolExecutor(max_workers=prefetch, thread_name_prefix="dw-window") as pool:
        pending: deque[tuple[tuple[int, int], Future[T]]] = deque()
        todo = iter(ranges)
        for lo, hi in itertools.islice(todo, prefetch):
            pending.append(((lo, hi), pool.submit(fetch, engine, sql, {**base, "lo": lo, "hi": hi})))
        while pending:
            (lo, hi), future = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(fetch, engine, sql, {**base, "lo": nxt[0], "hi": nxt[1]})))
            yield (lo, hi), future.result()


def _block_chunks(
    *,
    engine: Engine,
    summary: WindowSummary,
    numeric: Sequence[str],
    categorical: Sequence[str],
    chunk_rows: int,
    prefetch: int = 2,
    labels: bool = True,
) -> Iterator[Chunk]:
    """Blocks fetched by ``prefetch`` threads ahead of the parser, processed in id order."""
    sql, base = _block_query(summary, labels=labels)
    ranges = _block_ranges(summary.first_id, summary.last_id, summary.rows, chunk_rows)
    for (lo, hi), block in _prefetched(_fetch_block, engine, sql, base, ranges, prefetch):
        yield from _block_range(
            block,
            engine=engine,
            summary=summary,
            lo=lo,
            hi=hi,
            numeric=numeric,
            categorical=categorical,
            chunk_rows=chunk_rows,
        )


# ---------------------------------------------------------------- PostgreSQL: typed columns

# one row per id range: its counts, its layouts and every typed value of the range concatenated in id order
# (one binary value per column instead of one protocol row per log row); probability, label and id big-endian.
# The rows come sorted from the subquery (one sort, not one per aggregate: measured 1.5x quicker); the ids
# come along, so the reader checks the order instead of relying on it. Without labels the label column is
# left out (NULL: every row's label NaN), not sent as one NaN per row (~7 % of a range's server time).
_TYPED_SQL = """
SELECT count(*), count(n), min(layout), max(layout),
    string_agg(n, ''::bytea), {categories}, string_agg(pp, ''::bytea), {labels},
    string_agg(int8send(i), ''::bytea)
FROM (
    SELECT p.id AS i, p.layout, p.numbers AS n, p.categories AS c,
        float8send(coalesce(p.probability, 'NaN'::float8)) AS pp{label_column}
    FROM prediction_log p {join}
    WHERE p.model_name = %(model_name)s AND p.status = %(status)s AND p.id BETWEEN %(lo)s AND %(hi)s {extra}
    ORDER BY p.id
) AS rows
"""
_CATEGORIES = "convert_to(string_agg(c, E'\\n'), 'UTF8')"
_LABELS = "string_agg(y, ''::bytea)"
_LABEL_COLUMN = ",\n        float8send(coalesce({label}, 'NaN'::float8)) AS y"


@dataclass(frozen=True)
class _TypedRange:
    """One id range as the typed query returns it."""

    rows: int
    typed: int  # rows with the typed copy
    layout: int | None  # the one layout of every typed row; None when there are several or none
    numbers: bytes
    categories: bytes
    predictions: bytes
    labels: bytes
    ordered: bool  # the ids came in increasing order


def _fetch_typed(engine: Engine, sql: str, params: dict[str, Any]) -> _TypedRange:
    """One id range of the window, typed columns concatenated (binary protocol)."""
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(sql, params, binary=True)
            n, numbers, low, high, nums, text, probs, labels, ids = cur.fetchone()
        raw.commit()
    finally:
        raw.close()
    return _TypedRange(
        rows=int(n),
        typed=int(numbers),
        layout=int(low) if low is not None and low == high else None,
        numbers=bytes(nums or b""),
        categories=bytes(text or b""),
        predictions=bytes(probs or b""),
        labels=bytes(labels or b""),
        ordered=bool(np.all(np.diff(np.frombuffer(ids or b"", dtype=">i8")) > 0)),
    )


def _layouts(engine: Engine) -> dict[int, typed.Layout]:
    """Every layout recorded in the database, by id."""
    log = PredictionLogLayout
    with engine.connect() as conn:
        found = conn.execute(select(log.id, log.numeric, log.categorical, log.categories)).all()
    return {int(i): typed.layout_from_json(int(i), num, cat, known) for i, num, cat, known in found}


def _typed_chunk(
    got: _TypedRange, layout: typed.Layout, *, numeric: Sequence[str], categorical: Sequence[str]
) -> Chunk:
    """A chunk from one typed range: numbers straight from the bytes, category codes counted by numpy."""
    matrix = typed.numbers_matrix(got.numbers, got.rows, layout.width)
    at = {name: i for i, name in enumerate(layout.numeric)}
    columns = {name: np.ascontiguousarray(matrix[:, at[name]]) for name in numeric}
    counts = typed.count_categories(layout, matrix, got.categories, categorical)
    return Chunk(
        rows=got.rows,
        columns=columns,
        predictions=np.frombuffer(got.predictions, dtype=">f8").astype(np.float64),
        labels=(
            np.frombuffer(got.labels, dtype=">f8").astype(np.float64)
            if got.labels
            else np.full(got.rows, np.nan)
        ),
        category_counts=counts,
    )


def _typed_chunks(
    *,
    engine: Engine,
    summary: WindowSummary,
    numeric: Sequence[str],
    categorical: Sequence[str],
    chunk_rows: int,
    prefetch: int = 2,
    labels: bool = True,
) -> Iterator[Chunk]:
    """Typed ranges fetched by ``prefetch`` threads ahead, in id order; a range whose rows are not all typed
    in one layout holding every asked feature is read by the blocks reader (so a window may mix both)."""
    template = _TYPED_SQL.replace("{categories}", _CATEGORIES if categorical else "NULL::bytea")
    template = template.replace("{labels}", _LABELS if labels else "NULL::bytea")
    template = template.replace("{label_column}", _LABEL_COLUMN if labels else "")
    sql, base = _block_query(summary, template, labels=labels)
    block_sql, block_base = _block_query(summary, labels=labels)
    layouts = _layouts(engine)
    ranges = _block_ranges(summary.first_id, summary.last_id, summary.rows, chunk_rows)
    for (lo, hi), got in _prefetched(_fetch_typed, engine, sql, base, ranges, prefetch):
        if not got.rows:
            continue
        layout = layouts.get(got.layout) if got.layout is not None else None
        if (
            layout is not None
            and got.typed == got.rows
            and got.ordered
            and set(numeric) <= set(layout.numeric)
            and set(categorical) <= set(layout.categorical)
        ):
            yield _typed_chunk(got, layout, numeric=numeric, categorical=categorical)
            continue
        del got  # legacy rows, several layouts, or a feature the layout lacks: the JSON documents
        block = _fetch_block(engine, block_sql, {**block_base, "lo": lo, "hi": hi})
        yield from _block_range(
            block,
            engine=engine,
            summary=summary,
            lo=lo,
            hi=hi,
            numeric=numeric,
            categorical=categorical,
            chunk_rows=chunk_rows,
        )


def read_chunks(
    *,
    engine: Engine,
    summary: WindowSummary,
    numeric: Sequence[str],
    categorical: Sequence[str],
    chunk_rows: int = CHUNK_ROWS,
    reader: Reader | str = Reader.AUTO,
    labels: bool = True,
) -> Iterator[Chunk]:
    """The rows of a summarized window in id order, chunk by chunk: named features, predictions, labels.

    Without ``labels`` the PostgreSQL readers do not join the labels (a chunk's labels are then NaN, or
    sometimes present: read them apart with :func:`predictions.aggregates.labelled_arrays` and ignore
    the chunks')."""
    reader = choose_reader(engine=engine, reader=reader)
    if reader is Reader.AGGREGATE:
        raise ValueError("the aggregate reader returns counts, not rows: use predictions.aggregates")
    if reader in (Reader.TYPED, Reader.BLOCKS):
        rows = _typed_chunks if reader is Reader.TYPED else _block_chunks
        return rows(
            engine=engine,
            summary=summary,
            numeric=numeric,
            categorical=categorical,
            chunk_rows=chunk_rows,
            labels=labels,
        )
    bounds = _Bounds(low=summary.first_id, high=summary.last_id, since=summary.since)
    where = _window_where(model_name=summary.model_name, spec=summary.spec, bounds=bounds)
    return _generic_chunks(
        engine=engine,
        where=where,
        numeric=numeric,
        categorical=categorical,
        chunk_rows=chunk_rows,
        span=(summary.start, summary.end),
    )


def read_vectors(
    *, engine: Engine, summary: WindowSummary, width: int, chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A summarized window's whole answers (``outputs``: a multi-class model's ``[rows, width]`` vectors) and
    labels (NaN without one), in id order, chunk by chunk; a row without a vector of that width is NaN.

    One generic query on both backends (the vectors are JSON): read where the model is multi-class."""
    bounds = _Bounds(low=summary.first_id, high=summary.last_id, since=summary.since)
    where = _window_where(model_name=summary.model_name, spec=summary.spec, bounds=bounds)
    stmt = _labelled_rows(engine, [PredictionLog.outputs], where, (summary.start, summary.end))
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=chunk_rows).execute(stmt)
        for part in result.partitions():
            vectors = np.full((len(part), width), np.nan)
            for i, (row, _) in enumerate(part):
                if isinstance(row, list) and len(row) == width:
                    vectors[i] = [np.nan if v is None else v for v in row]
            yield vectors, _as_floats([label for _, label in part])
