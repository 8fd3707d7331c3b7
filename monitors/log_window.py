"""A model's window of the prediction log, read in chunks and folded into a :class:`WindowSketch`.

The reading (which rows, the reader's performance design) belongs to the log's owner, behind one interface:
:class:`predictions.windows.WindowReader`. Here each chunk is counted on the reference profile's grids and
dropped, so memory is bounded by the chunk size plus the profile, never by the window. With a
:class:`SketchCache` the window is read block by block and the counts of its sealed blocks are kept
(:mod:`monitors.sketch_cache`); the pieces both reads share are in :mod:`monitors.log_sketch`. A window's
uniform row sample (root cause analysis) is read on a thread of its own meanwhile.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

import numpy as np
from sqlalchemy import Engine

from monitors.log_sketch import Window, add_chunk, add_labels, empty_window, feature_names, window_of
from monitors.profile import Profile
from monitors.rows import RowSample, uniform_positions
from monitors.sketch import MulticlassCounts, WindowSketch
from monitors.sketch_cache import BlockReader, SketchCache, block_span, read_cached
from predictions.windows import WindowReader, WindowSpec, WindowSummary
from registry.schema import Task

__all__ = ["SketchCache", "Window", "block_span", "read_window", "read_window_sample", "sample_seed"]


def read_window(
    *,
    engine: Engine,
    profile: Profile,
    model_name: str,
    spec: WindowSpec,
    threshold: float = 0.5,
    chunk_rows: int = WindowReader.CHUNK_ROWS,
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
    log = WindowReader(engine)
    sampler = _Sampler(log=log, profile=profile, rows=sample_rows)
    try:
        window = _read_window(
            log=log,
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
            _add_vectors(log=log, profile=profile, window=window, chunk_rows=chunk_rows)
        window.sample = sampler.result()
    finally:
        sampler.close()
    return window


class _Sampler:
    """A window's row sample, read on its own thread once the window's summary is known (:meth:`start`)."""

    def __init__(self, *, log: WindowReader, profile: Profile, rows: int) -> None:
        self.log, self.profile, self.rows = log, profile, rows
        self.pool: ThreadPoolExecutor | None = None
        self.future: Future[RowSample | None] | None = None

    def start(self, summary: WindowSummary) -> None:
        """Begin reading the sample of the window ``summary`` describes (nothing without ``rows``)."""
        if self.rows <= 0 or self.future is not None:
            return
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dw-sample")
        self.future = self.pool.submit(
            _sample_of, log=self.log, profile=self.profile, summary=summary, rows=self.rows
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
    return _sample_of(log=WindowReader(engine), profile=profile, summary=summary, rows=rows)


def _sample_of(*, log: WindowReader, profile: Profile, summary: WindowSummary, rows: int) -> RowSample:
    """:func:`read_window_sample` of the window ``summary`` describes."""
    numeric, categorical = feature_names(profile)
    width = len(profile.class_probabilities) if profile.task is Task.MULTICLASS else None
    got = log.sample(
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


def _add_vectors(*, log: WindowReader, profile: Profile, window: Window, chunk_rows: int) -> None:
    """Count a multi-class window's vectors and labels into its sketch (``MulticlassCounts``)."""
    width = len(profile.class_probabilities)
    summary = _summary_of(window)
    if summary is None or width == 0:
        return
    counts = MulticlassCounts(width)
    sketch = window.sketch
    for vectors, labels in log.vectors(summary=summary, width=width, chunk_rows=chunk_rows):
        counts.add(profile, vectors, labels, sketch.errors)
    sketch.multiclass = counts
    window.labelled = counts.labelled


def _read_window(
    *,
    log: WindowReader,
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
        return read_cached(
            on_summary=sampler.start,
            cache=cache,
            reader=BlockReader.of(log=log, profile=profile, threshold=threshold, chunk_rows=chunk_rows),
            model_name=model_name,
            spec=spec,
            now=now,
        )
    summary = log.summarize(model_name=model_name, spec=spec, now=now)
    if summary is None:
        return empty_window(model_name=model_name, spec=spec, threshold=threshold)
    sampler.start(summary)
    sketch = WindowSketch(threshold=threshold)
    count = 0
    # the labels are read apart, from the feedback alone, in one query (labels joined per range cost a
    # read of the range's labels each)
    numeric, categorical = feature_names(profile)
    chunks = log.chunks(
        summary=summary,
        numeric=numeric,
        categorical=categorical,
        chunk_rows=chunk_rows,
        labels=False,
    )
    for chunk in chunks:
        add_chunk(sketch=sketch, profile=profile, chunk=chunk, labels=False)
        count += 1
    add_labels(sketch=sketch, log=log, profile=profile, summary=summary, chunk_rows=chunk_rows)
    return window_of(summary, sketch, count)
