"""Windows of the prediction log, read from the database in chunks and counted into a :class:`WindowSketch`.

A window is the last ``rows`` answered predictions and/or those of the last ``minutes`` of one model
(optionally of one version), in insertion (``id``) order. It is read in three steps:

1. **Bounds** (one small query): the highest ``id`` now (so rows written while we read are left out)
   and, for a last-N window, the ``id`` of the N-th newest row (an index scan on ``(model_name, id)``).
2. **Summary** (one aggregate query): row count and first/last ``logged_at`` inside the bounds.
3. **Rows**, chunk by chunk: each feature extracted from the JSON document *in SQL* (so rows arrive as
   flat scalars), the ``probability`` column, and the label from a left join of ``prediction_feedback``.
   Each chunk becomes numpy columns, is counted on the profile's grids and dropped: memory is bounded
   by ``chunk_rows`` plus the profile, never by the window.

Two readers produce identical sketches:

- ``generic`` (SQLite and PostgreSQL): SQLAlchemy Core with a streaming cursor (``yield_per``;
  a server-side cursor on PostgreSQL). ``json_extract`` on SQLite, ``->>`` on PostgreSQL.
- ``copy`` (PostgreSQL, the default there): ``COPY (SELECT ...) TO STDOUT`` in text format, split at
  line ends into blocks and parsed by pyarrow's multi-threaded CSV reader; categorical columns are
  counted in Arrow (``value_counts``) without making a Python string per row.
"""

from __future__ import annotations

import enum
import io
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine, and_, case, func, literal, select
from sqlalchemy.sql.elements import ColumnElement

from monitors.binning import as_float
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.window import WindowSketch
from service.predictions.models import PredictionFeedback, PredictionLog, PredictionStatus

CHUNK_ROWS = 50_000
COPY_BLOCK_BYTES = 8 << 20


class Reader(enum.StrEnum):
    AUTO = "auto"  # copy on PostgreSQL, generic elsewhere
    GENERIC = "generic"
    COPY = "copy"


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


def _bounds(*, engine: Engine, model_name: str, spec: WindowSpec, now: datetime) -> _Bounds | None:
    since = now - timedelta(minutes=spec.minutes) if spec.minutes is not None else None
    where = _filters(model_name=model_name, spec=spec, since=since)
    with engine.connect() as conn:
        high = conn.scalar(select(func.max(PredictionLog.id)).where(*where))
        if high is None:
            return None
        low = None
        if spec.rows is not None:
            low = conn.scalar(
                select(PredictionLog.id)
                .where(*where, PredictionLog.id <= high)
                .order_by(PredictionLog.id.desc())
                .offset(spec.rows - 1)
                .limit(1)
            )
    return _Bounds(low=low, high=int(high), since=since)


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


# ---------------------------------------------------------------- PostgreSQL: COPY + pyarrow


class _LineBlocks:
    """Re-cut a COPY byte stream into blocks of whole lines (text format: one row per line)."""

    def __init__(self, source: Iterator[bytes | memoryview], block_bytes: int) -> None:
        self.source = source
        self.block_bytes = block_bytes

    def __iter__(self) -> Iterator[bytes]:
        buf = io.BytesIO()
        for data in self.source:
            buf.write(data)
            if buf.tell() >= self.block_bytes:
                raw = buf.getvalue()
                cut = raw.rfind(b"\n") + 1
                if cut:
                    yield raw[:cut]
                    buf = io.BytesIO()
                    buf.write(raw[cut:])
        rest = buf.getvalue()
        if rest:
            yield rest if rest.endswith(b"\n") else rest + b"\n"


def _unescape_copy_text(value: str) -> str:
    """Undo COPY text-format escapes (only category names containing a backslash need this)."""
    if "\\" not in value:
        return value
    return value.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode()


def _copy_sql(
    *, engine: Engine, profile: Profile, where: ColumnElement[bool]
) -> tuple[str, Mapping[str, Any]]:
    names = list(profile.features)
    fb = PredictionFeedback
    exprs: list[ColumnElement[Any]] = []
    for n in names:
        raw = PredictionLog.inputs.op("->")(literal(n))
        if isinstance(profile.features[n], NumericProfile):
            # a number stays a number; anything else (a stray string, true/false) is missing, never an error
            text = PredictionLog.inputs.op("->>")(literal(n))
            exprs.append(case((func.jsonb_typeof(raw) == literal("number"), text)).label(None))
        else:
            exprs.append(PredictionLog.inputs.op("->>")(literal(n)).label(None))
    stmt = (
        select(*exprs, PredictionLog.probability, fb.label)
        .select_from(PredictionLog)
        .outerjoin(fb, fb.prediction_id == PredictionLog.prediction_id)
        .where(where)
        .order_by(PredictionLog.id)
    )
    compiled = stmt.compile(dialect=engine.dialect)
    return f"COPY ({compiled}) TO STDOUT", compiled.params  # psycopg binds COPY parameters client-side


def _copy_chunks(
    *, engine: Engine, profile: Profile, where: ColumnElement[bool], block_bytes: int
) -> Iterator[Chunk]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    names = list(profile.features)
    keys = [f"c{i}" for i in range(len(names))] + ["probability", "label"]
    types: dict[str, Any] = {"probability": pa.float64(), "label": pa.float64()}
    for key, name in zip(keys, names, strict=False):
        types[key] = pa.float64() if isinstance(profile.features[name], NumericProfile) else pa.string()
    read = pacsv.ReadOptions(column_names=keys, block_size=max(block_bytes, 1 << 20))
    parse = pacsv.ParseOptions(delimiter="\t", quote_char=False, escape_char=False, double_quote=False)
    convert = pacsv.ConvertOptions(
        column_types=types, null_values=["\\N"], strings_can_be_null=True, quoted_strings_can_be_null=False
    )
    sql, params = _copy_sql(engine=engine, profile=profile, where=where)
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur, cur.copy(sql, params) as copy:
            for block in _LineBlocks(iter(copy), block_bytes):
                table = pacsv.read_csv(
                    pa.py_buffer(block), read_options=read, parse_options=parse, convert_options=convert
                )
                columns: dict[str, np.ndarray] = {}
                counts: dict[str, Counter[str | None]] = {}
                for key, name in zip(keys, names, strict=False):
                    col = table.column(key)
                    if isinstance(profile.features[name], NumericProfile):
                        columns[name] = col.to_numpy(zero_copy_only=False)
                        continue
                    counter: Counter[str | None] = Counter()
                    for item in pc.value_counts(col).to_pylist():
                        value = item["values"]
                        counter[None if value is None else _unescape_copy_text(value)] += int(item["counts"])
                    counts[name] = counter
                yield Chunk(
                    rows=table.num_rows,
                    columns=columns,
                    predictions=table.column("probability").to_numpy(zero_copy_only=False),
                    labels=table.column("label").to_numpy(zero_copy_only=False),
                    category_counts=counts,
                )
        raw.commit()
    finally:
        raw.close()


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
        reader = Reader.COPY if engine.dialect.name == "postgresql" else Reader.GENERIC
    if reader is Reader.COPY and engine.dialect.name != "postgresql":
        raise ValueError("the copy reader needs PostgreSQL")
    now = now or datetime.now(UTC)
    sketch = WindowSketch(threshold=threshold)
    empty = Window(model_name, spec, 0, None, None, None, None, 0, sketch, reader.value)
    bounds = _bounds(engine=engine, model_name=model_name, spec=spec, now=now)
    if bounds is None:
        return empty
    where = _window_where(model_name=model_name, spec=spec, bounds=bounds)
    with engine.connect() as conn:
        n, start, end, first, labelled = conn.execute(
            select(
                func.count(),
                func.min(PredictionLog.logged_at),
                func.max(PredictionLog.logged_at),
                func.min(PredictionLog.id),
                func.count(PredictionFeedback.label),
            )
            .select_from(PredictionLog)
            .outerjoin(PredictionFeedback, PredictionFeedback.prediction_id == PredictionLog.prediction_id)
            .where(where)
        ).one()
    if not n:
        return empty
    if reader is Reader.COPY:
        chunks = _copy_chunks(
            engine=engine, profile=profile, where=where, block_bytes=max(COPY_BLOCK_BYTES, chunk_rows * 64)
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
        start=_as_utc(start),
        end=_as_utc(end),
        first_id=int(first),
        last_id=bounds.high,
        labelled=int(labelled),
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
