"""Why a run's drift matters (pure, but for the predictor it is handed): attribution, segments, weak slices.

:func:`explain` adds to an engine report what the row samples can tell (the harm verdict itself comes from
the engine, :mod:`monitors.harm`, and every report has it):

- the weak slices of the window (:mod:`monitors.slices`): where the model's per-row loss, realised or
  estimated, is worst;
- the segments (:mod:`monitors.segments`), against the reference sample's same segments;
- when a feature drifted, the split of the performance change between the drifted features
  (:mod:`monitors.attribution`), asking the version's model or a surrogate of its answers.

Without a window sample (``monitor_sample_rows`` 0) nothing is added; without a reference sample (a profile
built before samples were kept) only the weak slices are.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from monitors.attribution import apply_impacts, attribute
from monitors.config import MonitorConfig
from monitors.profile import Profile
from monitors.report import DriftReport
from monitors.rows import Predictor, RowSample
from monitors.segments import segment_table
from monitors.slices import weak_slices
from registry.schema import Task

SLICE_MIN_ROWS = 100
"""Rows of the window's sample a weak slice holds at least."""


def explain(
    report: DriftReport,
    *,
    profile: Profile,
    window: RowSample | None,
    predictor: Callable[[], Predictor | None],
    config: MonitorConfig,
    level: float,
    seed: int = 0,
) -> DriftReport:
    """Add weak slices, segments and attribution to ``report`` (in place; returned). ``level`` is the run's
    level per detector family; ``predictor`` is called only when a feature drifted, so that a run without
    drift loads no model."""
    if window is None or not window.rows:
        return report
    window = _answers_shaped(window, profile=profile)
    report.weak_slices = weak_slices(
        sample=window,
        profile=profile,
        level=level,
        min_rows=SLICE_MIN_ROWS,
        threshold=config.classification_threshold,
    )
    reference = profile.sample
    if reference is None or not reference.rows:
        return report
    # the segments re-test the families the whole window's verdicts test: half of each family's level
    report.segments = segment_table(
        reference=reference,
        window=window,
        profile=profile,
        config=config,
        level=level / 2,
        ranked=[f.name for f in report.features],  # most drifted first
    )
    drifted = [f.name for f in report.features if f.drifted]
    if not drifted:
        return report
    ask = predictor()
    if ask is None:
        return report
    found = attribute(
        reference=reference,
        window=window,
        drifted=drifted,
        predictor=ask,
        profile=profile,
        seed=seed,
        metric=(report.harm or {}).get("metric"),
    )
    if found is not None:
        report.attribution = found
        apply_impacts(report, found)
    return report


def _answers_shaped(window: RowSample, *, profile: Profile) -> RowSample:
    """The window with its answers in the task's shape: a multi-class window read without its vectors (a
    file compared without them) gets unknown ``[n, K]`` answers, so that only what needs none is measured."""
    width = len(profile.class_probabilities)
    if profile.task is not Task.MULTICLASS or not width or window.predictions.ndim == 2:
        return window
    unknown = np.full((window.rows, width), np.nan)
    return RowSample(
        columns=window.columns,
        kinds=window.kinds,
        predictions=unknown,
        labels=window.labels,
        population=window.population,
    )
