"""Windows of the prediction log, read from the database in chunks of numpy columns (for the monitors).

A window is the last ``rows`` answered predictions and/or those of the last ``minutes`` of one model
(optionally of one version), in log order (batch ``id``, then position). The log holds one row per request
(``prediction_batches``, :mod:`predictions.models`), so a window is a range of batch ids, of which the oldest
batch may be cut: the last N predictions end inside a request (``WindowSummary.skip``: its oldest predictions
left out). A time window cuts at the batch's ``logged_at``, which is each of its predictions' time. It is read
in two steps:

1. **Summary** (:func:`summarize_window`): prediction count, first/last ``logged_at`` and the batch id range
   (for a last-N window an index scan of the newest batches on ``(model_name, id)``, which carries their
   sizes, with a running sum); batches written while the window is read get higher ids and are left out.
2. **Chunks** (:func:`read_chunks`): the batch ids are cut into ranges of about ``chunk_rows`` predictions.
   On PostgreSQL each range is one query returning one row: the range's typed inputs (``numbers``),
   outputs and sizes concatenated in id order (``string_agg``), read with ``np.frombuffer``; categories are
   counted from their codes with ``np.bincount`` (:mod:`predictions.typed`). A range whose batches are not all
   typed in one layout holding every asked feature (a request that bypassed the contract, a window across
   versions with other features) is read batch by batch and decoded in Python, so a window may mix both and
   the values stay the same. SQLite reads batch by batch. Two threads fetch the next ranges while the current
   one is counted (PostgreSQL). Each chunk also counts its predictions by their batch's ``source`` (``serve``,
   ``ingest``, ``cloudevents``, ``import``) from the batches' sizes (``Chunk.sources``), with no other read.

A sample of a window's raw rows (:func:`read_sample`: the rows at chosen places, each numeric and
categorical value, the answers, the labels) maps the places to batches by the running sum of the window's
batch sizes and reads, on PostgreSQL, only those rows' slices of the batches' binary columns.

The labels (:func:`labelled_arrays`) are read from ``prediction_feedback`` alone: each label carries its
prediction's batch id, position, output, version and status, so a window's labels are a range of the
feedback's ``(model_name, log_id)`` index. Chunks can carry them too (``labels=True``: scattered by batch id
and position).

Values: a numeric feature is a float (JSON ``null``, an absent key or a value of another type is NaN); a
categorical feature is counted by its text (``None`` when absent); a prediction or label without a value is
NaN.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import numpy as np
import orjson
from sqlalchemy import Engine, func, literal, literal_column, select
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import Subquery

from core.config import Settings
from core.database import aware
from predictions import typed
from predictions.batch import as_bytes
from predictions.models import PredictionBatch, PredictionFeedback, PredictionStatus
from predictions.service import load_layouts

T = TypeVar("T")

CHUNK_ROWS: int = Settings.model_fields["monitor_chunk_rows"].default
"""Predictions per chunk unless told otherwise: the default of the ``monitor_chunk_rows`` setting. The
monitors sketch in-memory columns in chunks of the same size."""

READER = "columnar"
"""The reader's name, as a window reports it."""


@dataclass(frozen=True)
class WindowSpec:
    """Which predictions form a window: the last ``rows`` and/or the last ``minutes`` (both: the
    intersection)."""

    rows: int | None = None
    minutes: float | None = None
    version: int | None = None  # only predictions of this model version (None: every version)
    until: datetime | None = None  # only predictions logged before this time (a past window: backfill)

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
        if self.until is not None:
            what += f" before {self.until.isoformat()}"
        return what + ("" if self.version is None else f" of version {self.version}")


@dataclass(frozen=True)
class WindowSummary:
    """Where a non-empty window lies in the log: its prediction count, time span and batch id range
    (``skip``: the oldest predictions of the first batch that are not in the window)."""

    model_name: str
    spec: WindowSpec
    rows: int
    start: datetime | None
    end: datetime | None
    first_id: int
    last_id: int
    since: datetime | None  # the time bound (now - minutes); None without one
    skip: int = 0


@dataclass
class Chunk:
    """One chunk of a window as numpy columns: every numeric feature (floats), the categorical features
    counted (``category_counts``), the predictions, the labels (NaN: none) and the predictions counted by
    their batch's ``source`` (``serve``, ``ingest``, ``import``, ...; only sources the chunk holds)."""

    rows: int
    columns: dict[str, np.ndarray]
    predictions: np.ndarray
    labels: np.ndarray
    category_counts: dict[str, Counter[str | None]] = field(default_factory=dict)
    sources: Counter[str] = field(default_factory=Counter)


def _filters(
    *, model_name: str, spec: WindowSpec, since: datetime | None, upto: int | None = None
) -> list[ColumnElement[bool]]:
    log = PredictionBatch
    out: list[ColumnElement[bool]] = [log.model_name == model_name, log.status == PredictionStatus.OK.value]
    if spec.version is not None:
        out.append(log.model_version == spec.version)
    if since is not None:
        out.append(log.logged_at >= since)
    if spec.until is not None:
        out.append(log.logged_at < spec.until)
    if upto is not None:
        out.append(log.id <= upto)
    return out


def _since(spec: WindowSpec, now: datetime | None) -> datetime | None:
    """The window's time bound (None without one)."""
    if spec.minutes is None:
        return None
    return (now or datetime.now(UTC)).astimezone(UTC) - timedelta(minutes=spec.minutes)


def newest_id(
    *, engine: Engine, model_name: str, spec: WindowSpec, now: datetime | None = None
) -> int | None:
    """The id of the window's newest batch (None: the window is empty); one backward index probe.

    A run that reads blocks before its summary is known bounds the summary by it (``upto``), so both see
    the same newest batch while new ones keep arriving."""
    since = _since(spec, now)
    stmt = select(func.max(PredictionBatch.id)).where(
        *_filters(model_name=model_name, spec=spec, since=since)
    )
    with engine.connect() as conn:
        found = conn.execute(stmt).scalar()
    return None if found is None else int(found)


_PROBE = 256  # the newest batches whose mean size sizes a last-N window's first scan


def mean_size(*, engine: Engine, model_name: str, spec: WindowSpec, now: datetime | None = None) -> float:
    """The mean predictions per batch of the window's newest :data:`_PROBE` batches (1.0 when empty)."""
    where = _filters(model_name=model_name, spec=spec, since=_since(spec, now))
    log = PredictionBatch
    newest = select(log.size).where(*where).order_by(log.id.desc()).limit(_PROBE).subquery()
    with engine.connect() as conn:
        count, held = conn.execute(select(func.count(), func.sum(newest.c.size))).one()
    return max(1.0, float(held) / int(count)) if count else 1.0


def summarize_window(
    *, engine: Engine, model_name: str, spec: WindowSpec, now: datetime | None = None, upto: int | None = None
) -> WindowSummary | None:
    """The window's prediction count, time span and batch id range (None when it is empty); ``upto``: the
    window as it stood when its newest batch had this id (newer batches are left out)."""
    since = _since(spec, now)
    where = _filters(model_name=model_name, spec=spec, since=since, upto=upto)
    log = PredictionBatch
    with engine.connect() as conn:
        if spec.rows is None:
            stmt = select(
                func.count(),
                func.sum(log.size),
                func.min(log.logged_at),
                func.max(log.logged_at),
                func.min(log.id),
                func.max(log.id),
            ).where(*where)
            n, total, start, end, low, high = conn.execute(stmt).one()
            if not n:
                return None
            return WindowSummary(
                model_name, spec, int(total), aware(start), aware(end), int(low), int(high), since
            )
        # the newest batches until they hold ``rows`` predictions (see _newest)
        found = _newest(conn, where, spec.rows)
    if found is None:
        return None
    held, first, last, low, high = found
    skip = max(0, held - spec.rows)
    return WindowSummary(model_name, spec, held - skip, aware(first), aware(last), low, high, since, skip)


def _newest_batches(where: list[ColumnElement[bool]], *, below: int | None, k: int) -> Subquery:
    """The newest ``k`` batches (below the id ``below``): their ids, times and sizes."""
    log = PredictionBatch
    terms = [*where] if below is None else [*where, log.id < below]
    return select(log.id, log.logged_at, log.size).where(*terms).order_by(log.id.desc()).limit(k).subquery()


def _span_columns(newest: Subquery) -> list[ColumnElement[Any]]:
    """Count, predictions, time span, id range and smallest and largest size of ``newest``'s batches."""
    c = newest.c
    return [
        func.count(),
        func.coalesce(func.sum(c.size), 0),
        func.min(c.logged_at),
        func.max(c.logged_at),
        func.min(c.id),
        func.max(c.id),
        func.min(c.size),
        func.max(c.size),
    ]


def _span(conn: Any, where: list[ColumnElement[bool]], *, below: int | None, k: int) -> tuple[Any, ...]:
    """Of the newest ``k`` batches (below the id ``below``): count, predictions, time span, id range."""
    return tuple(conn.execute(select(*_span_columns(_newest_batches(where, below=below, k=k)))).one())


def _newest(
    conn: Any, where: list[ColumnElement[bool]], rows: int, *, blocks: _Grouped | None = None
) -> tuple[int, datetime | None, datetime | None, int, int] | None:
    """The newest batches holding ``rows`` predictions (the oldest of them may hold more): predictions, time
    span and id range; None when there is none.

    Aggregates over the newest k batches of the ``(model_name, id)`` index (index-only on PostgreSQL), k
    sized from the mean size of the newest :data:`_PROBE`; while they hold too few, the next older ones are
    added the same way; batches holding only predictions beyond ``rows`` (k overshot) are then cut from the
    oldest end, read one by one (few: k is sized to the mean). With ``blocks``, every scan is grouped by
    block there as well."""

    def span(below: int | None, k: int) -> tuple[Any, ...]:
        return _span(conn, where, below=below, k=k) if blocks is None else blocks.span(below=below, k=k)

    count, held, start, end, low, high, smallest, largest = span(None, _PROBE)
    if not count:
        return None
    total, n = int(held), int(count)
    mean = max(1.0, total / n)
    even = smallest == largest  # every probed batch of one size: the next ones are sized exactly
    more = n == _PROBE
    while total < rows and more:
        need = rows - total
        k = min(need, -(-need // int(mean)) if even else int(need / mean * 1.1) + 16)
        count, held, older_start, _, older_low, _, _, _ = span(low, k)
        if not count:
            break
        more = int(count) == k
        total += int(held)
        low = int(older_low)
        start = older_start if start is None or (older_start is not None and older_start < start) else start
    if total - rows > 0:  # drop the oldest batches whose predictions are all beyond ``rows``
        log = PredictionBatch
        excess = total - rows
        stmt = (
            select(log.id, log.size)
            .where(*where, log.id >= low, log.id <= high)
            .order_by(log.id)
            .limit(excess + 1)
        )
        dropped = 0
        cut = low
        for batch_id, size in conn.execute(stmt):
            if dropped + int(size) > excess:
                cut = int(batch_id)
                break
            dropped += int(size)
        if cut != low:
            total -= dropped
            low = cut
            start = conn.execute(
                select(func.min(log.logged_at)).where(*where, log.id >= low, log.id <= high)
            ).scalar()
    return total, start, end, int(low), int(high)


@dataclass(frozen=True)
class BlockStat:
    """An aligned block of a window's batch ids: its index (``id // block_ids``), the window's predictions
    in it and its oldest ``logged_at``."""

    block: int
    rows: int
    oldest: datetime


# The planner cannot know that ``id / B`` has few values: it expects a group per row and sorts the window's
# index entries; without sorts it hashes the few groups. The setting lasts for the statement's transaction.
_NO_SORT = "SET LOCAL enable_sort = off"


def block_stats(*, engine: Engine, summary: WindowSummary, block_ids: int) -> list[BlockStat]:
    """Per aligned block of ``block_ids`` batch ids holding batches of the window's id range: the window's
    predictions in it and its oldest ``logged_at`` (model, status and version filters, not the time bound: a
    block whose oldest batch is older than the window's ``since`` is cut by it); an index-only scan of
    ``(model_name, id)`` on PostgreSQL."""
    log = PredictionBatch
    block = log.id.op("/")(literal(block_ids)).label("block")
    where = _filters(model_name=summary.model_name, spec=summary.spec, since=None)
    stmt = (
        select(block, func.sum(log.size), func.min(log.logged_at))
        .where(*where, log.id >= summary.first_id, log.id <= summary.last_id)
        .group_by(block)
    )
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(_NO_SORT)
        found = sorted(conn.execute(stmt).all(), key=lambda row: int(row[0]))
    out = [BlockStat(int(b), int(n), aware(at) or datetime.min.replace(tzinfo=UTC)) for b, n, at in found]
    if out and summary.skip:  # the first batch's oldest predictions are outside the window
        out[0] = replace(out[0], rows=out[0].rows - summary.skip)
    return out


def summarize_blocks(
    *,
    engine: Engine,
    model_name: str,
    spec: WindowSpec,
    block_ids: int,
    now: datetime | None = None,
    upto: int | None = None,
) -> tuple[WindowSummary | None, list[BlockStat]]:
    """:func:`summarize_window` and :func:`block_stats` of the window (``upto`` as there).

    A last-N window without a time bound gets both from one scan of its newest batches, grouped by block
    (the monitor's steady state reads this every run); a window with a time bound takes the two queries
    (its blocks are not cut by the bound, its summary is)."""
    if spec.rows is None or spec.minutes is not None:
        summary = summarize_window(engine=engine, model_name=model_name, spec=spec, now=now, upto=upto)
        if summary is None:
            return None, []
        return summary, block_stats(engine=engine, summary=summary, block_ids=block_ids)
    where = _filters(model_name=model_name, spec=spec, since=None, upto=upto)
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(_NO_SORT)
        blocks = _Grouped(conn, where, block_ids)
        found = _newest(conn, where, spec.rows, blocks=blocks)
        if found is None:
            return None, []
        held, first, last, low, high = found
        stats = blocks.stats(low=low, high=high)
    skip = max(0, held - spec.rows)
    summary = WindowSummary(model_name, spec, held - skip, aware(first), aware(last), low, high, None, skip)
    if stats and skip:  # the first batch's oldest predictions are outside the window
        stats[0] = replace(stats[0], rows=stats[0].rows - skip)
    return summary, stats


class _Grouped:
    """The block statistics of the batches :func:`_newest` scans, gathered while it scans them: each scan of
    the newest k batches (below an id) grouped by block, the blocks of successive scans merged."""

    def __init__(self, conn: Any, where: list[ColumnElement[bool]], block_ids: int) -> None:
        self.conn, self.where, self.block_ids = conn, where, block_ids
        self.rows: dict[int, int] = {}
        self.oldest: dict[int, datetime] = {}

    def span(self, *, below: int | None, k: int) -> tuple[Any, ...]:
        """:func:`_span` of the newest ``k`` batches (below ``below``), their blocks kept."""
        newest = _newest_batches(self.where, below=below, k=k)
        block = newest.c.id.op("/")(literal(self.block_ids)).label("block")
        found = self.conn.execute(select(block, *_span_columns(newest)).group_by(block)).all()
        if not found:
            return (0, 0, None, None, None, None, None, None)
        for b, _, held, oldest, *_ in found:
            b, at = int(b), aware(oldest) or datetime.min.replace(tzinfo=UTC)
            self.rows[b] = self.rows.get(b, 0) + int(held)
            self.oldest[b] = min(at, self.oldest.get(b, at))
        return (
            sum(int(r[1]) for r in found),
            sum(int(r[2]) for r in found),
            min(r[3] for r in found),
            max(r[4] for r in found),
            min(r[5] for r in found),
            max(r[6] for r in found),
            min(r[7] for r in found),
            max(r[8] for r in found),
        )

    def stats(self, *, low: int, high: int) -> list[BlockStat]:
        """The blocks of the batches ``low..high`` (the scans may have gone below ``low``: the batches cut
        from the oldest end leave their blocks, and the block holding ``low`` is counted again)."""
        first = low // self.block_ids
        out = [BlockStat(b, self.rows[b], self.oldest[b]) for b in sorted(self.rows) if b > first]
        log = PredictionBatch
        end = min(high, (first + 1) * self.block_ids - 1)
        held, oldest = self.conn.execute(
            select(func.sum(log.size), func.min(log.logged_at)).where(
                *self.where, log.id >= low, log.id <= end
            )
        ).one()
        if held:
            out.insert(0, BlockStat(first, int(held), aware(oldest) or datetime.min.replace(tzinfo=UTC)))
        return out


def narrow(summary: WindowSummary, *, first_id: int, last_id: int, rows: int) -> WindowSummary:
    """The part of ``summary``'s window between two batch ids (``rows``: about how many predictions it
    holds, which sizes the chunks), for :func:`read_chunks`; the filters (and the labels' time span) stay the
    window's, and so does ``skip`` when the part starts at the window's first batch."""
    if first_id < summary.first_id or last_id > summary.last_id or first_id > last_id:
        raise ValueError(f"ids {first_id}..{last_id} are not inside {summary.first_id}..{summary.last_id}")
    skip = summary.skip if first_id == summary.first_id else 0
    return replace(summary, first_id=first_id, last_id=last_id, rows=max(rows, 1), skip=skip)


def _ranges(first: int, last: int, rows: int, chunk_rows: int) -> list[tuple[int, int]]:
    """Batch id ranges expected to hold about ``chunk_rows`` predictions each (ids are shared by models)."""
    span = last - first + 1
    step = max(1, -(-chunk_rows * span // max(rows, 1)))
    return [(lo, min(lo + step - 1, last)) for lo in range(first, last + 1, step)]


# ---------------------------------------------------------------- decoding batches


@dataclass
class _Batches:
    """A range's batches in id order, column by column (binary columns as bytes); or, ``joined``, the
    range's columns concatenated (every batch typed in one layout: its id, the numbers, the texts)."""

    ids: np.ndarray  # int64
    sizes: np.ndarray  # int64
    layouts: list[int | None]
    numbers: list[bytes | None]
    categories: list[str | None]
    outputs: list[bytes]
    inputs: list[Any]  # the documents (a list, or JSON text on SQLite), None where typed
    joined: tuple[int, bytes, str | None] | None = None
    sources: list[str] = field(default_factory=list)  # each batch's source, in id order

    @property
    def total(self) -> int:
        return int(self.sizes.sum())

    def by_source(self, skip: int) -> Counter[str]:
        """The predictions by their batch's source (``skip``: the first batch's oldest ones left out)."""
        return count_sources(self.sources, self.sizes, skip)


def count_sources(sources: Sequence[str], sizes: np.ndarray, skip: int = 0) -> Counter[str]:
    """Predictions by source from each batch's source and size (``skip``: the first batch's oldest ones left
    out); sources without predictions are absent. One source (the usual range) is one sum."""
    if len(sources) != sizes.size:
        raise ValueError(f"{len(sources)} sources for {sizes.size} batches")
    distinct = set(sources)
    if len(distinct) <= 1:
        counts = Counter({s: int(sizes.sum()) for s in distinct})
    else:
        names = sorted(distinct)
        at = {name: i for i, name in enumerate(names)}
        codes = np.fromiter(map(at.__getitem__, sources), dtype=np.int64, count=sizes.size)
        totals = np.bincount(codes, weights=sizes, minlength=len(names))
        counts = Counter({name: int(n) for name, n in zip(names, totals.tolist(), strict=True)})
    if skip:
        counts[sources[0]] -= skip
    return +counts


def _documents(value: Any, size: int) -> list[Any]:
    if isinstance(value, str | bytes):
        value = orjson.loads(value)
    return value if isinstance(value, list) and len(value) == size else [{}] * size


def _numeric_values(docs: Sequence[Any], name: str) -> np.ndarray:
    out = np.full(len(docs), np.nan)
    for i, doc in enumerate(docs):
        value = doc.get(name) if isinstance(doc, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[i] = float(value)
        elif isinstance(value, str):  # a number sent as text reads as that number, as a JSON reader's cast
            with contextlib.suppress(ValueError):
                out[i] = float(value)
    return out


def _text_values(docs: Sequence[Any], name: str) -> Counter[str | None]:
    counts: Counter[str | None] = Counter()
    for doc in docs:
        value = doc.get(name) if isinstance(doc, dict) else None
        counts[
            None if value is None else value if isinstance(value, str) else orjson.dumps(value).decode()
        ] += 1
    return counts


class _Part:
    """The columns of a run of batches, appended in order and then trimmed of the window's skip."""

    def __init__(self, numeric: Sequence[str], categorical: Sequence[str]) -> None:
        self.numeric = numeric
        self.categorical = categorical
        self.columns: dict[str, list[np.ndarray]] = {name: [] for name in numeric}
        self.counts: dict[str, Counter[str | None]] = {name: Counter() for name in categorical}

    def typed(self, layout: typed.Layout, blob: bytes, texts: list[str], rows: int, skip: int) -> None:
        """Rows of one layout (``skip``: leave out the first rows, and their category texts)."""
        matrix = typed.numbers_matrix(blob, rows, layout.width)
        first = len(layout.numeric)
        if skip:
            dropped = int((matrix[:skip, first:] == typed.OTHER).any(axis=1).sum())
            matrix, texts = matrix[skip:], texts[dropped:]
        at = {name: i for i, name in enumerate(layout.numeric)}
        for name in self.numeric:
            j = at.get(name)
            self.columns[name].append(
                np.ascontiguousarray(matrix[:, j]) if j is not None else np.full(matrix.shape[0], np.nan)
            )
        held = [name for name in self.categorical if name in layout.categorical]
        if held:
            joined = "\n".join(texts).encode()
            for name, counts in typed.count_categories(layout, matrix, joined, held).items():
                self.counts[name].update(counts)
        for name in self.categorical:
            if name not in layout.categorical:
                self.counts[name][None] += matrix.shape[0]

    def documents(self, docs: Sequence[Any]) -> None:
        """Rows held as documents."""
        for name in self.numeric:
            self.columns[name].append(_numeric_values(docs, name))
        for name in self.categorical:
            self.counts[name].update(_text_values(docs, name))

    def chunk(self, rows: int, predictions: np.ndarray, labels: np.ndarray, sources: Counter[str]) -> Chunk:
        columns = {
            name: np.concatenate(parts) if parts else np.empty(0) for name, parts in self.columns.items()
        }
        counts = {name: c for name, c in self.counts.items()}
        return Chunk(
            rows=rows,
            columns=columns,
            predictions=predictions,
            labels=labels,
            category_counts=counts,
            sources=sources,
        )


def _decode(
    got: _Batches,
    layouts: dict[int, typed.Layout],
    *,
    numeric: Sequence[str],
    categorical: Sequence[str],
    skip: int,
    labels: np.ndarray | None,
) -> Chunk:
    """One chunk from a range's batches (``skip``: predictions of the first batch left out)."""
    total = got.total
    part = _Part(numeric, categorical)
    if got.joined is not None:
        layout_id, blob, joined_texts = got.joined
        texts = joined_texts.split("\n") if joined_texts else []
        part.typed(layouts[layout_id], blob, texts, total, skip)
    else:
        asked = (*numeric, *categorical)
        runs = itertools.groupby(range(len(got.layouts)), key=lambda i: _kind(got, layouts, i, asked))
        for kind, run in runs:
            members = list(run)
            trim = skip if members[0] == 0 else 0
            rows = int(got.sizes[members].sum())
            layout = layouts.get(kind) if isinstance(kind, int) else None
            if layout is not None:
                blob = b"".join(got.numbers[m] or b"" for m in members)
                texts = [
                    line
                    for m in members
                    if got.categories[m]
                    for line in (got.categories[m] or "").split("\n")
                ]
                part.typed(layout, blob, texts, rows, trim)
            else:
                docs = [doc for m in members for doc in _documents(got.inputs[m], int(got.sizes[m]))]
                part.documents(docs[trim:])
    predictions = np.frombuffer(b"".join(got.outputs), dtype="<f8").astype(np.float64)
    if predictions.size != total:
        raise ValueError(f"{predictions.size} outputs for {total} predictions")
    found = labels if labels is not None else np.full(total, np.nan)
    return part.chunk(total - skip, predictions[skip:], found[skip:], got.by_source(skip))


def _kind(got: _Batches, layouts: dict[int, typed.Layout], i: int, asked: Sequence[str]) -> int | str:
    """How batch ``i`` is decoded: its layout id, or ``"documents"`` (no typed copy, or a layout lacking an
    asked feature that the batch's documents may hold)."""
    layout_id = got.layouts[i]
    layout = layouts.get(layout_id) if layout_id is not None else None
    if layout is None or got.numbers[i] is None:
        return "documents"
    if got.inputs[i] is not None and not _holds(layout, asked):
        return "documents"
    return layout.id


def _holds(layout: typed.Layout, asked: Sequence[str]) -> bool:
    """The layout holds every asked feature."""
    return set(asked) <= {*layout.numeric, *layout.categorical}


# ---------------------------------------------------------------- fetching ranges


def _range_where(summary: WindowSummary, lo: int, hi: int) -> list[ColumnElement[bool]]:
    where = _filters(model_name=summary.model_name, spec=summary.spec, since=summary.since)
    return [*where, PredictionBatch.id >= lo, PredictionBatch.id <= hi]


def _fetch_rows(engine: Engine, summary: WindowSummary, lo: int, hi: int) -> _Batches:
    """A range's batches, one database row each."""
    log = PredictionBatch
    stmt = (
        select(log.id, log.size, log.layout, log.numbers, log.categories, log.outputs, log.inputs, log.source)
        .where(*_range_where(summary, lo, hi))
        .order_by(log.id)
    )
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    return _Batches(
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


def _range_params(summary: WindowSummary, sql: str = _RANGE_SQL) -> tuple[str, dict[str, Any]]:
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
) -> _Batches | None:
    """A range in one row (PostgreSQL); None when its batches are not all typed in one known layout holding
    every asked feature. Sorts are off for the statement: the range's index scans come in id order (a
    Merge Append over the partitions), where a planner without statistics sorts the wide rows on disk."""
    sql, params = _range_params(summary)
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(_NO_SORT)
            cur.execute(sql, {**params, "lo": lo, "hi": hi}, binary=True)
            n, typed_n, low, high, numbered, ids, sizes, numbers, texts, outputs, sources = cur.fetchone()
        raw.commit()
    finally:
        raw.close()
    n = int(n)
    if n and (typed_n != n or numbered != n or low != high):
        return None
    if n and (int(low) not in layouts or not _holds(layouts[int(low)], asked)):
        return None
    id_array = np.frombuffer(bytes(ids or b""), dtype=">i8").astype(np.int64)
    if id_array.size > 1 and not np.all(np.diff(id_array) > 0):
        return None
    total_sizes = np.frombuffer(bytes(sizes or b""), dtype=">i8").astype(np.int64)
    # the whole range typed in its one layout (the texts are the rows' lines, in order)
    return _Batches(
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
) -> _Batches:
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
    layouts = _layouts(engine)
    ranges = _ranges(summary.first_id, summary.last_id, summary.rows + summary.skip, chunk_rows)
    prefetch = 2 if engine.dialect.name == "postgresql" else 0
    asked = (*numeric, *categorical)

    def fetch(lo: int, hi: int) -> _Batches:
        return _fetch(engine, summary, lo, hi, layouts, asked)

    for (lo, hi), got in _prefetched(fetch, ranges, prefetch):
        if not got.ids.size:
            continue
        skip = summary.skip if lo == summary.first_id else 0
        found = _range_labels(engine, summary, got, lo, hi) if labels else None
        yield _decode(got, layouts, numeric=numeric, categorical=categorical, skip=skip, labels=found)


def _layouts(engine: Engine) -> dict[int, typed.Layout]:
    with engine.connect() as conn:
        return load_layouts(conn)


def _offsets(got_ids: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each batch's first position in the range."""
    return np.concatenate(([0], np.cumsum(sizes)[:-1])) if sizes.size else np.empty(0, dtype=np.int64)


def _scatter(ids: np.ndarray, sizes: np.ndarray, log_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The range positions of (batch id, position) pairs; -1 where the pair is not in the range."""
    if not ids.size or not log_ids.size:
        return np.full(log_ids.size, -1, dtype=np.int64)
    at = np.clip(np.searchsorted(ids, log_ids), 0, ids.size - 1)
    ok = (ids[at] == log_ids) & (positions >= 0) & (positions < sizes[at])
    return np.where(ok, _offsets(ids, sizes)[at] + positions, -1)


def _range_labels(engine: Engine, summary: WindowSummary, got: _Batches, lo: int, hi: int) -> np.ndarray:
    """The labels of a range's predictions, in range order (NaN: none)."""
    fb = PredictionFeedback
    stmt = select(fb.log_id, fb.position, fb.label).where(*_label_filters(summary, lo, hi))
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    out = np.full(got.total, np.nan)
    if rows:
        log_ids = np.array([r[0] for r in rows], dtype=np.int64)
        positions = np.array([r[1] for r in rows], dtype=np.int64)
        values = np.array([np.nan if r[2] is None else r[2] for r in rows], dtype=np.float64)
        at = _scatter(got.ids, got.sizes, log_ids, positions)
        out[at[at >= 0]] = values[at >= 0]
    return out


def _label_filters(summary: WindowSummary, lo: int, hi: int) -> list[ColumnElement[bool]]:
    """The window's labels between two batch ids, on the copies of their predictions a label carries (and
    within the window's time span, which prunes the feedback partitions of other days)."""
    fb = PredictionFeedback
    where: list[ColumnElement[bool]] = [
        fb.model_name == summary.model_name,
        fb.status == PredictionStatus.OK.value,
        fb.log_id >= lo,
        fb.log_id <= hi,
        fb.position.is_not(None),
    ]
    if summary.spec.version is not None:
        where.append(fb.model_version == summary.spec.version)
    if summary.since is not None:
        where.append(fb.logged_at >= summary.since)
    if summary.spec.until is not None:
        where.append(fb.logged_at < summary.spec.until)
    if summary.start is not None and summary.end is not None:
        where += [fb.logged_at >= summary.start, fb.logged_at <= summary.end]
    if summary.skip and lo == summary.first_id:
        where.append((fb.log_id != summary.first_id) | (fb.position >= summary.skip))
    return where


def labelled_arrays(*, engine: Engine, summary: WindowSummary) -> tuple[np.ndarray, np.ndarray]:
    """The window's labelled predictions' outputs and labels in log order (NaN: none).

    Read from ``prediction_feedback`` alone: each label carries its prediction's batch id, position, output,
    version and status, so the window's labels are a range of the feedback's ``(model_name, log_id)`` index,
    read without visiting the batches. PostgreSQL returns two binary values (JIT off: compiling costs more
    than the query takes)."""
    fb = PredictionFeedback
    where = _label_filters(summary, summary.first_id, summary.last_id)
    order = (fb.log_id, fb.position)
    if engine.dialect.name != "postgresql":
        with engine.connect() as conn:
            rows = conn.execute(select(fb.probability, fb.label).where(*where).order_by(*order)).all()
        p = np.array([np.nan if r[0] is None else r[0] for r in rows], dtype=np.float64)
        y = np.array([np.nan if r[1] is None else r[1] for r in rows], dtype=np.float64)
        return p, y
    nan: ColumnElement[float] = literal_column("'NaN'::float8")
    sub = (
        select(
            func.float8send(func.coalesce(fb.probability, nan)).label("pp"),
            func.float8send(func.coalesce(fb.label, nan)).label("y"),
        )
        .where(*where)
        .order_by(*order)
        .subquery()
    )
    empty: ColumnElement[bytes] = literal_column("''::bytea")
    stmt = select(func.count(), func.string_agg(sub.c.pp, empty), func.string_agg(sub.c.y, empty))
    with engine.connect() as conn:
        conn.exec_driver_sql("SET LOCAL jit = off")
        n, probs, labels = conn.execute(stmt).one()
    p = np.frombuffer(bytes(probs or b""), dtype=">f8").astype(np.float64)
    y = np.frombuffer(bytes(labels or b""), dtype=">f8").astype(np.float64)
    if p.size != int(n) or y.size != int(n):
        raise ValueError(f"{p.size} outputs and {y.size} labels for {n} labelled predictions")
    return p, y


def labelled_chunks(
    *, engine: Engine, summary: WindowSummary, chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`labelled_arrays` ``chunk_rows`` at a time."""
    p, y = labelled_arrays(engine=engine, summary=summary)
    for lo in range(0, p.size, chunk_rows):
        yield p[lo : lo + chunk_rows], y[lo : lo + chunk_rows]


def read_vectors(
    *, engine: Engine, summary: WindowSummary, width: int, chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A summarized window's whole answers (a multi-class model's ``[rows, width]`` probability vectors) and
    labels (NaN without one), in log order, chunk by chunk; a batch without vectors of that width is NaN."""
    log = PredictionBatch
    ranges = _ranges(summary.first_id, summary.last_id, summary.rows + summary.skip, chunk_rows)
    for lo, hi in ranges:
        stmt = select(log.id, log.size, log.vectors).where(*_range_where(summary, lo, hi)).order_by(log.id)
        with engine.connect() as conn:
            rows = conn.execute(stmt).all()
        if not rows:
            continue
        got = _Batches(
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
        labels = _range_labels(engine, summary, got, lo, hi)
        skip = summary.skip if lo == summary.first_id else 0
        yield vectors[skip:], labels[skip:]


# ---------------------------------------------------------------- a sample of a window's rows


@dataclass(frozen=True)
class SampleRows:
    """Rows of a window at chosen positions, in log order: each numeric feature's values (float, NaN:
    missing), each categorical feature's texts (an object array of ``str``, None: missing or ``""``), the
    answers (``[n]``, or ``[n, width]`` vectors of a multi-class model, NaN where a batch has none) and the
    labels from the feedback (NaN: none)."""

    population: int  # the window's rows
    positions: np.ndarray  # each row's place in the window (0: its oldest prediction)
    numeric: dict[str, np.ndarray]
    categorical: dict[str, np.ndarray]
    predictions: np.ndarray
    labels: np.ndarray


class _Picked:
    """The pieces of each sampled row as the log holds them: its batch's layout (0: none), its typed values
    (``numbers[starts[i] : starts[i] + widths[i]]``, width 0: no typed copy), its output, its vector, its
    document where its batch holds documents, and its texts (``{"v": [...]}`` values) where it holds a
    category outside the layout."""

    def __init__(self, n: int, width: int | None) -> None:
        self.n = n
        self.layouts = np.zeros(n, dtype=np.int64)
        self.starts = np.zeros(n, dtype=np.int64)
        self.widths = np.zeros(n, dtype=np.int64)
        self.numbers = np.empty(0)
        self.outputs = np.full(n, np.nan)
        self.vectors = None if not width else np.full((n, width), np.nan)
        self.documents: dict[int, Any] = {}
        self.others: dict[int, list[Any]] = {}


def read_sample(
    *,
    engine: Engine,
    summary: WindowSummary,
    positions: np.ndarray,
    numeric: Sequence[str],
    categorical: Sequence[str],
    width: int | None = None,
) -> SampleRows:
    """The window's rows at ``positions`` (increasing places in the window, 0 its oldest prediction): their
    named features, answers (``width``: a multi-class model's vectors of that width) and labels.

    The window's batch ids and sizes come from one index-only scan (on PostgreSQL one binary value each);
    the positions are mapped to (batch, place) by the running sum of sizes. On PostgreSQL only the sampled
    rows' slices of ``numbers``, ``outputs`` and ``vectors`` (and the one document of a batch held as
    documents) are read, in one query; the whole ``numbers`` and ``categories`` of a batch only when a
    sampled row holds a category outside the layout. Elsewhere the sampled rows' batches are read whole. The
    labels are the feedback's of those (batch, place) pairs. Values are read as :func:`read_chunks` reads
    them (see the module docstring), a category as its text."""
    want = np.asarray(positions, dtype=np.int64)
    if want.size and (want[0] < 0 or want[-1] >= summary.rows or np.any(np.diff(want) <= 0)):
        raise ValueError(f"sample positions must be increasing places in the window's {summary.rows} rows")
    ids, sizes = _batch_sizes(engine, summary)
    ends = np.cumsum(sizes)
    at = want + summary.skip  # places in the id range (the first batch's skipped rows come first)
    if want.size and (not ends.size or at[-1] >= ends[-1]):
        raise ValueError("the window's batches hold fewer rows than its summary: read its summary again")
    batch = np.searchsorted(ends, at, side="right")
    log_ids = ids[batch] if want.size else np.empty(0, dtype=np.int64)
    places = at - (ends[batch] - sizes[batch]) if want.size else np.empty(0, dtype=np.int64)
    layouts = _layouts(engine)
    asked = (*numeric, *categorical)
    if engine.dialect.name == "postgresql":
        picked = _pick_sliced(engine, summary, log_ids, places, layouts, width)
    else:
        picked = _pick_whole(engine, summary, log_ids, places, layouts, width)
    numeric_values, categorical_values = _sample_columns(picked, layouts, numeric, categorical, asked)
    return SampleRows(
        population=summary.rows,
        positions=want,
        numeric=numeric_values,
        categorical=categorical_values,
        predictions=_sample_answers(picked, width),
        labels=_sample_labels(engine, summary, log_ids, places),
    )


_SIZES_SQL = """
SELECT count(*), string_agg(int8send(id), ''::bytea), string_agg(int8send(size::int8), ''::bytea)
FROM (
    SELECT p.id, p.size FROM prediction_batches p
    WHERE p.model_name = %(model_name)s AND p.status = %(status)s AND p.id BETWEEN %(lo)s AND %(hi)s {extra}
    ORDER BY p.id
) AS rows
"""


def _batch_sizes(engine: Engine, summary: WindowSummary) -> tuple[np.ndarray, np.ndarray]:
    """The window's batch ids and sizes in id order (the first batch whole: ``skip`` is the caller's)."""
    if engine.dialect.name != "postgresql":
        log = PredictionBatch
        stmt = (
            select(log.id, log.size)
            .where(*_range_where(summary, summary.first_id, summary.last_id))
            .order_by(log.id)
        )
        with engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.int64)
    sql, params = _range_params(summary, _SIZES_SQL)
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(_NO_SORT)
            cur.execute(sql, {**params, "lo": summary.first_id, "hi": summary.last_id}, binary=True)
            n, ids, sizes = cur.fetchone()
        raw.commit()
    finally:
        raw.close()
    id_array = np.frombuffer(bytes(ids or b""), dtype=">i8").astype(np.int64)
    size_array = np.frombuffer(bytes(sizes or b""), dtype=">i8").astype(np.int64)
    if id_array.size != int(n) or size_array.size != int(n):
        raise ValueError(f"{id_array.size} ids and {size_array.size} sizes for {n} batches")
    return id_array, size_array


# PostgreSQL: the sampled rows' slices in one result row, each column concatenated in sample order (the rows
# come in the order of ``unnest``: ``ord``); a batch's width is its ``numbers`` length over its size (the
# layout's, without reading the layouts in SQL); an output or vector the batch lacks is NaN
_SLICES_SQL = """
SELECT count(*),
    string_agg(int4send(s.ord), ''::bytea ORDER BY s.ord),
    string_agg(int8send(coalesce(p.layout, 0)), ''::bytea ORDER BY s.ord),
    string_agg(int4send(coalesce(octet_length(p.numbers) / p.size, 0)), ''::bytea ORDER BY s.ord),
    string_agg(
        coalesce(substring(p.numbers from s.pos * (octet_length(p.numbers) / p.size) + 1
                           for octet_length(p.numbers) / p.size), ''::bytea),
        ''::bytea ORDER BY s.ord),
    string_agg(
        CASE WHEN octet_length(p.outputs) = 8 * p.size THEN substring(p.outputs from s.pos * 8 + 1 for 8)
        ELSE %(nan)s END,
        ''::bytea ORDER BY s.ord),
    string_agg(CASE WHEN octet_length(p.vectors) = %(vector_bytes)s * p.size
                    THEN substring(p.vectors from s.pos * %(vector_bytes)s + 1 for %(vector_bytes)s)
               ELSE %(nan_vector)s END, ''::bytea ORDER BY s.ord) FILTER (WHERE %(vectors)s),
    array_agg(s.ord ORDER BY s.ord) FILTER (WHERE p.inputs IS NOT NULL),
    array_agg(p.inputs -> s.pos ORDER BY s.ord) FILTER (WHERE p.inputs IS NOT NULL)
FROM unnest(%(ids)s::int8[], %(pos)s::int4[], %(ord)s::int4[]) AS s(id, pos, ord)
JOIN prediction_batches p ON p.id = s.id AND p.model_name = %(model_name)s
"""
_NAN = np.array([np.nan], dtype="<f8").tobytes()


def _pg_rows(engine: Engine, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """One statement's rows on PostgreSQL (binary results; sorts and JIT off)."""
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(_NO_SORT)
            cur.execute("SET LOCAL jit = off")
            cur.execute(sql, params, binary=True)
            rows = cur.fetchall()
        raw.commit()
    finally:
        raw.close()
    return list(rows)


def _pick_sliced(
    engine: Engine,
    summary: WindowSummary,
    log_ids: np.ndarray,
    places: np.ndarray,
    layouts: dict[int, typed.Layout],
    width: int | None,
) -> _Picked:
    """The sampled rows' pieces from their slices, in one result row (PostgreSQL)."""
    picked = _Picked(log_ids.size, width)
    if not log_ids.size:
        return picked
    params = {
        "ids": log_ids.tolist(),
        "pos": places.tolist(),
        "ord": list(range(log_ids.size)),
        "model_name": summary.model_name,
        "nan": _NAN,
        "vector_bytes": 8 * (width or 1),
        "nan_vector": _NAN * (width or 1),
        "vectors": bool(width),
    }
    (found, ords, layout_ids, widths, numbers, outputs, vectors, doc_ords, docs), *_ = _pg_rows(
        engine, _SLICES_SQL, params
    )
    if not found:
        return picked
    at = np.frombuffer(bytes(ords), dtype=">i4").astype(np.int64)  # the rows found (a batch may be gone)
    picked.layouts[at] = np.frombuffer(bytes(layout_ids), dtype=">i8")
    row_widths = np.frombuffer(bytes(widths), dtype=">i4").astype(np.int64) // 8
    picked.widths[at] = row_widths
    picked.starts[at] = np.cumsum(row_widths) - row_widths
    picked.numbers = np.frombuffer(bytes(numbers or b""), dtype="<f8")
    picked.outputs[at] = np.frombuffer(bytes(outputs), dtype="<f8")
    if picked.vectors is not None and width:
        picked.vectors[at] = np.frombuffer(bytes(vectors or b""), dtype="<f8").reshape(-1, width)
    picked.documents = dict(zip(doc_ords or [], docs or [], strict=True))
    texts = _rows_with_texts(picked, layouts)
    if texts:
        _fetch_texts(engine, summary, log_ids, places, texts, picked, layouts)
    return picked


def _row(picked: _Picked, i: int) -> np.ndarray:
    """Sampled row ``i``'s typed values."""
    return picked.numbers[picked.starts[i] : picked.starts[i] + picked.widths[i]]


def _rows_with_texts(picked: _Picked, layouts: dict[int, typed.Layout]) -> list[int]:
    """The sampled rows typed with a category outside their layout (their texts are read apart)."""
    out = []
    for layout_id in np.unique(picked.layouts[picked.widths > 0]).tolist():
        layout = layouts.get(layout_id)
        if layout is None or not layout.categorical:
            continue
        for i in np.flatnonzero((picked.layouts == layout_id) & (picked.widths == layout.width)).tolist():
            if (_row(picked, i)[len(layout.numeric) :] == typed.OTHER).any():
                out.append(i)
    return out


def _fetch_texts(
    engine: Engine,
    summary: WindowSummary,
    log_ids: np.ndarray,
    places: np.ndarray,
    rows: list[int],
    picked: _Picked,
    layouts: dict[int, typed.Layout],
) -> None:
    """The texts of sampled rows holding a category outside their layout: their batches' whole typed copy
    (the row's line is the count of such rows before it)."""
    wanted = sorted({int(log_ids[i]) for i in rows})
    sql = (
        "SELECT p.id, p.size, p.layout, p.numbers, p.categories FROM prediction_batches p "
        "WHERE p.model_name = %(model_name)s AND p.id = ANY(%(ids)s::int8[])"
    )
    found = {
        int(r[0]): r[1:] for r in _pg_rows(engine, sql, {"model_name": summary.model_name, "ids": wanted})
    }
    for i in rows:
        size, layout_id, numbers, categories = found[int(log_ids[i])]
        picked.others[i] = _row_texts(
            layouts[int(layout_id)], bytes(numbers), categories, int(size), places[i]
        )


def _row_texts(
    layout: typed.Layout, numbers: bytes, categories: str | None, size: int, place: int
) -> list[Any]:
    """The categorical texts of row ``place`` of a typed batch (its ``{"v": [...]}`` line); every value None
    when the row holds none."""
    matrix = typed.numbers_matrix(numbers, size, layout.width)
    written = (matrix[:, len(layout.numeric) :] == typed.OTHER).any(axis=1)
    if not written[place] or not categories:
        return [None] * len(layout.categorical)
    line = (categories.split("\n"))[int(written[:place].sum())]
    values = orjson.loads(line).get("v")
    return list(values) if isinstance(values, list) else [None] * len(layout.categorical)


def _pick_whole(
    engine: Engine,
    summary: WindowSummary,
    log_ids: np.ndarray,
    places: np.ndarray,
    layouts: dict[int, typed.Layout],
    width: int | None,
) -> _Picked:
    """The sampled rows' pieces from their batches read whole (SQLite)."""
    picked = _Picked(log_ids.size, width)
    log = PredictionBatch
    batches: dict[int, Any] = {}
    wanted = np.unique(log_ids).tolist()
    for lo in range(0, len(wanted), 500):
        stmt = select(
            log.id, log.size, log.layout, log.numbers, log.categories, log.outputs, log.vectors, log.inputs
        ).where(log.model_name == summary.model_name, log.id.in_(wanted[lo : lo + 500]))
        with engine.connect() as conn:
            batches.update({int(r[0]): r for r in conn.execute(stmt)})
    rows: list[np.ndarray] = []
    start = 0
    for i, (batch_id, place) in enumerate(zip(log_ids.tolist(), places.tolist(), strict=True)):
        if batch_id not in batches:  # gone since the window was summarized
            continue
        _, size, layout_id, numbers, categories, outputs, vectors, inputs = batches[batch_id]
        numbers, outputs, vectors = as_bytes(numbers), as_bytes(outputs) or b"", as_bytes(vectors)
        picked.layouts[i] = layout_id or 0
        if numbers is not None and len(numbers) % (8 * int(size)) == 0:
            row_width = len(numbers) // (8 * int(size))
            rows.append(np.frombuffer(numbers, dtype="<f8")[place * row_width : (place + 1) * row_width])
            picked.starts[i], picked.widths[i] = start, row_width
            start += row_width
            layout = layouts.get(int(layout_id)) if layout_id is not None else None
            if layout is not None and (rows[-1][len(layout.numeric) :] == typed.OTHER).any():
                picked.others[i] = _row_texts(layout, numbers, categories, int(size), place)
        if len(outputs) == 8 * int(size):
            picked.outputs[i] = np.frombuffer(outputs, dtype="<f8")[place]
        if picked.vectors is not None and width and vectors is not None and len(vectors) == 8 * width * size:
            picked.vectors[i] = np.frombuffer(vectors, dtype="<f8").reshape(int(size), width)[place]
        if inputs is not None:
            picked.documents[i] = _documents(inputs, int(size))[place]
    picked.numbers = np.concatenate(rows) if rows else np.empty(0)
    return picked


def _sample_answers(picked: _Picked, width: int | None) -> np.ndarray:
    """The sampled rows' answers: outputs ``[n]``, or vectors ``[n, width]`` (NaN where a row has none)."""
    if width and picked.vectors is not None:
        return picked.vectors
    return picked.outputs


def _sample_columns(
    picked: _Picked,
    layouts: dict[int, typed.Layout],
    numeric: Sequence[str],
    categorical: Sequence[str],
    asked: Sequence[str],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The sampled rows' features: typed rows decoded by layout (one matrix per layout), the others from
    their documents, as :func:`_decode` decides (:func:`_kind`)."""
    nums = {name: np.full(picked.n, np.nan) for name in numeric}
    texts = {name: np.full(picked.n, None, dtype=object) for name in categorical}
    typed_rows = np.zeros(picked.n, dtype=bool)
    for layout_id in np.unique(picked.layouts[picked.widths > 0]).tolist():
        layout = layouts.get(layout_id)
        if layout is None:
            continue
        mine = (picked.layouts == layout_id) & (picked.widths == layout.width)
        if not _holds(layout, asked):  # rows whose batch holds documents are read from them
            mine &= np.array([i not in picked.documents for i in range(picked.n)])
        rows = np.flatnonzero(mine)
        typed_rows[rows] = True
        matrix = picked.numbers[picked.starts[rows][:, None] + np.arange(layout.width)]
        _typed_values(layout, matrix, rows, [picked.others.get(i) for i in rows.tolist()], nums, texts)
    for i in np.flatnonzero(~typed_rows).tolist():
        doc = picked.documents.get(i)
        doc = doc if isinstance(doc, dict) else {}
        for name in numeric:
            nums[name][i] = _numeric_values([doc], name)[0]
        for name in categorical:
            texts[name][i] = _text(doc.get(name))
    for values in texts.values():  # "" is missing, as the profile counts it
        values[values == ""] = None
    return nums, texts


def _typed_values(
    layout: typed.Layout,
    matrix: np.ndarray,
    rows: np.ndarray,
    others: list[list[Any] | None],
    nums: dict[str, np.ndarray],
    texts: dict[str, np.ndarray],
) -> None:
    """Typed rows' values into the sample's columns (a feature the layout lacks stays missing)."""
    for j, name in enumerate(layout.numeric):
        if name in nums:
            nums[name][rows] = matrix[:, j]
    for j, name in enumerate(layout.categorical):
        if name in texts:
            texts[name][rows] = _codes_to_text(layout, j, matrix[:, len(layout.numeric) + j], others)


def _text(value: Any) -> str | None:
    """A document's categorical value as the window reader counts it (its JSON text when not a string)."""
    return None if value is None else value if isinstance(value, str) else orjson.dumps(value).decode()


def _codes_to_text(
    layout: typed.Layout, j: int, codes: np.ndarray, others: list[list[Any] | None]
) -> np.ndarray:
    """Categorical ``j``'s codes as texts (the row's written text for a category outside the layout)."""
    lookup = np.empty(len(layout.categories[j]) + 1, dtype=object)
    lookup[: len(layout.categories[j])] = layout.categories[j]  # lookup[-1] (a missing value) stays None
    ints = codes.astype(np.int64)
    out = lookup[np.where(ints >= 0, ints, -1)]
    for k in np.flatnonzero(ints == typed.OTHER).tolist():
        written = others[k]
        out[k] = _text(written[j]) if written is not None and j < len(written) else None
    return out


_LABELS_SQL = """
SELECT s.ord, f.label
FROM unnest(%(ids)s::int8[], %(pos)s::int4[], %(ord)s::int4[]) AS s(id, pos, ord)
JOIN prediction_feedback f ON f.model_name = %(model_name)s AND f.log_id = s.id AND f.position = s.pos
WHERE f.status = %(status)s {extra}
"""


def _sample_labels(
    engine: Engine, summary: WindowSummary, log_ids: np.ndarray, places: np.ndarray
) -> np.ndarray:
    """The feedback's labels of the sampled (batch, place) pairs (NaN: none), filtered as the window's
    labels are (:func:`_label_filters`)."""
    out = np.full(log_ids.size, np.nan)
    if not log_ids.size:
        return out
    if engine.dialect.name == "postgresql":
        extra, params = _label_extra(summary)
        params.update(
            ids=log_ids.tolist(),
            pos=places.tolist(),
            ord=list(range(log_ids.size)),
            model_name=summary.model_name,
            status=PredictionStatus.OK.value,
        )
        for i, label in _pg_rows(engine, _LABELS_SQL.replace("{extra}", extra), params):
            out[int(i)] = np.nan if label is None else float(label)
        return out
    fb = PredictionFeedback
    at = {(b, p): i for i, (b, p) in enumerate(zip(log_ids.tolist(), places.tolist(), strict=True))}
    wanted = np.unique(log_ids).tolist()
    for lo in range(0, len(wanted), 500):
        where = [
            *_label_filters(summary, summary.first_id, summary.last_id),
            fb.log_id.in_(wanted[lo : lo + 500]),
        ]
        with engine.connect() as conn:
            for log_id, position, label in conn.execute(
                select(fb.log_id, fb.position, fb.label).where(*where)
            ):
                i = at.get((int(log_id or 0), int(position or 0)))
                if i is not None:
                    out[i] = np.nan if label is None else float(label)
    return out


def _label_extra(summary: WindowSummary) -> tuple[str, dict[str, Any]]:
    """:func:`_label_filters`' version and time bounds as SQL text for :data:`_LABELS_SQL`."""
    extra, params = "", dict[str, Any]()
    if summary.spec.version is not None:
        extra += " AND f.model_version = %(version)s"
        params["version"] = summary.spec.version
    if summary.since is not None:
        extra += " AND f.logged_at >= %(since)s"
        params["since"] = summary.since
    if summary.spec.until is not None:
        extra += " AND f.logged_at < %(until)s"
        params["until"] = summary.spec.until
    if summary.start is not None and summary.end is not None:
        extra += " AND f.logged_at >= %(start)s AND f.logged_at <= %(end)s"
        params.update(start=summary.start, end=summary.end)
    return extra, params
