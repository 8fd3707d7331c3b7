"""Segments (pure): performance, data quality and drift per segment of the window, against the same segment
of the reference.

A segment is the rows of one level of a categorical feature (missing as a level of its own) or of one bin of
a numeric feature. By default every categorical feature with at most ``segment_max_levels`` (20) reference
levels is segmented; ``MonitorConfig.segments`` adds features (a categorical one's levels, a numeric one's
``bins``, or its reference quartiles). :data:`MAX_PARTITIONS` features at most are segmented (those named
first, then the default ones in the reference's order), and a segment is examined on
:data:`SEGMENT_FEATURES` features at most (the run's most drifted first): the work grows with segmenting
features times examined features, and a file of 1,600 columns (100 of them categorical) took 39 s and
5.9 GB here before these bounds. The levels and bins come from the reference profile and the settings
only, never from the window, so the segments (and the Prometheus ``segment`` label) stay bounded whatever
the window holds; a window value the reference never had belongs to no segment of its feature.

Per segment, from the window's and the reference's row samples (:class:`monitors.rows.RowSample`):

- **performance**: realised where the window sample's segment has ``segment_min_rows`` labelled rows (and
  the reference's too), else estimated (CBPE for a classifier, DLE for a regression, with the profile's
  calibration or loss model) on the segment's rows and, for the reference value, on the reference's rows of
  the segment: the change is the estimator's own change. The metric is the harm figure's: ROC AUC
  (binary), macro F1 (multi-class), RMSE (regression). Worse when beyond ``z`` sd of the metric on that
  many rows (the reference chunks' spread, :func:`monitors.profile.metric_sd`'s law).
- **drift**: each feature but the segmenting one, window segment against reference segment (two-sample KS
  for a numeric feature, chi-square on the counts of a categorical one), Benjamini-Hochberg within the
  segment.
- **quality**: each feature's missing rate against the reference segment's (one-sided two-proportion test).

The tests of all segments share the level the caller gives (the family's share of the run's false-alarm
budget, :mod:`monitors.horizon`), Bonferroni over the segments judged. A significant change is
**flagged** only when it is the segment's own: larger than :data:`LOCAL_RATIO` times the same change in the
rest of the window (the other rows of its feature's partition). A shift confined to ``region=north`` flags
that segment alone: ``home_ownership=RENT`` holds a quarter of north's rows and drifts too, but so does the
rest of the window, in the same measure. A shift of the whole window flags no segment (the run's own
verdicts report it). A segment with fewer than ``segment_min_rows`` rows in either sample is listed
without a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from scipy.special import ndtr

from monitors.config import MAX_SEGMENTS, MonitorConfig
from monitors.drift.base import adjust_p_values
from monitors.drift.categorical import CategoricalCounts, ChiSquare
from monitors.drift.numeric import ks_p_value
from monitors.horizon import LOWER_IS_BETTER, performance_z, sd_allowance
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.rows import RowSample, category_codes
from monitors.segment_figures import Figures, Sizes, as_counts, figures, pool_values
from registry.schema import FeatureKind, Task

MISSING = "(missing)"
MAX_CONFIGURED_LEVELS = 50  # a configured categorical feature: its most frequent reference levels
LOCAL_RATIO = 2.0
"""A segment's change is its own when it is more than this many times the same change in the rest of the
window: a mixture moves linearly with the share of shifted rows (KS distance, total variation)."""
TASK_METRIC = {Task.BINARY: "roc_auc", Task.MULTICLASS: "macro_f1", Task.REGRESSION: "rmse"}
"""The metric of a segment: the harm figure's default per task (alerts/rules.py maps ``roc_auc`` to these)."""
MAX_PARTITIONS = MAX_SEGMENTS
"""Segmenting features at most: those the settings name (at most as many), then the default ones."""
SEGMENT_FEATURES = 100
"""Features a segment is examined on (drift, missing values) at most: the run's most drifted first."""


@dataclass(frozen=True)
class Segment:
    """One segment: a level of a categorical feature (``value``, None: missing) or a numeric bin."""

    feature: str
    code: int  # the segment's code in its feature's partition (:func:`_codes`)
    value: str | None = None
    low: float | None = None
    high: float | None = None
    numeric: bool = False
    missing: bool = False

    @property
    def name(self) -> str:
        if self.missing:
            return f"{self.feature}={MISSING}"
        if not self.numeric:
            return f"{self.feature}={self.value}"
        low = "(-inf" if self.low is None else f"[{self.low:.15g}"
        high = "inf)" if self.high is None else f"{self.high:.15g})"
        return f"{self.feature}={low}, {high}"

    def describe(self) -> dict[str, Any]:
        """The segment's keys of its table row."""
        out: dict[str, Any] = {"segment": self.name, "feature": self.feature}
        if self.numeric and not self.missing:
            out.update(low=self.low, high=self.high)
        else:
            out["value"] = None if self.missing else self.value
        return out


@dataclass(frozen=True)
class Partition:
    """A segmenting feature: its segments, and how a row of a sample finds its segment's code."""

    feature: str
    segments: tuple[Segment, ...]
    levels: tuple[str, ...] = ()  # categorical: code i is levels[i]; missing: len(levels)
    edges: tuple[float, ...] = ()  # numeric: code i is the bin between edges i-1 and i; missing: last

    def codes(self, sample: RowSample, vocabulary: Mapping[str, np.ndarray]) -> np.ndarray:
        """Each row's segment code in a sample whose categories are codes of ``vocabulary``
        (:func:`_encoded`); -1 for a value the reference does not have."""
        column = sample.columns[self.feature]
        if self.edges or any(s.numeric for s in self.segments):
            x = np.asarray(column, dtype=np.float64)
            out = np.searchsorted(np.asarray(self.edges, dtype=np.float64), x, side="right")
            return np.where(np.isnan(x), len(self.edges) + 1, out)
        index = {v: i for i, v in enumerate(self.levels)}
        words = vocabulary[self.feature].tolist()
        lookup = np.array([index.get(v, -1) for v in words] + [len(self.levels)], dtype=np.int64)
        return np.asarray(lookup[np.asarray(column, dtype=np.int64)])  # code -1 (missing): the last entry


def partitions(
    *, profile: Profile, config: MonitorConfig, kinds: Mapping[str, FeatureKind]
) -> list[Partition]:
    """The segmenting features: those the settings name, then each categorical feature with at most
    ``segment_max_levels`` reference levels, in the reference's order (features missing from the samples
    or disabled left out); :data:`MAX_PARTITIONS` at most."""
    disabled = {name for name, o in config.features.items() if not o.enabled}
    out: list[Partition] = []
    named = set()
    for spec in config.segments:
        reference = profile.features.get(spec.feature)
        if spec.feature in kinds and reference is not None:
            named.add(spec.feature)
            out.append(_partition(reference, bins=spec.bins, limit=MAX_CONFIGURED_LEVELS))
    for name, reference in profile.features.items():
        if name in named or name in disabled or name not in kinds:
            continue
        if (
            isinstance(reference, CategoricalProfile)
            and 0 < len(reference.categories) <= config.segment_max_levels
        ):
            out.append(_partition(reference, bins=None, limit=config.segment_max_levels))
    return [p for p in out if p.segments][:MAX_PARTITIONS]


def _partition(
    reference: NumericProfile | CategoricalProfile, *, bins: Sequence[float] | None, limit: int
) -> Partition:
    if isinstance(reference, CategoricalProfile):
        top = sorted(reference.categories.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        levels = tuple(sorted(k for k, _ in top))
        segments = [Segment(reference.name, i, value=v) for i, v in enumerate(levels)]
        if reference.missing:
            segments.append(Segment(reference.name, len(levels), missing=True))
        return Partition(reference.name, tuple(segments), levels=levels)
    edges = tuple(float(b) for b in bins) if bins is not None else _quartiles(reference)
    bounds = [None, *edges, None]
    segments = [
        Segment(reference.name, i, low=bounds[i], high=bounds[i + 1], numeric=True)
        for i in range(len(edges) + 1)
    ]
    if reference.missing:
        segments.append(Segment(reference.name, len(edges) + 1, numeric=True, missing=True))
    return Partition(reference.name, tuple(segments), edges=edges)


def _quartiles(reference: NumericProfile) -> tuple[float, ...]:
    """The reference's distinct quartiles (inner edges of four bins at most)."""
    q = reference.quantiles
    if q.size == 0:
        return ()
    picks = q[[int(round(f * (q.size - 1))) for f in (0.25, 0.5, 0.75)]]
    inner = np.unique(picks[(picks > q[0]) & (picks <= q[-1])])
    return tuple(float(v) for v in inner)


# ---------------------------------------------------------------- the table


def segment_table(
    *,
    reference: RowSample,
    window: RowSample,
    profile: Profile,
    config: MonitorConfig,
    level: float,
    ranked: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Per segment, its rows, performance, quality and drift against the reference's segment, ranked by the
    worst change (flagged first); ``level`` is shared by the segments' tests (Bonferroni). A segment is
    examined on :data:`SEGMENT_FEATURES` features at most, chosen from ``ranked`` first (the run's features,
    most drifted first), then from the window's others in its order."""
    kinds = {k: v for k, v in window.kinds.items() if k in reference.columns}
    parts = partitions(profile=profile, config=config, kinds=kinds)
    chosen = set(list(dict.fromkeys([*(n for n in ranked if n in kinds), *kinds]))[:SEGMENT_FEATURES])
    examined = [n for n in kinds if n in chosen]  # in the window's order, as they always were
    w_coded, r_coded, vocabulary = _encoded(window, reference)
    pools = {
        n: pool_values(w_coded.columns[n], r_coded.columns[n])
        for n in w_coded.numeric()
        if n in r_coded.columns and n in examined
    }
    coded = [(part, part.codes(w_coded, vocabulary), part.codes(r_coded, vocabulary)) for part in parts]
    minimum = config.segment_min_rows
    judged = sum(_enough(w == s.code, r == s.code, minimum) for part, w, r in coded for s in part.segments)
    each = level / max(judged, 1)
    rows = []
    for part, w, r in coded:  # one partition's figures at a time: they hold every examined feature's rows
        size = max(s.code for s in part.segments) + 1
        found = figures(
            window=w_coded,
            reference=r_coded,
            codes=(w, r),
            size=size,
            skip=part.feature,
            pools=pools,
            names=examined,
        )
        for segment in part.segments:
            cut = _Cut(window, reference, found, segment.code, w == segment.code, r == segment.code)
            rows.append(_row(segment, cut, profile=profile, config=config, level=each))
    return sorted(rows, key=_rank)


def _enough(w_mask: np.ndarray, r_mask: np.ndarray, minimum: int) -> bool:
    """Whether both samples hold at least ``minimum`` rows of a segment (its rows: the masks)."""
    return bool(np.count_nonzero(w_mask) >= minimum and np.count_nonzero(r_mask) >= minimum)


@dataclass(frozen=True)
class _Cut:
    """A segment's rows in both samples (``inside``) and the rest of its partition (``outside``), as they are
    (performance) and with categories as codes (drift, quality: :func:`_encoded`)."""

    window: RowSample
    reference: RowSample
    figures: Figures
    code: int
    w_mask: np.ndarray
    r_mask: np.ndarray

    def enough(self, minimum: int) -> bool:
        """Whether both samples hold at least ``minimum`` rows of the segment."""
        return _enough(self.w_mask, self.r_mask, minimum)

    def inside(self, *, features: bool = True) -> tuple[RowSample, RowSample]:
        """The segment's rows of both samples (``features=False``: their predictions and labels only)."""
        return self.window.take(self.w_mask, features=features), self.reference.take(
            self.r_mask, features=features
        )

    def coded_inside(self) -> _Side:
        return _Side(self.figures, self.code, inside=True)

    def coded_outside(self) -> _Side:
        return _Side(self.figures, self.code, inside=False)

    def outside(self, *, features: bool = True) -> tuple[RowSample, RowSample]:
        """The rest of the partition's rows of both samples (``features``: as :meth:`inside`)."""
        return self.window.take(~self.w_mask, features=features), self.reference.take(
            ~self.r_mask, features=features
        )


def _row(
    segment: Segment, cut: _Cut, *, profile: Profile, config: MonitorConfig, level: float
) -> dict[str, Any]:
    """One segment's row of the table."""
    features = profile.task is Task.REGRESSION  # only a regression's estimate reads them (its loss model)
    window, reference = cut.inside(features=features)
    out: dict[str, Any] = {
        **segment.describe(),
        "rows": window.rows,
        "reference_rows": reference.rows,
        "share": window.rows / cut.window.rows if cut.window.rows else 0.0,
        "reference_share": reference.rows / cut.reference.rows if cut.reference.rows else 0.0,
        "metric": TASK_METRIC[profile.task],
        "estimate": None,
        "reference": None,
        "current": None,
        "change": None,
        "z": None,
        "quality": None,
        "drift": None,
        "judged": False,
        "worse": False,
        "flagged": False,
        "reasons": [],
    }
    if not cut.enough(config.segment_min_rows):
        out["reasons"] = [
            f"{window.rows} rows in the window's sample and {reference.rows} in the reference's: fewer than "
            f"{config.segment_min_rows}, no verdict"
        ]
        return out
    out["judged"] = True
    rest = partial(cut.outside, features=features)
    _judge_performance(out, (window, reference), rest, profile=profile, config=config, level=level)
    coded, coded_rest = cut.coded_inside(), cut.coded_outside()
    _judge_drift(out, coded, coded_rest, skip=segment.feature, config=config, level=level)
    out["quality"] = _quality(coded, rest=coded_rest, config=config, level=level)
    if out["quality"]["flagged"]:
        out["reasons"].append(f"more values missing in this segment: {', '.join(out['quality']['features'])}")
    out["flagged"] = bool(out["worse"] or out["drift"]["own"] or out["quality"]["flagged"])
    return out


Pair = tuple[RowSample, RowSample]  # (window, reference) rows


def _judge_performance(
    out: dict[str, Any],
    inside: Pair,
    outside: Callable[[], Pair],
    *,
    profile: Profile,
    config: MonitorConfig,
    level: float,
) -> None:
    """The segment's metric, its change and ``worse``: significantly worse, and more than in the rest."""
    metric = out["metric"]
    perf = _performance(*inside, profile=profile, config=config, metric=metric, level=level)
    if perf is None:
        return
    out.update({k: perf[k] for k in ("estimate", "reference", "current", "change", "z")})
    if not perf["worse"]:
        return
    rest = _performance(*outside(), profile=profile, config=config, metric=metric, level=1.0)
    rest_worse = max(_worse_by(metric, rest["change"]), 0.0) if rest else 0.0
    out["worse"] = own = _worse_by(metric, perf["change"]) > LOCAL_RATIO * rest_worse
    out["reasons"].append(_perf_reason(perf, metric, own=own, rest=rest))


def _judge_drift(
    out: dict[str, Any], inside: _Side, outside: _Side, *, skip: str, config: MonitorConfig, level: float
) -> None:
    """Each feature's drift in the segment; ``own``: those drifted more than in the rest of the window."""
    drift = _drift(inside, skip=skip, config=config, level=level)
    summary = drift["summary"]
    rest = {name: _effect(name, outside) for name in summary["features"]}
    summary["own"] = [n for n in summary["features"] if drift["effects"][n] > LOCAL_RATIO * rest[n]]
    out["drift"] = summary
    for name in summary["features"]:
        own = name in summary["own"]
        here = f"{name} drifted in this segment ({drift['names'][name]} {drift['effects'][name]:.3f})"
        out["reasons"].append(
            f"{here}, not in the rest of the window ({rest[name]:.3f})"
            if own
            else f"{here} as in the rest of the window ({rest[name]:.3f}): not this segment's own"
        )


def _rank(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """Flagged first, then the most significant worsening, then the strongest drift; unjudged last."""
    drift = row.get("drift") or {}
    p = drift.get("p_value")
    return (
        not row["judged"],
        not row["flagged"],
        -float(row.get("z") or 0.0),
        1.0 if p is None else float(p),
        -row["rows"],
        row["segment"],
    )


# ---------------------------------------------------------------- performance


def _worse_by(metric: str, change: float) -> float:
    """How much worse a change is (positive: worse)."""
    return change if metric in LOWER_IS_BETTER else -change


def _value(
    sample: RowSample, *, profile: Profile, config: MonitorConfig, metric: str, realised: bool
) -> float:
    """The segment's metric: realised on its labelled rows, else the profile's estimator."""
    from monitors.performance import (
        estimate_classification_metrics,
        estimate_multiclass_metrics,
        estimate_regression_metrics,
        metrics_for,
    )

    p = sample.predictions
    if realised:
        assert sample.labels is not None
        return float(metrics_for(profile.task, y_true=sample.labels, predictions=p).get(metric, math.nan))
    if profile.task is Task.BINARY and profile.calibration:
        return float(
            getattr(
                estimate_classification_metrics(
                    y_prob=p, threshold=config.classification_threshold, calibration=profile.calibration
                ),
                metric,
            )
        )
    if profile.task is Task.MULTICLASS and profile.calibration:
        return float(estimate_multiclass_metrics(y_prob=p, calibration=profile.calibration)[metric])
    if profile.task is Task.REGRESSION and profile.loss_model:
        return float(
            estimate_regression_metrics(columns=sample.columns, predictions=p, model=profile.loss_model)[
                metric
            ]
        )
    return math.nan


def _performance(
    window: RowSample,
    reference: RowSample,
    *,
    profile: Profile,
    config: MonitorConfig,
    metric: str,
    level: float,
) -> dict[str, Any] | None:
    """The segment's metric against the reference's segment, the change, and whether it is worse beyond the
    level (None: no labels and no estimator)."""
    minimum = config.segment_min_rows
    realised = window.labelled >= minimum and reference.labelled >= minimum
    current, ref = math.nan, math.nan

    def measure(sample: RowSample, labels: bool) -> float:
        rows = _labelled(sample) if labels else sample
        return _value(rows, profile=profile, config=config, metric=metric, realised=labels)

    if realised:  # a segment of one class has no ROC AUC: then the estimate
        current, ref = measure(window, True), measure(reference, True)
        realised = math.isfinite(current) and math.isfinite(ref)
    if not realised:
        current, ref = measure(window, False), measure(reference, False)
    estimate = "realised" if realised else ("dle" if profile.task is Task.REGRESSION else "cbpe")
    if not (math.isfinite(current) and math.isfinite(ref)):
        return None
    change = current - ref
    n_w = window.labelled if realised else window.rows
    n_r = reference.labelled if realised else reference.rows
    sd = _sd(profile.performance_spread, metric, n_w, n_r)
    z = _worse_by(metric, change) / sd if sd else None
    worse = z is not None and z > performance_z(level)
    return {
        "estimate": estimate,
        "reference": ref,
        "current": current,
        "change": change,
        "z": z,
        "worse": worse,
    }


def _labelled(sample: RowSample) -> RowSample:
    assert sample.labels is not None
    return sample.take(~np.isnan(sample.labels))


def _sd(spread: Mapping[str, Any] | None, metric: str, rows: int, reference_rows: int) -> float | None:
    """The sd of a segment's metric change: the reference chunks' spread scaled to both segments' rows."""
    if not spread or rows <= 0 or reference_rows <= 0:
        return None
    sd = (spread.get("sd") or {}).get(metric)
    if sd is None:
        return None
    unit = float(sd) ** 2 * int(spread["chunk_rows"])
    return math.sqrt(unit / rows + unit / reference_rows) * sd_allowance(int(spread.get("chunks") or 0))


def _perf_reason(perf: Mapping[str, Any], metric: str, *, own: bool, rest: Mapping[str, Any] | None) -> str:
    which = {"realised": "realised", "cbpe": "estimated (CBPE)", "dle": "estimated (DLE)"}[perf["estimate"]]
    text = (
        f"{which} {metric} {perf['current']:.3f} against {perf['reference']:.3f} in the reference's segment"
    )
    if own:
        return text + " (worse here than in the rest of the window)"
    rest_change = "?" if rest is None else f"{rest['change']:+.3f}"
    return text + f" (the rest of the window moved as much: {rest_change}; not this segment's own)"


# ---------------------------------------------------------------- drift and quality


def _encoded(window: RowSample, reference: RowSample) -> tuple[RowSample, RowSample, dict[str, np.ndarray]]:
    """Both samples with each categorical column as int64 codes into one vocabulary per feature (-1:
    missing), so that a segment's counts are a ``bincount``, not a pass over Python strings."""
    w_columns, r_columns = dict(window.columns), dict(reference.columns)
    vocabulary: dict[str, np.ndarray] = {}
    for name in window.categorical():
        if name not in reference.columns:
            continue
        both = np.concatenate(
            [np.asarray(r_columns[name], dtype=object), np.asarray(w_columns[name], dtype=object)]
        )
        codes, words = category_codes(both)
        vocabulary[name] = words
        r_columns[name], w_columns[name] = codes[: reference.rows], codes[reference.rows :]
    return window.with_columns(w_columns), reference.with_columns(r_columns), vocabulary


@dataclass(frozen=True)
class _Side:
    """A segment's rows in both samples (``inside``) or the rest of its partition's, as the partition's
    :class:`monitors.segment_figures.Figures` count them."""

    figures: Figures
    code: int
    inside: bool

    def _pair(self, counts: tuple[np.ndarray, np.ndarray], totals: Sizes) -> Sizes:
        here = int(counts[0][self.code]), int(counts[1][self.code])
        return here if self.inside else (totals[0] - here[0], totals[1] - here[1])

    @property
    def rows(self) -> Sizes:
        """The rows of the window's sample and of the reference's."""
        return self._pair(self.figures.rows, self.figures.total_rows)

    def missing(self, name: str) -> Sizes:
        """How many of those rows miss ``name``."""
        return self._pair(self.figures.missing[name], self.figures.total_missing[name])

    def ks(self, name: str) -> tuple[float, int, int]:
        """A numeric feature's KS distance, window's against reference's, and their present values."""
        if not self.inside:
            return self.figures.rest_ks(name, self.code)
        d, n, m = self.figures.ks[name]
        return float(d[self.code]), int(n[self.code]), int(m[self.code])

    def counts(self, name: str) -> tuple[CategoricalCounts, CategoricalCounts]:
        """A categorical feature's counts of category codes: the window's, the reference's."""
        w_in, w_all, r_in, r_all = self.figures.counts[name]
        w, r = w_in[self.code], r_in[self.code]
        if not self.inside:
            w, r = w_all - w, r_all - r
        return as_counts(w), as_counts(r)


def _test(name: str, side: _Side) -> tuple[float, float]:
    """(p-value, effect) of one feature, window against reference: KS (Stephens' limit) or chi-square."""
    if side.figures.kinds[name] is FeatureKind.NUMERIC:
        d, n, m = side.ks(name)
        return ks_p_value(d, n=n, m=m, exact_max_n=0), d
    w, r = side.counts(name)
    measured = ChiSquare().measure(r, w)
    return float(measured.p_value if measured.p_value is not None else 1.0), float(measured.effect)


def _effect(name: str, side: _Side) -> float:
    """The effect of one feature's drift (KS distance or total variation)."""
    if 0 in side.rows:
        return 0.0
    return _test(name, side)[1]


def _drift(side: _Side, *, skip: str, config: MonitorConfig, level: float) -> dict[str, Any]:
    """Each feature's test in the segment, BH-adjusted, drifted at ``level``."""
    disabled = {name for name, o in config.features.items() if not o.enabled}
    names = [n for n in side.figures.names if n != skip and n not in disabled]
    tested = [_test(n, side) for n in names]
    p = np.array([t[0] for t in tested], dtype=np.float64)
    adjusted = adjust_p_values(p, method="bh") if p.size else p
    drifted = [n for n, q in zip(names, adjusted, strict=True) if q < level]
    order = sorted(drifted, key=lambda n: adjusted[names.index(n)])
    summary = {
        "drifted": bool(drifted),
        "features": order,
        "p_value": float(np.nanmin(adjusted)) if adjusted.size else None,
        "tested": len(names),
        "level": level,
    }
    effects = {n: t[1] for n, t in zip(names, tested, strict=True)}
    kinds = {n: "KS" if side.figures.kinds[n] is FeatureKind.NUMERIC else "total variation" for n in names}
    return {"summary": summary, "effects": effects, "names": kinds}


def _missing_rates(side: _Side, name: str) -> tuple[tuple[float, int], tuple[float, int]]:
    """The window's and the reference's (missing rate, missing values) of ``name`` on the side's rows."""
    rows, missing = side.rows, side.missing(name)
    w_rate = missing[0] / rows[0] if rows[0] else 0.0
    r_rate = missing[1] / rows[1] if rows[1] else 0.0
    return (w_rate, missing[0]), (r_rate, missing[1])


def _quality(inside: _Side, *, rest: _Side, config: MonitorConfig, level: float) -> dict[str, Any]:
    """Missing rates of the segment against the reference's; flagged where a rise is significant, at least
    ``quality_min_increase`` and the segment's own (:data:`LOCAL_RATIO` x the rest's rise)."""
    names = inside.figures.names
    rates = {n: _missing_rates(inside, n) for n in names}
    w_rows, r_rows = inside.rows
    rest_rows = rest.rows
    worse: dict[str, dict[str, float]] = {}
    for name, ((w_rate, w_n), (r_rate, r_n)) in rates.items():
        rise = w_rate - r_rate
        if rise < max(config.quality_min_increase, 1e-12):
            continue
        pooled = (w_n + r_n) / (w_rows + r_rows)
        se = math.sqrt(pooled * (1 - pooled) * (1 / w_rows + 1 / r_rows))
        p = float(ndtr(-rise / se)) if se > 0 else 0.0
        (w_rest, _), (r_rest, _) = _missing_rates(rest, name)
        rest_rise = w_rest - r_rest if rest_rows[0] and rest_rows[1] else 0.0
        if p < level / max(len(names), 1) and rise > LOCAL_RATIO * max(rest_rise, 0.0):
            worse[name] = {"missing_rate": w_rate, "reference": r_rate, "p_value": p}
    return {
        "missing_rate": float(np.mean([v[0][0] for v in rates.values()])) if rates else 0.0,
        "reference_missing_rate": float(np.mean([v[1][0] for v in rates.values()])) if rates else 0.0,
        "features": worse,
        "flagged": bool(worse),
    }
