"""A model's window of the prediction log, read in chunks and folded into a :class:`WindowSketch`.

The reading (which rows, both readers, their performance design) belongs to the log's owner:
:mod:`predictions.windows`. Here each chunk is counted on the reference profile's grids and dropped, so
memory is bounded by the chunk size plus the profile, never by the window.

On PostgreSQL with a :class:`SketchCache` (the default of ``run_monitor``: setting ``monitor_sketch_cache``),
the id axis is cut into aligned blocks of ``block_ids`` ids; a block lying wholly inside the window is
counted once and its counts kept in ``monitor_window_sketches`` (:mod:`monitors.service`), and later runs
merge the stored counts while the log still shows the block's row count and oldest ``logged_at`` (an
index-only query per run, with the window's summary: :func:`predictions.windows.summarize_blocks`). Only
new or changed blocks and the window's edges are read; the labels (feedback arrives later) and the ordered
error stream are read on every run from the labelled rows of the whole window. See docs/monitoring.md,
"The sketch cache".

With the ``aggregate`` reader (PostgreSQL) the counts come from the database instead
(:mod:`predictions.aggregates`) and are put into the same sketch (:func:`sketch_aggregate`); only the
PCA error (a sample of rows) and the labelled error stream (streamed in id order) read rows.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from monitors.binning import GridCounts
from monitors.drift.multivariate import pca_error_counts
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.service import (
    CachedBlock,
    SketchKey,
    block_sketches,
    cached_blocks,
    prune_blocks,
    store_blocks,
)
from monitors.window import LabelCounts, WindowSketch, decode_counts, encode_counts, fingerprint
from predictions import aggregates
from predictions.windows import (
    CHUNK_ROWS,
    BlockStat,
    Chunk,
    Reader,
    WindowSpec,
    WindowSummary,
    choose_reader,
    narrow,
    read_chunks,
    summarize_blocks,
    summarize_window,
)

_FETCH_BLOCKS = 16  # stored blocks read or written per query (about 0.5 MB each: 25 features, fine grids)
_BLOCKS_AHEAD = 1  # blocks fetched ahead of the counting (each also prefetches its ranges: two queries)


@dataclass(frozen=True)
class SketchCache:
    """Where the counts of sealed blocks are kept (the primary database, even when the window is read from a
    replica) and the block size in ids."""

    engine: Engine
    block_ids: int = 65_536


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
    reader: Reader | str = Reader.AUTO,
    now: datetime | None = None,
    cache: SketchCache | None = None,
) -> Window:
    """Read one model's window from the prediction log in chunks and sketch it on ``profile``'s grids
    (``cache``: with the PostgreSQL row readers, merge the stored counts of sealed blocks)."""
    chosen = choose_reader(engine=engine, reader=reader)
    sketch = WindowSketch(threshold=threshold)
    cached = cache if cache is not None and chosen in (Reader.TYPED, Reader.BLOCKS) else None
    began = time.perf_counter()
    stats: list[BlockStat] = []
    if cached is not None:  # the summary and the blocks' statistics (one query without a time bound)
        summary, stats = summarize_blocks(
            engine=engine, model_name=model_name, spec=spec, block_ids=cached.block_ids, now=now
        )
    else:
        summary = summarize_window(engine=engine, model_name=model_name, spec=spec, now=now)
    summarized = time.perf_counter() - began
    if summary is None:
        return Window(model_name, spec, 0, None, None, None, None, 0, sketch, chosen.value)
    count = 0
    blocks: tuple[int, int, dict[str, float]] | None = None
    if cached is not None:
        sketch, count, blocks = _sketch_blocks(
            engine=engine,
            cache=cached,
            stats=stats,
            profile=profile,
            summary=summary,
            threshold=threshold,
            chunk_rows=chunk_rows,
            reader=chosen,
        )
        blocks[2]["summary_and_block_stats"] = round(summarized, 4)
    elif chosen is Reader.AGGREGATE:  # counted inside the database: no chunks
        sketch = sketch_aggregate(
            engine=engine, profile=profile, summary=summary, threshold=threshold, chunk_rows=chunk_rows
        )
    else:
        # PostgreSQL's row readers leave the labels to one query of their own (labels joined per range
        # cost a scan of the window's labels each); the generic reader (SQLite) joins them row by row
        apart = chosen in (Reader.TYPED, Reader.BLOCKS)
        chunks = read_chunks(
            engine=engine,
            summary=summary,
            numeric=[n for n, f in profile.features.items() if isinstance(f, NumericProfile)],
            categorical=[n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)],
            chunk_rows=chunk_rows,
            reader=chosen,
            labels=not apart,
        )
        for chunk in chunks:
            add_chunk(sketch=sketch, profile=profile, chunk=chunk, labels=not apart)
            count += 1
        if apart:
            _add_labels(sketch=sketch, engine=engine, profile=profile, summary=summary, chunk_rows=chunk_rows)
    return Window(
        model_name=model_name,
        spec=spec,
        rows=sketch.rows,
        start=summary.start,
        end=summary.end,
        first_id=summary.first_id,
        last_id=summary.last_id,
        labelled=sketch.labels.rows,
        sketch=sketch,
        reader=chosen.value,
        chunks=count,
        cached_blocks=None if blocks is None else blocks[0],
        counted_blocks=None if blocks is None else blocks[1],
        cache_seconds=None if blocks is None else blocks[2],
    )


def _sketch_blocks(
    *,
    engine: Engine,
    cache: SketchCache,
    stats: list[BlockStat],
    profile: Profile,
    summary: WindowSummary,
    threshold: float,
    chunk_rows: int,
    reader: Reader,
) -> tuple[WindowSketch, int, tuple[int, int, dict[str, float]]]:
    """The window's sketch block by block, stored counts merged where still valid; returns the sketch, the
    chunks read and (blocks from the cache, blocks read, wall seconds per step)."""
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def step(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = round(seconds.get(name, 0.0) + now - clock, 4)
        clock = now

    size = cache.block_ids
    key = SketchKey(
        model_name=summary.model_name,
        version_filter=summary.spec.version or 0,
        fingerprint=fingerprint(profile, float(threshold)),
        block_ids=size,
    )

    def sealed(st: BlockStat) -> bool:  # wholly inside the window: its every row is in it
        low, high = st.block * size, st.block * size + size - 1
        inside = summary.first_id <= low and high <= summary.last_id
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

    numeric = [n for n, f in profile.features.items() if isinstance(f, NumericProfile)]
    categorical = [n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)]

    def read_block(st: BlockStat) -> list[Chunk]:  # the block's rows in the window, without labels
        low = max(st.block * size, summary.first_id)
        high = min(st.block * size + size - 1, summary.last_id)
        return list(
            read_chunks(
                engine=engine,
                summary=narrow(summary, first_id=low, last_id=high, rows=st.rows),
                numeric=numeric,
                categorical=categorical,
                chunk_rows=chunk_rows,
                reader=reader,
                labels=False,
            )
        )

    total = WindowSketch(threshold=threshold)
    fresh: list[CachedBlock] = []
    chunks = used = 0
    # the blocks to read are fetched one block ahead of the counting (a cold run reads every block)
    unread = [st for st in stats if st.block not in valid_set]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dw-blocks") as pool:
        ahead: dict[int, Future[list[Chunk]]] = {}

        def fetch_next() -> None:
            while unread and len(ahead) < _BLOCKS_AHEAD:
                st = unread.pop(0)
                ahead[st.block] = pool.submit(read_block, st)

        fetch_next()
        for st in stats:
            whole = sealed(st)
            data = counts_of(st.block)
            if data is not None:
                part = decode_counts(data, threshold=threshold)
                used += 1
                step("cache_merge")
            else:
                future = ahead.pop(st.block, None)
                fetch_next()
                part = WindowSketch(threshold=threshold)
                for chunk in future.result() if future is not None else read_block(st):
                    add_chunk(sketch=part, profile=profile, chunk=chunk, labels=False)
                    chunks += 1
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
            total = total.merge(part)
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
    prob, label = aggregates.labelled_arrays(engine=engine, summary=summary)
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


def _grid(feature: NumericProfile) -> aggregates.Grid:
    return aggregates.Grid(points=feature.grid, low=feature.allowed_min, high=feature.allowed_max)


def sketch_aggregate(
    *,
    engine: Engine,
    profile: Profile,
    summary: WindowSummary,
    threshold: float = 0.5,
    chunk_rows: int = CHUNK_ROWS,
    sample_rows: int = aggregates.SAMPLE_ROWS,
) -> WindowSketch:
    """A window's sketch from counts aggregated in PostgreSQL, plus the PCA error of a sample of rows
    (at most about ``sample_rows``) and the labelled error stream read in id order."""
    numeric = {n: _grid(f) for n, f in profile.features.items() if isinstance(f, NumericProfile)}
    categorical = [n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)]
    agg = aggregates.aggregate_window(
        engine=engine,
        summary=summary,
        numeric=numeric,
        categorical=categorical,
        prediction=_grid(profile.prediction) if profile.prediction is not None else None,
        threshold=threshold,
        labels=profile.prediction is not None,
    )
    sketch = WindowSketch(rows=agg.rows, threshold=threshold)
    for name, cells in agg.numeric.items():
        sketch.numeric[name] = GridCounts(
            cells=cells.cells, sums=cells.sums, missing=cells.missing, outside=cells.outside
        )
    for name, counts in agg.categorical.items():
        sketch.categorical[name] = counts
    if agg.prediction is not None:
        pred = agg.prediction
        sketch.prediction = GridCounts(
            cells=pred.cells, sums=pred.sums, missing=pred.missing, outside=pred.outside
        )
    if agg.labelled:
        tp, fp, fn, tn = agg.confusion
        sketch.labels = LabelCounts(
            rows=agg.labelled,
            true_pos=tp,
            false_pos=fp,
            false_neg=fn,
            true_neg=tn,
            positive_cells=agg.positive,
            negative_cells=agg.negative,
        )
        stream = aggregates.labelled_rows(engine=engine, summary=summary, chunk_rows=chunk_rows)
        for prob, label in stream:
            ok = ~np.isnan(label) & ~np.isnan(prob)
            sketch.errors.update(np.abs(label[ok].astype(bool).astype(np.float64) - prob[ok]))
    pca = profile.multivariate
    if pca is not None and all(f in numeric for f in pca.features):
        sample = aggregates.sample_chunks(
            engine=engine,
            summary=summary,
            numeric=list(pca.features),
            sample_rows=sample_rows,
            chunk_rows=chunk_rows,
        )
        for chunk in sample:
            err = pca_error_counts(chunk.columns, pca)
            sketch.pca_error = err if sketch.pca_error is None else sketch.pca_error.merge(err)
    return sketch
