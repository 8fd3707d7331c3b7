"""A model's window of the prediction log, read in chunks and folded into a :class:`WindowSketch`.

The reading (which rows, the reader's performance design) belongs to the log's owner:
:mod:`predictions.windows`. Here each chunk is counted on the reference profile's grids and dropped, so
memory is bounded by the chunk size plus the profile, never by the window.

On PostgreSQL with a :class:`SketchCache` (the default of ``run_monitor``: setting
``monitor_sketch_cache``), the batch id axis is cut into aligned blocks of about ``block_ids`` predictions
(:func:`block_span`); a block lying wholly inside the window is counted once and its counts kept in
``monitor_window_sketches`` (:mod:`monitors.service`), and later runs merge the stored counts while the log
still shows the block's row count and oldest ``logged_at`` (an index-only query per run, with the window's
summary: :func:`predictions.windows.summarize_blocks`; while it runs, the newest blocks the cache lacks are
already read and counted, see :func:`_read_early`). Only new or changed blocks and the window's edges are
read; the labels (feedback arrives later) and the ordered error stream are read on every run from the
labelled rows of the whole window. See docs/monitoring.md, "The sketch cache".
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from core.times import iso_or_none
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.rows import RowSample, uniform_positions
from monitors.service import (
    CachedBlock,
    SketchKey,
    block_sketches,
    cached_blocks,
    prune_blocks,
    store_blocks,
)
from monitors.sketch import (
    SKETCH_FORMAT,
    MulticlassCounts,
    WindowSketch,
    decode_counts,
    encode_counts,
    fingerprint,
)
from predictions.windows import (
    CHUNK_ROWS,
    READER,
    BlockStat,
    Chunk,
    WindowSpec,
    WindowSummary,
    block_stats,
    labelled_arrays,
    mean_size,
    narrow,
    newest_id,
    read_chunks,
    read_sample,
    read_vectors,
    summarize_blocks,
    summarize_window,
)
from registry.schema import Task

_FETCH_BLOCKS = 16  # stored blocks read or written per query (about 0.5 MB each: 25 features, fine grids)
_BLOCKS_AHEAD = 1  # blocks fetched ahead of the counting (each also prefetches its ranges: two queries)
_EARLY_BLOCKS = 5  # the newest uncached blocks read and counted while the summary's index scan runs


@dataclass(frozen=True)
class SketchCache:
    """Where the counts of sealed blocks are kept (the primary database, even when the window is read from a
    replica) and about how many predictions a block holds: a block spans ``block_ids`` batch ids divided by
    the model's mean request size (its newest batches'), rounded to a power of two (:func:`block_span`)."""

    engine: Engine
    block_ids: int = 65_536


def block_span(predictions: int, mean_size: float) -> int:
    """The batch ids per block for blocks of about ``predictions`` predictions: a power of two, so that a
    traffic whose mean request size drifts a little keeps its blocks (and their stored counts)."""
    ids = max(1.0, predictions / max(1.0, mean_size))
    return 1 << max(0, round(math.log2(ids)))


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
    since: datetime | None = None  # the time bound of a window of the last minutes
    skip: int = 0  # the oldest predictions of the first batch left out (predictions.windows.WindowSummary)
    chunks: int = 0
    cached_blocks: int | None = None  # with the sketch cache: blocks taken from it
    counted_blocks: int | None = None  # with the sketch cache: blocks read (the edges, new or changed ones)
    cache_seconds: dict[str, float] | None = None  # with the sketch cache: wall seconds per step
    sample: RowSample | None = None  # a uniform sample of the window's rows (read_window's sample_rows)

    @property
    def rows_by_source(self) -> dict[str, int]:
        """The window's predictions by the source of their log rows (``serve``, ``ingest``, ``import``, ...),
        by name; a source without a prediction in the window is absent."""
        return {source: n for source, n in sorted(self.sketch.sources.items()) if n > 0}

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "rows": self.rows,
            "rows_by_source": self.rows_by_source,
            "labelled": self.labelled,
            "start": iso_or_none(self.start),
            "end": iso_or_none(self.end),
            "first_id": self.first_id,
            "last_id": self.last_id,
            "spec": {
                "rows": self.spec.rows,
                "minutes": self.spec.minutes,
                "version": self.spec.version,
                **({"until": self.spec.until.isoformat()} if self.spec.until is not None else {}),
            },
            "reader": self.reader,
        } | (
            {}
            if self.cached_blocks is None
            else {
                "sketch_cache": {
                    "cached_blocks": self.cached_blocks,
                    "counted_blocks": self.counted_blocks,
                    "seconds": self.cache_seconds,
                }
            }
        )


def read_window(
    *,
    engine: Engine,
    profile: Profile,
    model_name: str,
    spec: WindowSpec,
    threshold: float = 0.5,
    chunk_rows: int = CHUNK_ROWS,
    now: datetime | None = None,
    cache: SketchCache | None = None,
    sample_rows: int = 0,
) -> Window:
    """Read one model's window from the prediction log in chunks and sketch it on ``profile``'s grids
    (``cache``: merge the stored counts of sealed blocks); a multi-class
    model's probability vectors and their labels are read apart, in id order (:func:`_add_vectors`).

    ``sample_rows`` > 0: ``Window.sample`` holds a uniform sample of at most that many of the window's rows
    (:func:`read_window_sample`), read on a thread of its own from the moment the window's summary is known,
    while the window is sketched."""
    sampler = _Sampler(engine=engine, profile=profile, rows=sample_rows)
    try:
        window = _read_window(
            engine=engine,
            profile=profile,
            model_name=model_name,
            spec=spec,
            threshold=threshold,
            chunk_rows=chunk_rows,
            now=now,
            cache=cache,
            sampler=sampler,
        )
        if profile.task is Task.MULTICLASS:
            _add_vectors(engine=engine, profile=profile, window=window, chunk_rows=chunk_rows)
        window.sample = sampler.result()
    finally:
        sampler.close()
    return window


class _Sampler:
    """A window's row sample, read on its own thread once the window's summary is known (:meth:`start`)."""

    def __init__(self, *, engine: Engine, profile: Profile, rows: int) -> None:
        self.engine, self.profile, self.rows = engine, profile, rows
        self.pool: ThreadPoolExecutor | None = None
        self.future: Future[RowSample | None] | None = None

    def start(self, summary: WindowSummary) -> None:
        """Begin reading the sample of the window ``summary`` describes (nothing without ``rows``)."""
        if self.rows <= 0 or self.future is not None:
            return
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dw-sample")
        self.future = self.pool.submit(
            _sample_of, engine=self.engine, profile=self.profile, summary=summary, rows=self.rows
        )

    def result(self) -> RowSample | None:
        """The sample (None: not started, an empty window)."""
        return None if self.future is None else self.future.result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _summary_of(window: Window) -> WindowSummary | None:
    """The summary a window was read by (None: the window is empty)."""
    if window.first_id is None or window.last_id is None or not window.rows:
        return None
    return WindowSummary(
        model_name=window.model_name,
        spec=window.spec,
        rows=window.rows,
        start=window.start,
        end=window.end,
        first_id=window.first_id,
        last_id=window.last_id,
        since=window.since,
        skip=window.skip,
    )


def sample_seed(window: Window) -> int:
    """The seed of a window's sample: the same window (model, id range, rows) draws the same rows."""
    summary = _summary_of(window)
    return 0 if summary is None else _seed(summary)


def _seed(summary: WindowSummary) -> int:
    s = summary
    key = f"{s.model_name}|{s.first_id}|{s.last_id}|{s.skip}|{s.rows}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def read_window_sample(*, engine: Engine, profile: Profile, window: Window, rows: int) -> RowSample | None:
    """A uniform sample of at most ``rows`` of the window's rows (:func:`monitors.rows.uniform_positions`,
    seeded by :func:`sample_seed`): the profile's features, the answers (a multi-class model's vectors) and
    the labels from the feedback; None for an empty window."""
    summary = _summary_of(window)
    if summary is None or rows <= 0:
        return None
    return _sample_of(engine=engine, profile=profile, summary=summary, rows=rows)


def _sample_of(*, engine: Engine, profile: Profile, summary: WindowSummary, rows: int) -> RowSample:
    """:func:`read_window_sample` of the window ``summary`` describes."""
    numeric, categorical = _feature_names(profile)
    width = len(profile.class_probabilities) if profile.task is Task.MULTICLASS else None
    got = read_sample(
        engine=engine,
        summary=summary,
        positions=uniform_positions(summary.rows, rows, seed=_seed(summary)),
        numeric=numeric,
        categorical=categorical,
        width=width or None,
    )
    values = {**got.numeric, **got.categorical}
    return RowSample(
        columns={name: values[name] for name in profile.features},
        kinds={name: feature.kind for name, feature in profile.features.items()},
        predictions=got.predictions,
        labels=got.labels if np.isfinite(got.labels).any() else None,
        population=got.population,
    )


def _add_vectors(*, engine: Engine, profile: Profile, window: Window, chunk_rows: int) -> None:
    """Count a multi-class window's vectors and labels into its sketch (``MulticlassCounts``)."""
    width = len(profile.class_probabilities)
    summary = _summary_of(window)
    if summary is None or width == 0:
        return
    counts = MulticlassCounts(width)
    sketch = window.sketch
    for vectors, labels in read_vectors(engine=engine, summary=summary, width=width, chunk_rows=chunk_rows):
        counts.add(profile, vectors, labels, sketch.errors)
    sketch.multiclass = counts
    window.labelled = counts.labelled


def _read_window(
    *,
    engine: Engine,
    profile: Profile,
    model_name: str,
    spec: WindowSpec,
    threshold: float,
    chunk_rows: int,
    now: datetime | None,
    cache: SketchCache | None,
    sampler: _Sampler,
) -> Window:
    if cache is not None:
        return _read_cached(
            sampler=sampler,
            cache=cache,
            reader=_BlockReader.of(
                engine=engine, profile=profile, threshold=threshold, chunk_rows=chunk_rows
            ),
            model_name=model_name,
            spec=spec,
            now=now,
        )
    summary = summarize_window(engine=engine, model_name=model_name, spec=spec, now=now)
    if summary is None:
        return _empty_window(model_name=model_name, spec=spec, threshold=threshold)
    sampler.start(summary)
    sketch = WindowSketch(threshold=threshold)
    count = 0
    # the labels are read apart, from the feedback alone, in one query (labels joined per range cost a
    # read of the range's labels each)
    numeric, categorical = _feature_names(profile)
    chunks = read_chunks(
        engine=engine,
        summary=summary,
        numeric=numeric,
        categorical=categorical,
        chunk_rows=chunk_rows,
        labels=False,
    )
    for chunk in chunks:
        add_chunk(sketch=sketch, profile=profile, chunk=chunk, labels=False)
        count += 1
    _add_labels(sketch=sketch, engine=engine, profile=profile, summary=summary, chunk_rows=chunk_rows)
    return _window(summary, sketch, count)


class _CacheUse(NamedTuple):
    """What a read with the sketch cache took from it: the blocks merged from stored counts, the blocks
    read (the edges, new or changed ones) and the wall seconds of each step."""

    cached: int
    counted: int
    seconds: dict[str, float]


class _Sketched(NamedTuple):
    """A window's sketch as :func:`_sketch_blocks` assembles it, its chunks read and its use of the cache."""

    sketch: WindowSketch
    chunks: int
    use: _CacheUse


def _empty_window(*, model_name: str, spec: WindowSpec, threshold: float) -> Window:
    """The window of a log that holds none of its rows."""
    return Window(
        model_name=model_name,
        spec=spec,
        rows=0,
        start=None,
        end=None,
        first_id=None,
        last_id=None,
        labelled=0,
        sketch=WindowSketch(threshold=threshold),
        reader=READER,
    )


def _window(
    summary: WindowSummary, sketch: WindowSketch, chunks: int, use: _CacheUse | None = None
) -> Window:
    return Window(
        model_name=summary.model_name,
        spec=summary.spec,
        rows=sketch.rows,
        start=summary.start,
        end=summary.end,
        first_id=summary.first_id,
        last_id=summary.last_id,
        labelled=sketch.labelled,
        sketch=sketch,
        reader=READER,
        since=summary.since,
        skip=summary.skip,
        chunks=chunks,
        cached_blocks=None if use is None else use.cached,
        counted_blocks=None if use is None else use.counted,
        cache_seconds=None if use is None else use.seconds,
    )


class _Counted(NamedTuple):
    """One block's rows counted into a sketch of their own (labels apart): the rows it was counted for,
    the sketch and the chunks read."""

    rows: int
    sketch: WindowSketch
    chunks: int


@dataclass(frozen=True)
class _EarlyBlock:
    """A block read and counted before the summary was known: its first and last id, and the count under
    way."""

    low: int
    high: int
    count: Future[_Counted]


@dataclass(frozen=True)
class _Blocks:
    """The window's aligned blocks of ``size`` batch ids, laid against its id range."""

    summary: WindowSummary
    size: int

    def sealed(self, st: BlockStat) -> bool:
        """Wholly inside the window: its every row is in it (so its counts may be stored)."""
        low, high = st.block * self.size, st.block * self.size + self.size - 1
        window = self.summary
        starts = window.first_id < low or (window.first_id == low and not window.skip)
        inside = starts and high <= window.last_id
        return inside and (window.since is None or st.oldest >= window.since)

    def span(self, st: BlockStat) -> tuple[int, int]:
        """The ids of the block inside the window's range."""
        low, high = st.block * self.size, st.block * self.size + self.size - 1
        return max(low, self.summary.first_id), min(high, self.summary.last_id)


@dataclass(frozen=True)
class _BlockReader:
    """Reads a window's rows block by block, without labels, and counts each block into a sketch of its own
    on ``profile``'s grids."""

    engine: Engine
    profile: Profile
    threshold: float
    chunk_rows: int
    numeric: list[str]
    categorical: list[str]

    @classmethod
    def of(cls, *, engine: Engine, profile: Profile, threshold: float, chunk_rows: int) -> _BlockReader:
        numeric, categorical = _feature_names(profile)
        return cls(engine, profile, threshold, chunk_rows, numeric=numeric, categorical=categorical)

    def read(self, summary: WindowSummary, *, low: int, high: int, rows: int) -> list[Chunk]:
        """The window's rows between two ids of one block."""
        return _read_block(
            engine=self.engine,
            summary=summary,
            low=low,
            high=high,
            rows=rows,
            numeric=self.numeric,
            categorical=self.categorical,
            chunk_rows=self.chunk_rows,
        )

    def read_block(self, blocks: _Blocks, st: BlockStat) -> list[Chunk]:
        """What the window holds of one block."""
        low, high = blocks.span(st)
        return self.read(blocks.summary, low=low, high=high, rows=st.rows)

    def count(self, chunks: list[Chunk], *, rows: int) -> _Counted:
        part = WindowSketch(threshold=self.threshold)
        for chunk in chunks:
            add_chunk(sketch=part, profile=self.profile, chunk=chunk, labels=False)
        return _Counted(rows=rows, sketch=part, chunks=len(chunks))

    def count_early(self, ids: WindowSummary, *, block_ids: int) -> _Counted:
        """One block's ids read as a window of their own (the summary is not known yet): its rows counted
        first, so that its ranges are cut as a read after the summary cuts them."""
        found = block_stats(engine=self.engine, summary=ids, block_ids=block_ids)
        rows = found[0].rows if found else 0
        if not rows:
            return _Counted(rows=0, sketch=WindowSketch(threshold=self.threshold), chunks=0)
        return self.count(self.read(ids, low=ids.first_id, high=ids.last_id, rows=rows), rows=rows)


def _read_cached(
    *,
    cache: SketchCache,
    reader: _BlockReader,
    model_name: str,
    spec: WindowSpec,
    now: datetime | None,
    sampler: _Sampler | None = None,
) -> Window:
    """:func:`read_window` with the sketch cache. The summary's index scan (a quarter of a second for a
    million rows) leaves a core idle, so the newest blocks the cache does not hold are read meanwhile,
    bounded by the newest id seen first; the summary is bounded by the same id."""
    engine = reader.engine
    now = now or datetime.now(UTC)  # one time bound for the early reads and the summary
    began = time.perf_counter()
    density = mean_size(engine=engine, model_name=model_name, spec=spec, now=now)
    cache = replace(cache, block_ids=block_span(cache.block_ids, density))
    key = _key(model_name, spec, reader.profile, reader.threshold, cache.block_ids)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dw-blocks") as pool:
        early: dict[int, _EarlyBlock] = {}
        top = newest_id(engine=engine, model_name=model_name, spec=spec, now=now)
        if top is not None and spec.minutes is None:  # (a time bound's first id is known only from the scan)
            early = _read_early(
                cache=cache, key=key, pool=pool, reader=reader, model_name=model_name, spec=spec, top=top
            )
        summary, stats = summarize_blocks(
            engine=engine, model_name=model_name, spec=spec, block_ids=cache.block_ids, now=now, upto=top
        )
        summarized = time.perf_counter() - began
        if summary is None:
            for block in early.values():
                block.count.cancel()
            return _empty_window(model_name=model_name, spec=spec, threshold=reader.threshold)
        if sampler is not None:
            sampler.start(summary)
        sketched = _sketch_blocks(
            cache=cache, key=key, stats=stats, summary=summary, reader=reader, pool=pool, early=early
        )
    sketched.use.seconds["summary_and_block_stats"] = round(summarized, 4)
    return _window(summary, sketched.sketch, sketched.chunks, sketched.use)


def _key(model_name: str, spec: WindowSpec, profile: Profile, threshold: float, block_ids: int) -> SketchKey:
    return SketchKey(
        model_name=model_name,
        version_filter=spec.version or 0,
        fingerprint=fingerprint(profile, float(threshold), SKETCH_FORMAT),
        block_ids=block_ids,
    )


def _feature_names(profile: Profile) -> tuple[list[str], list[str]]:
    numeric = [n for n, f in profile.features.items() if isinstance(f, NumericProfile)]
    categorical = [n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)]
    return numeric, categorical


def _read_block(
    *,
    engine: Engine,
    summary: WindowSummary,
    low: int,
    high: int,
    rows: int,
    numeric: list[str],
    categorical: list[str],
    chunk_rows: int,
) -> list[Chunk]:
    """The window's rows between two ids of one block, without labels."""
    return list(
        read_chunks(
            engine=engine,
            summary=narrow(summary, first_id=low, last_id=high, rows=rows),
            numeric=numeric,
            categorical=categorical,
            chunk_rows=chunk_rows,
            labels=False,
        )
    )


def _read_early(
    *,
    cache: SketchCache,
    key: SketchKey,
    pool: ThreadPoolExecutor,
    reader: _BlockReader,
    model_name: str,
    spec: WindowSpec,
    top: int,
) -> dict[int, _EarlyBlock]:
    """Start reading and counting, newest first, those of the last :data:`_EARLY_BLOCKS` blocks up to
    ``top`` that the cache does not hold and that lie wholly inside the window whatever its first id turns
    out to be (every run reads the newest, partial block; a cold run reads them all). Windows without a
    time bound only."""
    size = cache.block_ids
    newest = top // size
    lowest = 0 if spec.rows is None else top - spec.rows + 1  # the window's first id is at most this
    candidates = [b for b in range(newest, newest - _EARLY_BLOCKS, -1) if b >= 0 and b * size >= lowest]
    with Session(cache.engine) as session:
        stored = cached_blocks(session=session, key=key, blocks=candidates)
    early: dict[int, _EarlyBlock] = {}
    for block in candidates:
        if block in stored:
            continue
        low, high = block * size, min(block * size + size - 1, top)
        # the summary is not known yet: the ids are read as a window of their own (same filters)
        ids = WindowSummary(
            model_name=model_name,
            spec=spec,
            rows=high - low + 1,
            start=None,
            end=None,
            first_id=low,
            last_id=high,
            since=None,
        )
        early[block] = _EarlyBlock(
            low=low, high=high, count=pool.submit(reader.count_early, ids, block_ids=size)
        )
    return early


class _Clock:
    """Wall seconds per named step, each step timed from the end of the one before."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def step(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 4)
        self._last = now


@dataclass
class _BlockPlan:
    """How each block of the window is counted: from its stored counts (``cached``, in block order), from
    its count started early (``early``), or read now (``unread``, in block order)."""

    cached: list[int]
    early: dict[int, Future[_Counted]]
    unread: list[BlockStat]


def _plan_blocks(
    *,
    cache: SketchCache,
    key: SketchKey,
    stats: list[BlockStat],
    blocks: _Blocks,
    early: dict[int, _EarlyBlock],
) -> _BlockPlan:
    """Stored counts are taken for the sealed blocks whose row count and oldest ``logged_at`` are still those
    counted; a block read early is taken where it covers what the window holds of it (its rows are checked
    when counted); the other blocks are read. Early reads of blocks the cache holds after all (another run
    stored them meanwhile) are cancelled."""
    with Session(cache.engine) as session:
        stored = cached_blocks(
            session=session, key=key, blocks=[st.block for st in stats if blocks.sealed(st)]
        )
    cached = [
        st.block
        for st in stats
        if blocks.sealed(st)
        and (got := stored.get(st.block)) is not None
        and got.rows == st.rows
        and got.oldest == st.oldest
    ]
    taken = set(cached)
    uncached = [st for st in stats if st.block not in taken]
    ready: dict[int, Future[_Counted]] = {}
    for st in uncached:
        started = early.pop(st.block, None)
        if started is not None and (started.low, started.high) == blocks.span(st):
            ready[st.block] = started.count
    for unused in early.values():
        unused.count.cancel()
    return _BlockPlan(cached=cached, early=ready, unread=[st for st in uncached if st.block not in ready])


class _StoredCounts:
    """The stored counts of the blocks taken from the cache, fetched :data:`_FETCH_BLOCKS` blocks per query
    as the counting reaches them."""

    def __init__(self, *, cache: SketchCache, key: SketchKey, blocks: list[int], clock: _Clock) -> None:
        self.cache, self.key, self.blocks, self.clock = cache, key, blocks, clock
        self.valid = set(blocks)
        self.loaded: dict[int, bytes] = {}

    def take(self, block: int) -> bytes | None:
        """The block's stored counts; None when it is not taken from the cache, or was deleted meanwhile
        (another run pruned it): then it is counted again."""
        if block not in self.valid:
            return None
        if block not in self.loaded:
            at = self.blocks.index(block)
            with Session(self.cache.engine) as session:
                fetched = block_sketches(
                    session=session, key=self.key, blocks=self.blocks[at : at + _FETCH_BLOCKS]
                )
            self.loaded.update(fetched)
            self.clock.step("cache_fetch")
        return self.loaded.pop(block, None)


class _ReadAhead:
    """The blocks to read, each submitted to the pool :data:`_BLOCKS_AHEAD` blocks ahead of the counting."""

    def __init__(
        self, *, pool: ThreadPoolExecutor, reader: _BlockReader, blocks: _Blocks, unread: list[BlockStat]
    ) -> None:
        self.pool, self.reader, self.blocks, self.unread = pool, reader, blocks, unread
        self.pending: dict[int, Future[list[Chunk]]] = {}

    def fill(self) -> None:
        while self.unread and len(self.pending) < _BLOCKS_AHEAD:
            st = self.unread.pop(0)
            self.pending[st.block] = self.pool.submit(self.reader.read_block, self.blocks, st)

    def take(self, block: int) -> Future[list[Chunk]] | None:
        """The block's read under way, if it is one of those read ahead; the next block is submitted."""
        future = self.pending.pop(block, None)
        self.fill()
        return future


class _FreshBlocks:
    """Counts of sealed blocks to store, written :data:`_FETCH_BLOCKS` blocks at a time as they come, so that
    memory stays bounded on a cold run."""

    def __init__(self, *, cache: SketchCache, key: SketchKey) -> None:
        self.cache, self.key = cache, key
        self.blocks: list[CachedBlock] = []

    def add(self, st: BlockStat, part: WindowSketch) -> None:
        with contextlib.suppress(TypeError):  # a category that is no text: counted, never stored
            self.blocks.append(CachedBlock(st.block, st.rows, st.oldest, encode_counts(part)))
        if len(self.blocks) >= _FETCH_BLOCKS:
            with Session(self.cache.engine) as session, session.begin():
                store_blocks(session=session, key=self.key, blocks=self.blocks)
            self.blocks = []

    def close(self, *, prune_below: int) -> None:
        """Store what is left and delete the blocks older than the window's first."""
        with Session(self.cache.engine) as session, session.begin():
            store_blocks(session=session, key=self.key, blocks=self.blocks)
            prune_blocks(session=session, key=self.key, below=prune_below)


def _count_block(
    st: BlockStat, *, plan: _BlockPlan, ahead: _ReadAhead, reader: _BlockReader, blocks: _Blocks
) -> _Counted:
    """One block that the cache does not give: its early count when that saw the summary's row count (else
    a row was committed meanwhile: the block is read again, as the summary saw it), or what the window
    holds of it read (ahead, or now)."""
    future = ahead.take(st.block)
    early = plan.early.pop(st.block, None)
    if early is not None and (counted := early.result()).rows == st.rows:
        return counted
    chunks = future.result() if future is not None else reader.read_block(blocks, st)
    return reader.count(chunks, rows=st.rows)


def _sketch_blocks(
    *,
    cache: SketchCache,
    key: SketchKey,
    stats: list[BlockStat],
    summary: WindowSummary,
    reader: _BlockReader,
    pool: ThreadPoolExecutor,
    early: dict[int, _EarlyBlock],
) -> _Sketched:
    """The window's sketch block by block, stored counts merged where still valid, the blocks read early
    taken where they cover what the window holds of the block (:func:`_plan_blocks`)."""
    clock = _Clock()
    blocks = _Blocks(summary=summary, size=cache.block_ids)
    plan = _plan_blocks(cache=cache, key=key, stats=stats, blocks=blocks, early=early)
    clock.step("cache_fetch")
    stored = _StoredCounts(cache=cache, key=key, blocks=plan.cached, clock=clock)
    fresh = _FreshBlocks(cache=cache, key=key)
    # the blocks read early are counted first; the others are fetched one block ahead of the counting
    ahead = _ReadAhead(pool=pool, reader=reader, blocks=blocks, unread=plan.unread)
    ahead.fill()
    parts: dict[int, WindowSketch] = {}
    chunks = used = 0
    for st in sorted(stats, key=lambda st: st.block not in plan.early):  # stable: block order otherwise
        data = stored.take(st.block)
        if data is not None:
            parts[st.block] = decode_counts(data, threshold=reader.threshold)
            used += 1
            clock.step("cache_merge")
            continue
        counted = _count_block(st, plan=plan, ahead=ahead, reader=reader, blocks=blocks)
        parts[st.block] = counted.sketch
        chunks += counted.chunks
        # a row committed since the block's count (an older id) waits for the next run to be stored
        if blocks.sealed(st) and counted.sketch.rows == st.rows:
            fresh.add(st, counted.sketch)
        clock.step("read")
    total = WindowSketch(threshold=reader.threshold)
    for st in stats:  # merged in block order, whichever was counted first
        total = total.merge(parts.pop(st.block))
    clock.step("cache_merge")
    # labels arrive after their predictions: counted on every run, in id order, over the whole window
    _add_labels(
        sketch=total,
        engine=reader.engine,
        profile=reader.profile,
        summary=summary,
        chunk_rows=reader.chunk_rows,
    )
    clock.step("labels")
    fresh.close(prune_below=summary.first_id // cache.block_ids)
    clock.step("store")
    return _Sketched(
        sketch=total,
        chunks=chunks,
        use=_CacheUse(cached=used, counted=len(stats) - used, seconds=clock.seconds),
    )


def _add_labels(
    *, sketch: WindowSketch, engine: Engine, profile: Profile, summary: WindowSummary, chunk_rows: int
) -> None:
    """Count the window's labelled rows (PostgreSQL: one query, in id order) into ``sketch``."""
    if profile.prediction is None:
        return
    prob, label = labelled_arrays(engine=engine, summary=summary)
    for lo in range(0, prob.size, chunk_rows):
        sketch.add_labels(profile, prob[lo : lo + chunk_rows], label[lo : lo + chunk_rows])


def add_chunk(*, sketch: WindowSketch, profile: Profile, chunk: Chunk, labels: bool = True) -> WindowSketch:
    """Count one chunk into ``sketch`` (its labels only where present, and only with ``labels``)."""
    found = chunk.labels if labels and np.any(~np.isnan(chunk.labels)) else None
    before = sketch.rows
    sketch.update(profile, chunk.columns, predictions=chunk.predictions, labels=found)
    sketch.rows = before + chunk.rows  # counted here: the columns may hold only the numeric features
    sketch.sources.update(chunk.sources)
    for name, counts in chunk.category_counts.items():
        if isinstance(profile.features.get(name), CategoricalProfile):
            sketch.categorical.setdefault(name, Counter()).update(counts)
    return sketch
