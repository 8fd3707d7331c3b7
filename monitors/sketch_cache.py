"""The sketch cache: a window read block by block, the counts of its sealed blocks kept and merged.

On PostgreSQL with a :class:`SketchCache` (the default of ``run_monitor``: setting ``monitor_sketch_cache``),
the batch id axis is cut into aligned blocks of about ``block_ids`` predictions (:func:`block_span`); a block
lying wholly inside the window (:meth:`predictions.windows.WindowSummary.holds_block`) is counted once and its
counts kept in ``monitor_window_sketches`` (:mod:`monitors.service`), and later runs merge the stored counts
while the log still shows the block's row count and oldest ``logged_at`` (an index-only query per run, with
the window's summary: :meth:`predictions.windows.WindowReader.plan`; while it runs, the newest blocks the
cache lacks are already read and counted, see :func:`_read_early`). Only new or changed blocks and the
window's edges are read; the labels (feedback arrives later) and the ordered error stream are read on every
run from the labelled rows of the whole window. See docs/monitoring.md, "The sketch cache".
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import NamedTuple

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from monitors.log_sketch import (
    CacheUse,
    Window,
    add_chunk,
    add_labels,
    empty_window,
    feature_names,
    window_of,
)
from monitors.profile import Profile
from monitors.service import (
    CachedBlock,
    SketchKey,
    block_sketches,
    cached_blocks,
    prune_blocks,
    store_blocks,
)
from monitors.sketch import SKETCH_FORMAT, WindowSketch, decode_counts, encode_counts, fingerprint
from predictions.windows import BlockStat, Chunk, WindowReader, WindowSpec, WindowSummary

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


class _Sketched(NamedTuple):
    """A window's sketch as :func:`_sketch_blocks` assembles it, its chunks read and its use of the cache."""

    sketch: WindowSketch
    chunks: int
    use: CacheUse


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
        return self.summary.holds_block(st.block, self.size, st.oldest)

    def span(self, st: BlockStat) -> tuple[int, int]:
        """The ids of the block inside the window's range."""
        return self.summary.block_span(st.block, self.size)


@dataclass(frozen=True)
class BlockReader:
    """Reads a window's rows block by block, without labels, and counts each block into a sketch of its own
    on ``profile``'s grids."""

    log: WindowReader
    profile: Profile
    threshold: float
    chunk_rows: int
    numeric: list[str]
    categorical: list[str]

    @classmethod
    def of(cls, *, log: WindowReader, profile: Profile, threshold: float, chunk_rows: int) -> BlockReader:
        numeric, categorical = feature_names(profile)
        return cls(log, profile, threshold, chunk_rows, numeric=numeric, categorical=categorical)

    def read(self, summary: WindowSummary, *, low: int, high: int, rows: int) -> list[Chunk]:
        """The window's rows between two ids of one block, without labels."""
        chunks = self.log.chunks(
            summary=summary,
            numeric=self.numeric,
            categorical=self.categorical,
            chunk_rows=self.chunk_rows,
            labels=False,
            ids=(low, high, rows),
        )
        return list(chunks)

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
        found = self.log.blocks(summary=ids, block_ids=block_ids)
        rows = found[0].rows if found else 0
        if not rows:
            return _Counted(rows=0, sketch=WindowSketch(threshold=self.threshold), chunks=0)
        return self.count(self.read(ids, low=ids.first_id, high=ids.last_id, rows=rows), rows=rows)


def read_cached(
    *,
    cache: SketchCache,
    reader: BlockReader,
    model_name: str,
    spec: WindowSpec,
    now: datetime | None,
    on_summary: Callable[[WindowSummary], None] | None = None,
) -> Window:
    """:func:`read_window` with the sketch cache. The summary's index scan (a quarter of a second for a
    million rows) leaves a core idle, so the newest blocks the cache does not hold are read meanwhile,
    bounded by the newest id seen first; the summary is bounded by the same id (``on_summary``: called with
    it as soon as it is known)."""
    log = reader.log
    now = now or datetime.now(UTC)  # one time bound for the early reads and the summary
    began = time.perf_counter()
    density = log.mean_size(model_name=model_name, spec=spec, now=now)
    cache = replace(cache, block_ids=block_span(cache.block_ids, density))
    key = _key(model_name, spec, reader.profile, reader.threshold, cache.block_ids)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dw-blocks") as pool:
        early: dict[int, _EarlyBlock] = {}
        top = log.newest_id(model_name=model_name, spec=spec, now=now)
        if top is not None and spec.minutes is None:  # (a time bound's first id is known only from the scan)
            early = _read_early(
                cache=cache, key=key, pool=pool, reader=reader, model_name=model_name, spec=spec, top=top
            )
        summary, stats = log.plan(
            model_name=model_name, spec=spec, block_ids=cache.block_ids, now=now, upto=top
        )
        summarized = time.perf_counter() - began
        if summary is None:
            for block in early.values():
                block.count.cancel()
            return empty_window(model_name=model_name, spec=spec, threshold=reader.threshold)
        if on_summary is not None:
            on_summary(summary)
        sketched = _sketch_blocks(
            cache=cache, key=key, stats=stats, summary=summary, reader=reader, pool=pool, early=early
        )
    sketched.use.seconds["summary_and_block_stats"] = round(summarized, 4)
    return window_of(summary, sketched.sketch, sketched.chunks, sketched.use)


def _key(model_name: str, spec: WindowSpec, profile: Profile, threshold: float, block_ids: int) -> SketchKey:
    return SketchKey(
        model_name=model_name,
        version_filter=spec.version or 0,
        fingerprint=fingerprint(profile, float(threshold), SKETCH_FORMAT),
        block_ids=block_ids,
    )


def _read_early(
    *,
    cache: SketchCache,
    key: SketchKey,
    pool: ThreadPoolExecutor,
    reader: BlockReader,
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
        ids = WindowSummary.of_ids(model_name=model_name, spec=spec, low=low, high=high)
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
        self, *, pool: ThreadPoolExecutor, reader: BlockReader, blocks: _Blocks, unread: list[BlockStat]
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
    st: BlockStat, *, plan: _BlockPlan, ahead: _ReadAhead, reader: BlockReader, blocks: _Blocks
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
    reader: BlockReader,
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
    add_labels(
        sketch=total,
        log=reader.log,
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
        use=CacheUse(cached=used, counted=len(stats) - used, seconds=clock.seconds),
    )
