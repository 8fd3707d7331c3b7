"""Segments (pure): performance, data quality and drift per segment of the window, against the same segment
of the reference.

A segment is the rows of one level of a categorical feature (missing as a level of its own) or of one bin of
a numeric feature. By default every categorical feature with at most ``segment_max_levels`` (20) reference
levels is segmented; ``MonitorConfig.segments`` adds features (a categorical one's levels, a numeric one's
``bins``, or its reference quartiles). The levels and bins come from the reference profile and the settings
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtr

from monitors.config import MonitorConfig
from monitors.drift.base import adjust_p_values
from monitors.drift.categorical import CategoricalCounts, ChiSquare
from monitors.drift.numeric import ks_p_value
from monitors.horizon import LOWER_IS_BETTER, performance_z, sd_allowance
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.rows import RowSample, category_codes
from registry.schema import FeatureKind, Task

MISSING = "(missing)"
MAX_CONFIGURED_LEVELS = 50  # a configured categorical feature: its most frequent reference levels
LOCAL_RATIO = 2.0
"""A segment's change is its own when it is more than this many times the same change in the rest of the
window: a mixture moves linearly with the share of shifted rows (KS distance, total variation)."""
TASK_METRIC = {Task.BINARY: "roc_auc", Task.MULTICLASS: "macro_f1", Task.REGRESSION: "rmse"}
"""The metric of a segment: the harm figure's default per task (alerts/rules.py maps ``roc_auc`` to these)."""


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
    ``segment_max_levels`` reference levels (features missing from the samples or disabled left out)."""
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
    return [p for p in out if p.segments]


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
    *, reference: RowSample, window: RowSample, profile: Profile, config: MonitorConfig, level: float
) -> list[dict[str, Any]]:
    """Per segment, its rows, performance, quality and drift against the reference's segment, ranked by the
    worst change (flagged first); ``level`` is shared by the segments' tests (Bonferroni)."""
    kinds = {k: v for k, v in window.kinds.items() if k in reference.columns}
    parts = partitions(profile=profile, config=config, kinds=kinds)
    w_coded, r_coded, vocabulary = _encoded(window, reference)
    w_prepared, r_prepared = _Prepared.of(w_coded), _Prepared.of(r_coded)
    coded = [(part, part.codes(w_coded, vocabulary), part.codes(r_coded, vocabulary)) for part in parts]
    cuts = [
        (
            segment,
            _Cut(window, reference, w_prepared, r_prepared, w_codes == segment.code, r_codes == segment.code),
        )
        for part, w_codes, r_codes in coded
        for segment in part.segments
    ]
    judged = sum(1 for _, cut in cuts if cut.enough(config.segment_min_rows))
    each = level / max(judged, 1)
    rows = [_row(segment, cut, profile=profile, config=config, level=each) for segment, cut in cuts]
    return sorted(rows, key=_rank)


@dataclass(frozen=True)
class _Cut:
    """A segment's rows in both samples (``inside``) and the rest of its partition (``outside``), as they are
    (performance) and with categories as codes (drift, quality: :func:`_encoded`)."""

    window: RowSample
    reference: RowSample
    w_coded: _Prepared
    r_coded: _Prepared
    w_mask: np.ndarray
    r_mask: np.ndarray

    def enough(self, minimum: int) -> bool:
        """Whether both samples hold at least ``minimum`` rows of the segment."""
        return bool(np.count_nonzero(self.w_mask) >= minimum and np.count_nonzero(self.r_mask) >= minimum)

    def inside(self) -> tuple[RowSample, RowSample]:
        return self.window.take(self.w_mask), self.reference.take(self.r_mask)

    def coded_inside(self) -> tuple[_Rows, _Rows]:
        return _Rows(self.w_coded, self.w_mask), _Rows(self.r_coded, self.r_mask)

    def coded_outside(self) -> tuple[_Rows, _Rows]:
        return _Rows(self.w_coded, ~self.w_mask), _Rows(self.r_coded, ~self.r_mask)

    def outside(self) -> tuple[RowSample, RowSample]:
        return self.window.take(~self.w_mask), self.reference.take(~self.r_mask)


def _row(
    segment: Segment, cut: _Cut, *, profile: Profile, config: MonitorConfig, level: float
) -> dict[str, Any]:
    """One segment's row of the table."""
    window, reference = cut.inside()
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
    inside, outside = (window, reference), cut.outside()
    _judge_performance(out, inside, outside, profile=profile, config=config, level=level)
    coded, coded_rest = cut.coded_inside(), cut.coded_outside()
    _judge_drift(out, coded, coded_rest, skip=segment.feature, config=config, level=level)
    out["quality"] = _quality(*coded, rest=coded_rest, config=config, level=level)
    if out["quality"]["flagged"]:
        out["reasons"].append(f"more values missing in this segment: {', '.join(out['quality']['features'])}")
    out["flagged"] = bool(out["worse"] or out["drift"]["own"] or out["quality"]["flagged"])
    return out


Pair = tuple[RowSample, RowSample]  # (window, reference) rows
Coded = tuple["_Rows", "_Rows"]  # (window, reference) rows, categories as codes (:func:`_encoded`)


def _judge_performance(
    out: dict[str, Any], inside: Pair, outside: Pair, *, profile: Profile, config: MonitorConfig, level: float
) -> None:
    """The segment's metric, its change and ``worse``: significantly worse, and more than in the rest."""
    metric = out["metric"]
    perf = _performance(*inside, profile=profile, config=config, metric=metric, level=level)
    if perf is None:
        return
    out.update({k: perf[k] for k in ("estimate", "reference", "current", "change", "z")})
    if not perf["worse"]:
        return
    rest = _performance(*outside, profile=profile, config=config, metric=metric, level=1.0)
    rest_worse = max(_worse_by(metric, rest["change"]), 0.0) if rest else 0.0
    out["worse"] = own = _worse_by(metric, perf["change"]) > LOCAL_RATIO * rest_worse
    out["reasons"].append(_perf_reason(perf, metric, own=own, rest=rest))


def _judge_drift(
    out: dict[str, Any], inside: Coded, outside: Coded, *, skip: str, config: MonitorConfig, level: float
) -> None:
    """Each feature's drift in the segment; ``own``: those drifted more than in the rest of the window."""
    drift = _drift(*inside, skip=skip, config=config, level=level)
    summary = drift["summary"]
    rest = {name: _effect(name, *outside) for name in summary["features"]}
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
class _Prepared:
    """A coded sample (:func:`_encoded`) prepared once for all its segments: each numeric column's present
    values sorted with their rows, each column's missing rows."""

    sample: RowSample
    order: dict[str, np.ndarray]  # numeric: the rows of the present values, in the values' order
    ordered: dict[str, np.ndarray]  # numeric: the present values, sorted
    missing: dict[str, np.ndarray]  # each column: whether a row's value is missing

    @classmethod
    def of(cls, sample: RowSample) -> _Prepared:
        """``sample``'s columns prepared."""
        order: dict[str, np.ndarray] = {}
        ordered: dict[str, np.ndarray] = {}
        missing: dict[str, np.ndarray] = {}
        for name, values in sample.columns.items():
            if sample.kinds[name] is FeatureKind.NUMERIC:
                x = np.asarray(values, dtype=np.float64)
                missing[name] = np.isnan(x)
                rows = np.flatnonzero(~missing[name])
                order[name] = rows[np.argsort(x[rows], kind="stable")]
                ordered[name] = x[order[name]]
            else:  # codes (:func:`_encoded`)
                missing[name] = np.asarray(values, dtype=np.int64) < 0
        return cls(sample, order, ordered, missing)


@dataclass(frozen=True)
class _Rows:
    """Some rows (``mask``) of a prepared sample: what a segment's drift and quality read of them."""

    prepared: _Prepared
    mask: np.ndarray

    @property
    def kinds(self) -> dict[str, FeatureKind]:
        return self.prepared.sample.kinds

    @property
    def columns(self) -> Mapping[str, np.ndarray]:
        return self.prepared.sample.columns

    @property
    def rows(self) -> int:
        return int(np.count_nonzero(self.mask))

    def missing(self, name: str) -> int:
        """How many of the rows miss ``name``."""
        return int(np.count_nonzero(self.prepared.missing[name] & self.mask))


def _present(sample: _Rows, name: str) -> np.ndarray:
    """A numeric column's present values, sorted; a categorical one's present codes."""
    prepared = sample.prepared
    if sample.kinds[name] is FeatureKind.NUMERIC:
        return prepared.ordered[name][sample.mask[prepared.order[name]]]
    codes = np.asarray(sample.columns[name], dtype=np.int64)
    return codes[sample.mask & ~prepared.missing[name]]


def _counts(codes: np.ndarray) -> CategoricalCounts:
    """The counts of present category codes, keyed by code."""
    n = np.bincount(codes)
    return CategoricalCounts(counts={str(c): int(n[c]) for c in np.flatnonzero(n)})


def _ks(current: np.ndarray, reference: np.ndarray) -> float:
    """The two-sample KS distance of two sorted samples."""
    if current.size == 0 or reference.size == 0:
        return 0.0
    points = np.concatenate([current, reference])
    f_c = np.searchsorted(current, points, side="right") / current.size
    f_r = np.searchsorted(reference, points, side="right") / reference.size
    return float(np.max(np.abs(f_c - f_r)))


def _test(name: str, window: _Rows, reference: _Rows) -> tuple[float, float]:
    """(p-value, effect) of one feature, window against reference: KS (Stephens' limit) or chi-square."""
    w, r = _present(window, name), _present(reference, name)
    if window.kinds[name] is FeatureKind.NUMERIC:
        d = _ks(w, r)
        return ks_p_value(d, n=w.size, m=r.size, exact_max_n=0), d
    m = ChiSquare().measure(_counts(r), _counts(w))
    return float(m.p_value if m.p_value is not None else 1.0), float(m.effect)


def _effect(name: str, window: _Rows, reference: _Rows) -> float:
    """The effect of one feature's drift (KS distance or total variation)."""
    if window.rows == 0 or reference.rows == 0:
        return 0.0
    return _test(name, window, reference)[1]


def _drift(
    window: _Rows, reference: _Rows, *, skip: str, config: MonitorConfig, level: float
) -> dict[str, Any]:
    """Each feature's test in the segment, BH-adjusted, drifted at ``level``."""
    disabled = {name for name, o in config.features.items() if not o.enabled}
    names = [n for n in window.kinds if n != skip and n in reference.columns and n not in disabled]
    tested = [_test(n, window, reference) for n in names]
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
    kinds = {n: "KS" if window.kinds[n] is FeatureKind.NUMERIC else "total variation" for n in names}
    return {"summary": summary, "effects": effects, "names": kinds}


def _missing_rate(sample: _Rows, name: str) -> tuple[float, int]:
    missing = sample.missing(name)
    rows = sample.rows
    return (missing / rows if rows else 0.0), missing


def _quality(
    window: _Rows,
    reference: _Rows,
    *,
    rest: Coded,
    config: MonitorConfig,
    level: float,
) -> dict[str, Any]:
    """Missing rates of the segment against the reference's; flagged where a rise is significant, at least
    ``quality_min_increase`` and the segment's own (:data:`LOCAL_RATIO` x the rest's rise)."""
    names = [n for n in window.kinds if n in reference.columns]
    rates = {n: (_missing_rate(window, n), _missing_rate(reference, n)) for n in names}
    worse: dict[str, dict[str, float]] = {}
    for name, ((w_rate, w_n), (r_rate, r_n)) in rates.items():
        rise = w_rate - r_rate
        if rise < max(config.quality_min_increase, 1e-12):
            continue
        pooled = (w_n + r_n) / (window.rows + reference.rows)
        se = math.sqrt(pooled * (1 - pooled) * (1 / window.rows + 1 / reference.rows))
        p = float(ndtr(-rise / se)) if se > 0 else 0.0
        rest_rise = (
            _missing_rate(rest[0], name)[0] - _missing_rate(rest[1], name)[0]
            if rest[0].rows and rest[1].rows
            else 0.0
        )
        if p < level / max(len(names), 1) and rise > LOCAL_RATIO * max(rest_rise, 0.0):
            worse[name] = {"missing_rate": w_rate, "reference": r_rate, "p_value": p}
    return {
        "missing_rate": float(np.mean([v[0][0] for v in rates.values()])) if rates else 0.0,
        "reference_missing_rate": float(np.mean([v[1][0] for v in rates.values()])) if rates else 0.0,
        "features": worse,
        "flagged": bool(worse),
    }
