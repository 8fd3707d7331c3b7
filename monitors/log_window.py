"""A model's window of the prediction log, read in chunks and folded into a :class:`WindowSketch`.

The reading (which rows, both readers, their performance design) belongs to the log's owner:
:mod:`predictions.windows`. Here each chunk is counted on the reference profile's grids and dropped, so
memory is bounded by the chunk size plus the profile, never by the window.

With the ``aggregate`` reader (PostgreSQL) the counts come from the database instead
(:mod:`predictions.aggregates`) and are put into the same sketch (:func:`sketch_aggregate`); only the
PCA error (a sample of rows) and the labelled error stream (streamed in id order) read rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine

from monitors.binning import GridCounts
from monitors.drift.multivariate import pca_error_counts
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.window import LabelCounts, WindowSketch
from predictions import aggregates
from predictions.windows import (
    CHUNK_ROWS,
    Chunk,
    Reader,
    WindowSpec,
    WindowSummary,
    choose_reader,
    read_chunks,
    summarize_window,
)


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
    chosen = choose_reader(engine=engine, reader=reader)
    sketch = WindowSketch(threshold=threshold)
    summary = summarize_window(engine=engine, model_name=model_name, spec=spec, now=now)
    if summary is None:
        return Window(model_name, spec, 0, None, None, None, None, 0, sketch, chosen.value)
    count = 0
    if chosen is Reader.AGGREGATE:  # counted inside the database: no chunks
        sketch = sketch_aggregate(
            engine=engine, profile=profile, summary=summary, threshold=threshold, chunk_rows=chunk_rows
        )
    else:
        chunks = read_chunks(
            engine=engine,
            summary=summary,
            numeric=[n for n, f in profile.features.items() if isinstance(f, NumericProfile)],
            categorical=[n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)],
            chunk_rows=chunk_rows,
            reader=chosen,
        )
        for chunk in chunks:
            add_chunk(sketch=sketch, profile=profile, chunk=chunk)
            count += 1
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
    )


def add_chunk(*, sketch: WindowSketch, profile: Profile, chunk: Chunk) -> WindowSketch:
    """Count one chunk into ``sketch`` (labels only where present)."""
    labels = chunk.labels if np.any(~np.isnan(chunk.labels)) else None
    before = sketch.rows
    sketch.update(profile, chunk.columns, predictions=chunk.predictions, labels=labels)
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
