"""Windows of the prediction log, read from the database in chunks and counted into a :class:`WindowSketch`.

A window is the last ``rows`` answered predictions and/or those of the last ``minutes`` of one model
(optionally of one version), in insertion (``id``) order. It is read in two steps:

1. **Summary** (one aggregate query): row count, first/last ``logged_at`` and the id range of the
   window (for a last-N window an index scan of the newest N ids on ``(model_name, id)``); rows
   written while the window is read get higher ids and are left out.
2. **Rows**, chunk by chunk: the input features, the ``probability`` column, and the label from a
   left join of ``prediction_feedback``. Each chunk becomes numpy columns, is counted on the
   profile's grids and dropped: memory is bounded by ``chunk_rows`` plus the profile, never by the
   window.

Two readers produce identical sketches:

- ``generic`` (SQLite and PostgreSQL): SQLAlchemy Core with a streaming cursor (``yield_per``;
  a server-side cursor on PostgreSQL); each feature is extracted in SQL (``json_extract`` on
  SQLite, ``->>`` on PostgreSQL) so rows arrive as flat scalars.
- ``blocks`` (PostgreSQL, the default there): the window is cut into id ranges of about ``chunk_rows``
  rows; each range is one query returning each row as one short binary value, its JSON document
  with probability and label (``{"p": ..., "y": ..., "x": inputs}``, no per-feature work in SQL).
  The values are joined by newlines and parsed by pyarrow's JSON reader in C++; categorical columns
  are counted in Arrow (``value_counts``), never as one Python string per row. Two threads fetch
  the next ranges while the current one is counted. This beats ``COPY (SELECT inputs->>'f', ...) TO
  STDOUT``: extracting and formatting every feature costs the server more than printing the
  document once, and reading COPY's one-message-per-row stream from Python costs seconds by itself.
  A range holding a value the JSON schema rejects (a row that bypassed the input contract) is
  re-read with the generic reader, so both agree exactly.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine, and_, func, literal, select
from sqlalchemy.sql.elements import ColumnElement

from monitors.binning import as_float
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.window import WindowSketch
from predictions.models import PredictionFeedback, PredictionLog, PredictionStatus

CHUNK_ROWS = 25_000


class Reader(enum.StrEnum):
    AUTO = "auto"  # blocks on PostgreSQL, generic elsewhere
    GENERIC = "generic"
    BLOCKS = "blocks"


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


@dataclass
class Window:
    """A window's sketch and where it lies in the log."""

    model_name: str
    spec: WindowSpec
    rows: int
    start: datetime | None
    end: datetime | None
    first_id: int | None
    last_id: int | None
    labelled: int
    sketch: WindowSketch
    reader: str
    chunks: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "rows": self.rows,
            "labelled": self.labelled,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "first_id": self.first_id,
            "last_id": self.last_id,
            "spec": {"rows": self.spec.rows, "minutes": self.spec.minutes, "version": self.spec.version},
            "reader": self.reader,
        }


@dataclass
class Chunk:
    """One chunk of a window as numpy columns (categoricals may come as counts instead)."""

    rows: int
    columns: dict[str, np.ndarray]
    predictions: np.ndarray
    labels: np.ndarray
    category_counts: dict[str, Counter[str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Bounds:
    low: int | None  # inclusive; None = no lower id bound
    high: int
    since: datetime | None


def _filters(*, model_name: str, spec: WindowSpec, since: datetime | None) -> list[ColumnElement[bool]]:
    log = PredictionLog
    out: list[ColumnElement[bool]] = [log.model_name == model_name, log.status == PredictionStatus.OK.value]
    if spec.version is not None:
        out.append(log.model_version == spec.version)
    if since is not None:
        out.append(log.logged_at >= since)
    return out


@dataclass(frozen=True)
class _Summary:
    rows: int
    start: datetime | None
    end: datetime | None
    bounds: _Bounds


def _summary(*, engine: Engine, model_name: str, spec: WindowSpec, now: datetime) -> _Summary | None:
    """One query: the window's row count, time span and id range (an index scan of the window's ids)."""
    since = now - timedelta(minutes=spec.minutes) if spec.minutes is not None else None
    where = _filters(model_name=model_name, spec=spec, since=since)
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
    return _Summary(int(n), _as_utc(start), _as_utc(end), _Bounds(low=int(low), high=int(high), since=since))


def _window_where(*, model_name: str, spec: WindowSpec, bounds: _Bounds) -> ColumnElement[bool]:
    where = _filters(model_name=model_name, spec=spec, since=bounds.since)
    where.append(PredictionLog.id <= bounds.high)
    if bounds.low is not None:
        where.append(PredictionLog.id >= bounds.low)
    return and_(*where)


def _as_utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):  # SQLite aggregates return the stored text
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _feature_expr(engine: Engine, name: str) -> ColumnElement[Any]:
    """The raw value of one input feature, extracted in SQL (NULL when absent)."""
    if engine.dialect.name == "postgresql":
        return PredictionLog.inputs.op("->>")(literal(name)).label(None)
    quoted = name.replace('"', '""')
    return func.json_extract(PredictionLog.inputs, literal(f'$."{quoted}"')).label(None)


def _numeric(values: tuple[Any, ...] | list[Any]) -> np.ndarray:
    """Floats from a column of raw scalars (None -> NaN; text that is no number -> NaN)."""
    try:
        return np.array(values, dtype=np.float64)  # None becomes NaN
    except (TypeError, ValueError):
        return as_float(np.array(values, dtype=object))


def _generic_chunks(
    *, engine: Engine, profile: Profile, where: ColumnElement[bool], chunk_rows: int
) -> Iterator[Chunk]:
    names = list(profile.features)
    fb = PredictionFeedback
    stmt = (
        select(*[_feature_expr(engine, n) for n in names], PredictionLog.probability, fb.label)
        .select_from(PredictionLog)
        .outerjoin(fb, fb.prediction_id == PredictionLog.prediction_id)
        .where(where)
        .order_by(PredictionLog.id)
    )
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=chunk_rows).execute(stmt)
        for part in result.partitions():
            cols = list(zip(*part, strict=True))
            columns: dict[str, np.ndarray] = {}
            for i, name in enumerate(names):
                fp = profile.features[name]
                if isinstance(fp, NumericProfile):
                    columns[name] = _numeric(cols[i])
                else:
                    columns[name] = np.array([None if v is None else str(v) for v in cols[i]], dtype=object)
            yield Chunk(
                rows=len(part),
                columns=columns,
                predictions=_numeric(cols[-2]),
                labels=_numeric(cols[-1]),
            )


# ---------------------------------------------------------------- PostgreSQL: JSON blocks + pyarrow

_BLOCK_SQL = """
SELECT convert_to('{"p":' || coalesce(
            nullif(nullif(nullif(p.probability, 'NaN'), 'Infinity'), '-Infinity')::text, 'null')
        || ',"y":' || coalesce(f.label::text, 'null')
        || ',"x":' || p.inputs::text || '}', 'UTF8')
FROM prediction_log p LEFT JOIN prediction_feedback f ON f.prediction_id = p.prediction_id
WHERE p.model_name = %(model_name)s AND p.status = %(status)s AND p.id BETWEEN %(lo)s AND %(hi)s {extra}
ORDER BY p.id
"""


def _block_sql(spec: WindowSpec, since: datetime | None) -> str:
    extra = ""
    if spec.version is not None:
        extra += " AND p.model_version = %(version)s"
    if since is not None:
        extra += " AND p.logged_at >= %(since)s"
    return _BLOCK_SQL.replace("{extra}", extra)


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


def _block_chunk(block: bytes, profile: Profile) -> Chunk:
    """Parse one block with pyarrow's JSON reader; categoricals are counted in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pajson

    fields = [
        (name, pa.float64() if isinstance(fp, NumericProfile) else pa.string())
        for name, fp in profile.features.items()
    ]
    schema = pa.schema([("p", pa.float64()), ("y", pa.float64()), ("x", pa.struct(fields))])
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pajson.read_json(pa.py_buffer(block), parse_options=options)
    x = table.column("x").combine_chunks()
    columns: dict[str, np.ndarray] = {}
    counts: dict[str, Counter[str | None]] = {}
    for name, fp in profile.features.items():
        col = pc.struct_field(x, name)
        if isinstance(fp, NumericProfile):
            columns[name] = col.to_numpy(zero_copy_only=False)
        else:
            counts[name] = Counter(
                {item["values"]: int(item["counts"]) for item in pc.value_counts(col).to_pylist()}
            )
    return Chunk(
        rows=table.num_rows,
        columns=columns,
        predictions=table.column("p").to_numpy(zero_copy_only=False),
        labels=table.column("y").to_numpy(zero_copy_only=False),
        category_counts=counts,
    )


def _block_chunks(
    *,
    engine: Engine,
    profile: Profile,
    model_name: str,
    spec: WindowSpec,
    bounds: _Bounds,
    rows: int,
    chunk_rows: int,
    prefetch: int = 2,
) -> Iterator[Chunk]:
    """Blocks fetched by ``prefetch`` threads ahead of the parser, processed in id order."""
    import pyarrow as pa

    sql = _block_sql(spec, bounds.since)
    base: dict[str, Any] = {"model_name": model_name, "status": PredictionStatus.OK.value}
    if spec.version is not None:
        base["version"] = spec.version
    if bounds.since is not None:
        base["since"] = bounds.since
    ranges = _block_ranges(bounds.low or 1, bounds.high, rows, chunk_rows)
    with ThreadPoolExecutor(max_workers=prefetch, thread_name_prefix="dw-window") as pool:
        pending: deque[tuple[tuple[int, int], Future[bytes]]] = deque()
        todo = iter(ranges)
        for lo, hi in itertools.islice(todo, prefetch):
            pending.append(((lo, hi), pool.submit(_fetch_block, engine, sql, {**base, "lo": lo, "hi": hi})))
        while pending:
            (lo, hi), future = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append(
                    (nxt, pool.submit(_fetch_block, engine, sql, {**base, "lo": nxt[0], "hi": nxt[1]}))
                )
            block = future.result()
            if not block:
                continue
            try:
                chunk = _block_chunk(block, profile)
                del block
                yield chunk
            except pa.ArrowInvalid:
                # a row bypassed the contract (e.g. text in a numeric feature): read this range row by row
                bad = _Bounds(low=lo, high=hi, since=bounds.since)
                where = _window_where(model_name=model_name, spec=spec, bounds=bad)
                yield from _generic_chunks(engine=engine, profile=profile, where=where, chunk_rows=chunk_rows)


# ---------------------------------------------------------------- the window


def read_window(
    *,
    engine: Engine,
    profile: Profile,
    model_name: str,
    spec: WindowSpec,
    threshold: float = 0.5,
    chunk_rows: int = CHUNK_ROWS,
    reader: Reader | str = Reader.AUTO,
    now: datetime | None = None,
) -> Window:
    """Read one model's window from the prediction log in chunks and sketch it on ``profile``'s grids."""
    reader = Reader(reader)
    if reader is Reader.AUTO:
        reader = Reader.BLOCKS if engine.dialect.name == "postgresql" else Reader.GENERIC
    if reader is Reader.BLOCKS and engine.dialect.name != "postgresql":
        raise ValueError("the blocks reader needs PostgreSQL")
    now = (now or datetime.now(UTC)).astimezone(UTC)  # SQLite stores naive UTC text
    sketch = WindowSketch(threshold=threshold)
    empty = Window(model_name, spec, 0, None, None, None, None, 0, sketch, reader.value)
    summary = _summary(engine=engine, model_name=model_name, spec=spec, now=now)
    if summary is None:
        return empty
    bounds = summary.bounds
    where = _window_where(model_name=model_name, spec=spec, bounds=bounds)
    if reader is Reader.BLOCKS:
        chunks = _block_chunks(
            engine=engine,
            profile=profile,
            model_name=model_name,
            spec=spec,
            bounds=bounds,
            rows=summary.rows,
            chunk_rows=chunk_rows,
        )
    else:
        chunks = _generic_chunks(engine=engine, profile=profile, where=where, chunk_rows=chunk_rows)
    count = 0
    for chunk in chunks:
        add_chunk(sketch=sketch, profile=profile, chunk=chunk)
        count += 1
    return Window(
        model_name=model_name,
        spec=spec,
        rows=sketch.rows,
        start=summary.start,
        end=summary.end,
        first_id=bounds.low,
        last_id=bounds.high,
        labelled=sketch.labels.rows,
        sketch=sketch,
        reader=reader.value,
        chunks=count,
    )


def add_chunk(*, sketch: WindowSketch, profile: Profile, chunk: Chunk) -> WindowSketch:
    """Count one chunk into ``sketch`` (labels only where present)."""
    labels = chunk.labels if np.any(~np.isnan(chunk.labels)) else None
    columns: Mapping[str, np.ndarray] = chunk.columns
    before = sketch.rows
    sketch.update(profile, columns, predictions=chunk.predictions, labels=labels)
    sketch.rows = before + chunk.rows  # counted here: the columns may hold only the numeric features
    for name, counts in chunk.category_counts.items():
        if isinstance(profile.features.get(name), CategoricalProfile):
            sketch.categorical.setdefault(name, Counter()).update(counts)
    return sketch
