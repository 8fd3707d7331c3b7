"""A window of the log as the monitors hold it (:class:`Window`: its sketch and where it lies) and the
counting of its chunks and labels into that sketch, shared by the plain read (:mod:`monitors.log_window`)
and the sketch cache (:mod:`monitors.sketch_cache`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from core.times import iso_or_none
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.rows import RowSample
from monitors.sketch import WindowSketch
from predictions.windows import Chunk, WindowReader, WindowSpec, WindowSummary


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


class CacheUse(NamedTuple):
    """What a read with the sketch cache took from it: the blocks merged from stored counts, the blocks
    read (the edges, new or changed ones) and the wall seconds of each step."""

    cached: int
    counted: int
    seconds: dict[str, float]


def empty_window(*, model_name: str, spec: WindowSpec, threshold: float) -> Window:
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
        reader=WindowReader.NAME,
    )


def window_of(
    summary: WindowSummary, sketch: WindowSketch, chunks: int, use: CacheUse | None = None
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
        reader=WindowReader.NAME,
        since=summary.since,
        skip=summary.skip,
        chunks=chunks,
        cached_blocks=None if use is None else use.cached,
        counted_blocks=None if use is None else use.counted,
        cache_seconds=None if use is None else use.seconds,
    )


def feature_names(profile: Profile) -> tuple[list[str], list[str]]:
    numeric = [n for n, f in profile.features.items() if isinstance(f, NumericProfile)]
    categorical = [n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)]
    return numeric, categorical


def add_labels(
    *, sketch: WindowSketch, log: WindowReader, profile: Profile, summary: WindowSummary, chunk_rows: int
) -> None:
    """Count the window's labelled rows (PostgreSQL: one query, in id order) into ``sketch``."""
    if profile.prediction is None:
        return
    prob, label = log.labelled(summary=summary)
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
