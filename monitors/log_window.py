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
import math
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.service import (
    CachedBlock,
    SketchKey,
    block_sketches,
    cached_blocks,
    prune_blocks,
    store_blocks,
)
from monitors.window import (
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
) -> Window:
    """Read one model's window from the prediction log in chunks and sketch it on ``profile``'s grids
    (``cache``: merge the stored counts of sealed blocks); a multi-class
    model's probability vectors and their labels are read apart, in id order (:func:`_add_vectors`)."""
    window = _read_window(
        engine=engine,
        profile=profile,
        model_name=model_name,
        spec=spec,
        threshold=threshold,
        chunk_rows=chunk_rows,
        now=now,
        cache=cache,
    )
    if profile.task is Task.MULTICLASS:
        _add_vectors(engine=engine, profile=profile, window=window, chunk_rows=chunk_rows)
    return window


def _add_vectors(*, engine: Engine, profile: Profile, window: Window, chunk_rows: int) -> None:
    """Count a multi-class window's vectors and labels into its sketch (``MulticlassCounts``)."""
    width = len(profile.class_probabilities)
    if window.first_id is None or window.last_id is None or not window.rows or width == 0:
        return
    # the window's rows: its id range, answered, of its model (and version), logged since its first row
    summary = WindowSummary(
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
) -> Window:
    sketch = WindowSketch(threshold=threshold)
    if cache is not None:
        return _read_cached(
            engine=engine,
            cache=cache,
            profile=profile,
            model_name=model_name,
            spec=spec,
            threshold=threshold,
            chunk_rows=chunk_rows,
            now=now,
        )
    summary = summarize_window(engine=engine, model_name=model_name, spec=spec, now=now)
    if summary is None:
        return Window(model_name, spec, 0, None, None, None, None, 0, sketch, READER)
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


def _window(
    summary: WindowSummary,
    sketch: WindowSketch,
    chunks: int,
    blocks: tuple[int, int, dict[str, float]] | None = None,
) -> Window:
    return Window(
        model_name=summary.model_name,
        spec=summary.spec,
        rows=sketch.rows,
        start=summary.start,
        end=summary.end,
        first_id=summary.first_id,
        last_id=summary.last_id,
        labelled=sketch.labels.rows,
        sketch=sketch,
        reader=READER,
        since=summary.since,
        skip=summary.skip,
        chunks=chunks,
        cached_blocks=None if blocks is None else blocks[0],
        counted_blocks=None if blocks is None else blocks[1],
        cache_seconds=None if blocks is None else blocks[2],
    )


_Early = dict[int, tuple[int, int, "Future[tuple[int, WindowSketch, int]]"]]
"""Blocks read and counted before the summary was known: block -> (first id, last id, (its rows, its
counts, the chunks read))."""


def _read_cached(
    *,
    engine: Engine,
    cache: SketchCache,
    profile: Profile,
    model_name: str,
    spec: WindowSpec,
    threshold: float,
    chunk_rows: int,
    now: datetime | None,
) -> Window:
    """:func:`read_window` with the sketch cache. The summary's index scan (a quarter of a second for a
    million rows) leaves a core idle, so the newest blocks the cache does not hold are read meanwhile,
    bounded by the newest id seen first; the summary is bounded by the same id."""
    now = now or datetime.now(UTC)  # one time bound for the early reads and the summary
    began = time.perf_counter()
    density = mean_size(engine=engine, model_name=model_name, spec=spec, now=now)
    cache = replace(cache, block_ids=block_span(cache.block_ids, density))
    key = _key(model_name, spec, profile, threshold, cache.block_ids)
    numeric, categorical = _feature_names(profile)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dw-blocks") as pool:
        early: _Early = {}
        top = newest_id(engine=engine, model_name=model_name, spec=spec, now=now)
        if top is not None and spec.minutes is None:  # (a time bound's first id is known only from the scan)
            early = _read_early(
                engine=engine,
                cache=cache,
                key=key,
                pool=pool,
                profile=profile,
                threshold=threshold,
                model_name=model_name,
                spec=spec,
                top=top,
                numeric=numeric,
                categorical=categorical,
                chunk_rows=chunk_rows,
            )
        summary, stats = summarize_blocks(
            engine=engine, model_name=model_name, spec=spec, block_ids=cache.block_ids, now=now, upto=top
        )
        summarized = time.perf_counter() - began
        if summary is None:
            for _, _, future in early.values():
                future.cancel()
            empty = WindowSketch(threshold=threshold)
            return Window(model_name, spec, 0, None, None, None, None, 0, empty, READER)
        sketch, count, blocks = _sketch_blocks(
            engine=engine,
            cache=cache,
            key=key,
            stats=stats,
            profile=profile,
            summary=summary,
            threshold=threshold,
            chunk_rows=chunk_rows,
            pool=pool,
            early=early,
        )
    blocks[2]["summary_and_block_stats"] = round(summarized, 4)
    return _window(summary, sketch, count, blocks)


def _key(model_name: str, spec: WindowSpec, profile: Profile, threshold: float, block_ids: int) -> SketchKey:
    return SketchKey(
        model_name=model_name,
        version_filter=spec.version or 0,
        fingerprint=fingerprint(profile, float(threshold)),
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


def _counted(chunks: list[Chunk], *, profile: Profile, threshold: float) -> tuple[WindowSketch, int]:
    """One block's chunks counted into a sketch of their own (labels apart), and how many there were."""
    part = WindowSketch(threshold=threshold)
    for chunk in chunks:
        add_chunk(sketch=part, profile=profile, chunk=chunk, labels=False)
    return part, len(chunks)


def _read_early(
    *,
    engine: Engine,
    cache: SketchCache,
    key: SketchKey,
    pool: ThreadPoolExecutor,
    profile: Profile,
    threshold: float,
    model_name: str,
    spec: WindowSpec,
    top: int,
    numeric: list[str],
    categorical: list[str],
    chunk_rows: int,
) -> _Early:
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
    early: _Early = {}
    for block in candidates:
        if block in stored:
            continue
        low, high = block * size, min(block * size + size - 1, top)
        # the summary is not known yet: the ids are read as a window of their own (same filters)
        ids = WindowSummary(model_name, spec, high - low + 1, None, None, low, high, None)

        def read(ids: WindowSummary = ids) -> tuple[int, WindowSketch, int]:
            # its rows counted first, so that its ranges are cut as a read after the summary cuts them
            found = block_stats(engine=engine, summary=ids, block_ids=size)
            rows = found[0].rows if found else 0
            if not rows:
                return 0, WindowSketch(threshold=threshold), 0
            chunks = _read_block(
                engine=engine,
                summary=ids,
                low=ids.first_id,
                high=ids.last_id,
                rows=rows,
                numeric=numeric,
                categorical=categorical,
                chunk_rows=chunk_rows,
            )
            return (rows, *_counted(chunks, profile=profile, threshold=threshold))

        early[block] = (low, high, pool.submit(read))
    return early


def _sketch_blocks(
    *,
    engine: Engine,
    cache: SketchCache,
    key: SketchKey,
    stats: list[BlockStat],
    profile: Profile,
    summary: WindowSummary,
    threshold: float,
    chunk_rows: int,
    pool: ThreadPoolExecutor,
    early: _Early,
) -> tuple[WindowSketch, int, tuple[int, int, dict[str, float]]]:
    """The window's sketch block by block, stored counts merged where still valid, the blocks read early
    taken where they cover what the window holds of the block; returns the sketch, the chunks read and
    (blocks from the cache, blocks read, wall seconds per step)."""
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def step(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = round(seconds.get(name, 0.0) + now - clock, 4)
        clock = now

    size = cache.block_ids

    def sealed(st: BlockStat) -> bool:  # wholly inside the window: its every row is in it
        low, high = st.block * size, st.block * size + size - 1
        starts = summary.first_id < low or (summary.first_id == low and not summary.skip)
        inside = starts and high <= summary.last_id
        return inside and (summary.since is None or st.oldest >= summary.since)

    with Session(cache.engine) as session:
        stored = cached_blocks(session=session, key=key, blocks=[st.block for st in stats if sealed(st)])
    step("cache_fetch")
    valid = [
        st.block
        for st in stats
        if sealed(st)
        and (got := stored.get(st.block)) is not None
        and got.rows == st.rows
        and got.oldest == st.oldest
    ]
    valid_set = set(valid)
    loaded: dict[int, bytes] = {}

    def counts_of(block: int) -> bytes | None:  # the stored counts, _FETCH_BLOCKS valid blocks per query
        if block not in valid_set:
            return None
        if block not in loaded:
            at = valid.index(block)
            with Session(cache.engine) as session:
                loaded.update(block_sketches(session=session, key=key, blocks=valid[at : at + _FETCH_BLOCKS]))
            step("cache_fetch")
        return loaded.pop(block, None)  # None: deleted meanwhile (another run pruned it): counted again

    numeric, categorical = _feature_names(profile)

    def span(st: BlockStat) -> tuple[int, int]:  # the ids of the block inside the window's range
        return max(st.block * size, summary.first_id), min(st.block * size + size - 1, summary.last_id)

    def read_block(st: BlockStat) -> list[Chunk]:  # the block's rows in the window, without labels
        low, high = span(st)
        return _read_block(
            engine=engine,
            summary=summary,
            low=low,
            high=high,
            rows=st.rows,
            numeric=numeric,
            categorical=categorical,
            chunk_rows=chunk_rows,
        )

    unread = [st for st in stats if st.block not in valid_set]
    # blocks read early that cover what the window holds of them (their rows are checked when counted)
    ready: dict[int, Future[tuple[int, WindowSketch, int]]] = {}
    for st in unread:
        started = early.pop(st.block, None)
        if started is not None and (started[0], started[1]) == span(st):
            ready[st.block] = started[2]
    for _, _, unused in early.values():  # cached after all (another run stored it meanwhile): not needed
        unused.cancel()
    unread = [st for st in unread if st.block not in ready]
    parts: dict[int, WindowSketch] = {}
    fresh: list[CachedBlock] = []
    chunks = used = 0
    # the blocks read early are counted first; the others are fetched one block ahead of the counting
    ahead: dict[int, Future[list[Chunk]]] = {}

    def fetch_next() -> None:
        while unread and len(ahead) < _BLOCKS_AHEAD:
            st = unread.pop(0)
            ahead[st.block] = pool.submit(read_block, st)

    fetch_next()
    for st in sorted(stats, key=lambda st: st.block not in ready):  # stable: block order otherwise
        whole = sealed(st)
        data = counts_of(st.block)
        if data is not None:
            parts[st.block] = decode_counts(data, threshold=threshold)
            used += 1
            step("cache_merge")
            continue
        future = ahead.pop(st.block, None)
        fetch_next()
        counted: WindowSketch | None = None
        if st.block in ready:
            rows, counted, early_chunks = ready.pop(st.block).result()
            if rows != st.rows:  # a row committed meanwhile: the block is read again, as the summary saw it
                counted = None
            else:
                chunks += early_chunks
        if counted is None:
            counted, read = _counted(
                future.result() if future is not None else read_block(st),
                profile=profile,
                threshold=threshold,
            )
            chunks += read
        part = parts[st.block] = counted
        fetch_next()
        # a row committed since the block's count (an older id) waits for the next run to be stored
        if whole and part.rows == st.rows:
            with contextlib.suppress(TypeError):  # a category that is no text: counted, never stored
                fresh.append(CachedBlock(st.block, st.rows, st.oldest, encode_counts(part)))
            if len(fresh) >= _FETCH_BLOCKS:  # stored as they come: memory stays bounded on a cold run
                with Session(cache.engine) as session, session.begin():
                    store_blocks(session=session, key=key, blocks=fresh)
                fresh = []
        step("read")
    total = WindowSketch(threshold=threshold)
    for st in stats:  # merged in block order, whichever was counted first
        total = total.merge(parts.pop(st.block))
    step("cache_merge")
    # labels arrive after their predictions: counted on every run, in id order, over the whole window
    _add_labels(sketch=total, engine=engine, profile=profile, summary=summary, chunk_rows=chunk_rows)
    step("labels")
    with Session(cache.engine) as session, session.begin():
        store_blocks(session=session, key=key, blocks=fresh)
        prune_blocks(session=session, key=key, below=summary.first_id // size)
    step("store")
    return total, chunks, (used, len(stats) - used, seconds)


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
    for name, counts in chunk.category_counts.items():
        if isinstance(profile.features.get(name), CategoricalProfile):
            sketch.categorical.setdefault(name, Counter()).update(counts)
    return sketch
