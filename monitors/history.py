"""A model's drift over time (pure): stored runs turned into the series the HTML report charts.

Each run is one point at its window's end (its stored time when it has no window): scheduled and
backfilled runs alike (a backfilled run is stored at its window's end and marked ``backfill``). The series:
the share of drifted features, each feature's and output's effect, the realised and estimated value of one
performance metric with their limits and the reference, and the window's rows by source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitors.humane import parse_instant

METRIC_ORDER = ("roc_auc", "macro_f1", "rmse", "accuracy", "mae", "f1", "r2", "log_loss")
"""The metric a history charts when the newest report has no harm verdict naming one: the first found."""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class RunPoint:
    """One stored run as the history charts it."""

    run_id: int
    at: datetime  # the window's end (else the run's stored time)
    start: datetime | None
    backfill: bool
    rows: int
    rows_by_source: dict[str, int]
    share: float | None  # drifted features / features
    n_drifted: int
    n_features: int
    effects: dict[str, float | None]  # every feature's and output's effect
    drifted: frozenset[str]
    report: Mapping[str, Any] = field(repr=False, compare=False)

    def metric(self, part: str, name: str) -> float | None:
        """``report[part][name]`` as a finite number (e.g. ``performance``, ``roc_auc``), else None."""
        return _num((self.report.get(part) or {}).get(name))


def run_point(
    *,
    run_id: int,
    created_at: datetime,
    window_start: datetime | None,
    window_end: datetime | None,
    report: Mapping[str, Any],
) -> RunPoint:
    """One run (its stored fields and report JSON) as a point of the history."""
    dataset = report.get("dataset") or {}
    outputs = [report.get("prediction"), *(report.get("outputs") or []), report.get("multivariate")]
    items = [*(report.get("features") or []), *(o for o in outputs if o)]
    window = report.get("window") or {}
    by_source = {
        str(k): int(v) for k, v in (window.get("rows_by_source") or {}).items() if _num(v) is not None
    }
    return RunPoint(
        run_id=run_id,
        at=window_end or created_at,
        start=window_start or parse_instant(window.get("start")),
        backfill=bool(report.get("backfill")),
        rows=int(report.get("rows") or 0),
        rows_by_source=by_source,
        share=_num(dataset.get("share")),
        n_drifted=int(dataset.get("n_drifted") or 0),
        n_features=int(dataset.get("n_features") or 0),
        effects={str(f["name"]): _num((f.get("result") or {}).get("effect")) for f in items},
        drifted=frozenset(str(f["name"]) for f in items if f.get("drifted")),
        report=report,
    )


@dataclass(frozen=True)
class History:
    """A model's runs, oldest first, and the performance metric their charts follow."""

    points: list[RunPoint]
    metric: str | None

    def effects(self, name: str) -> list[float | None]:
        """The effect of feature or output ``name`` in each run (None where a run has none)."""
        return [p.effects.get(name) for p in self.points]

    def ever_drifted(self) -> list[str]:
        """The features and outputs that drifted in at least one run, most often first."""
        counts: dict[str, int] = {}
        for p in self.points:
            for name in p.drifted:
                counts[name] = counts.get(name, 0) + 1
        return sorted(counts, key=lambda n: (-counts[n], n))

    def sources(self) -> list[str]:
        """Every source the windows' rows came from, in the order first seen."""
        seen: dict[str, None] = {}
        for p in self.points:
            seen.update(dict.fromkeys(p.rows_by_source))
        return list(seen)

    def series(self, part: str) -> list[float | None]:
        """``report[part][metric]`` per run (``performance``, ``estimated_performance``, their limits...)."""
        return [p.metric(part, self.metric) if self.metric else None for p in self.points]

    @property
    def backfilled(self) -> int:
        return sum(p.backfill for p in self.points)


def _metric(points: Sequence[RunPoint]) -> str | None:
    """The harm verdict's metric of the newest run that has one, else the first of :data:`METRIC_ORDER` any
    run measured."""
    for p in reversed(points):
        named = (p.report.get("harm") or {}).get("metric")
        if isinstance(named, str) and named:
            return named
    for name in METRIC_ORDER:
        for p in points:
            if (
                p.metric("performance", name) is not None
                or p.metric("estimated_performance", name) is not None
            ):
                return name
    return None


def build_history(points: Sequence[RunPoint]) -> History:
    """The history of ``points`` in any order: sorted by window end (then run id)."""
    ordered = sorted(points, key=lambda p: (p.at, p.run_id))
    return History(points=ordered, metric=_metric(ordered))
