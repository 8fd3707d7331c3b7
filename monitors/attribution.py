"""Attribution of a change (pure): how much of the performance's and the prediction's move each drifted
feature's shift explains.

Interventional Shapley over the drifted features. A coalition ``S``'s value ``v(S)`` is the performance of
the window sample with the features of ``S`` replaced by reference values: each window row is paired with
one reference row drawn at random (seeded), and a replaced feature takes that row's value, so replaced
features keep their reference joint distribution. ``v(∅)`` is the window as it is, ``v(all)`` the window
with every drifted feature back at the reference. A feature's ``effect`` is minus its Shapley value, so the
effects sum to ``change = v(∅) - v(all)``: the move of the figure the drifted features explain.

The figure is the label-free estimate (CBPE with the profile's calibration for a classifier, DLE with its
loss model for a regression), on the metric ``report.harm`` judges: ROC AUC (binary), macro F1
(multi-class), RMSE (regression) unless the caller names another (:data:`monitors.weighted.BINARY_METRICS`
...). It is the estimate even where the window has labels: a realised figure cannot be split by replacing
values, since a row's label belongs to its old values (a window whose ``x1`` moved up keeps the labels of the
higher ``x1``; scored at a reference ``x1`` it would look wrong whatever the model). The estimate asks
``P(y | x)`` of the reference, which holds for any mix of window and reference values; the realised change
stays in ``report.harm``. With no estimate (a regression without a loss model) only the prediction is
attributed. The prediction's figure is its mean (binary: the probability; regression: the value) or,
multi-class, the total variation between the predicted-class distribution of ``S`` and that of ``all``.

All coalitions are predicted in one batched call (the window rows stacked once per coalition). Exact over
all subsets up to :data:`MAX_PLAYERS` features; beyond, each drifted feature is first replaced alone, the
:data:`MAX_PLAYERS` - 1 whose replacement moves the figure most (the prediction without a figure) are
attributed one by one and the rest as one group (``grouped``, ``grouped_effect``). The rows are at most
:data:`MAX_ROWS`, fewer when ``coalitions x rows`` would pass :data:`ROW_BUDGET`.

Bounds: the rows are resampled :data:`RESAMPLES` times (bootstrap weights, the coalitions' predictions
reused), ``lower``/``upper`` the 2.5 and 97.5 percentiles of each effect.

Shares: the change is *significant* when its bounds exclude 0 and it is at least :data:`MIN_CHANGE` (a
classifier's metric) or :data:`MIN_RELATIVE_CHANGE` of the reference-like value (a regression's error).
Then ``impact = effect / change``, signed (above 0: the feature moves the figure the way it moved). When the
change is not significant, every impact is 0: no drifted feature explains a change, and each is harmless.
A feature is ``harmless`` when its effect's bounds include 0 or its ``|impact|`` is below
:data:`NEGLIGIBLE_SHARE`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from monitors.drift.numeric import infinities_at_finite_ends
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.report import DriftReport
from monitors.rows import Additive, Predictor, RowSample, category_codes, uniform_positions
from monitors.weighted import BINARY_METRICS, MULTICLASS_METRICS, REGRESSION_METRICS, Figure, values
from registry.schema import FeatureKind, Task

MAX_PLAYERS = 8  # 2^8 = 256 coalitions
MAX_ROWS = 2_000
ROW_BUDGET = 256 * 2_000  # model rows per attribution (coalitions x rows)
MIN_ROWS = 50
RESAMPLES = 50
LEVEL = 0.05  # two-sided, of each bound
MIN_CHANGE = 0.005  # a classifier metric's change below this is no change
MIN_RELATIVE_CHANGE = 0.01  # a regression error's change below this share of its value is no change
NEGLIGIBLE_SHARE = 0.1
METRIC_NAMES = {
    "roc_auc": "ROC AUC",
    "accuracy": "accuracy",
    "macro_f1": "macro F1",
    "rmse": "RMSE",
    "mae": "MAE",
}
GROUP = "(grouped)"


# ---------------------------------------------------------------- the figure


def choose_figure(*, profile: Profile, metric: str | None = None) -> Figure | None:
    """The performance figure attribution splits: CBPE (a classifier) or DLE (a regression with a loss model);
    None: no figure."""
    task = profile.task
    allowed = {Task.MULTICLASS: MULTICLASS_METRICS, Task.REGRESSION: REGRESSION_METRICS}.get(
        task, BINARY_METRICS
    )
    name = metric if metric in allowed else allowed[0]
    if task is Task.REGRESSION:
        if not profile.loss_model:
            return None
        return Figure(task=task, metric=name, estimate="dle", loss_model=profile.loss_model)
    return Figure(task=task, metric=name, estimate="cbpe", calibration=profile.calibration)


# ---------------------------------------------------------------- drift sizes


def drift_size(name: str, *, window: RowSample, reference: RowSample, profile: Profile) -> tuple[float, str]:
    """How far a feature moved: numeric, the Wasserstein distance between the window's values and the
    reference's in reference sd (a pure shift's distance is the mean's shift); categorical, the total
    variation between the category shares."""
    known = profile.features.get(name)
    col = window.columns[name]
    if window.kinds[name] is FeatureKind.NUMERIC:
        x = np.asarray(col, dtype=np.float64)
        x = x[~np.isnan(x)]
        if isinstance(known, NumericProfile) and known.quantiles.size:
            grid, scale = known.quantiles, known.scale
        else:
            ref = np.asarray(reference.columns[name], dtype=np.float64)
            ref = ref[~np.isnan(ref)]
            if not ref.size:
                return 0.0, "sd"
            grid, scale = np.quantile(ref, np.linspace(0, 1, 1001)), float(np.std(ref)) or 1.0
        if not x.size:
            return 0.0, "sd"
        x, grid = infinities_at_finite_ends([x, grid])  # as the Wasserstein test reads an infinity
        here = np.quantile(x, np.linspace(0.0, 1.0, grid.size))
        return float(np.mean(np.abs(here - grid))) / scale, "sd"
    if isinstance(known, CategoricalProfile):
        ref_counts = dict(known.categories)
    else:
        ref_counts = _counts(reference.columns[name])
    return _total_variation(_counts(col), ref_counts), "tv"


def _counts(values: np.ndarray) -> dict[str, int]:
    codes, levels = category_codes(values)
    counts = np.bincount(codes[codes >= 0], minlength=levels.size)
    return {str(k): int(c) for k, c in zip(levels, counts, strict=True)}


def _total_variation(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    na, nb = sum(a.values()), sum(b.values())
    if not na or not nb:
        return 0.0
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in set(a) | set(b))


# ---------------------------------------------------------------- coalitions


def _stacked(
    window: RowSample, draws: RowSample, players: Sequence[Sequence[str]], masks: Sequence[int]
) -> dict[str, np.ndarray]:
    """Every feature column of the window stacked once per coalition, a player's features replaced by the
    reference draws where the coalition's mask holds it."""
    owner = {name: j for j, group in enumerate(players) for name in group}
    out: dict[str, np.ndarray] = {}
    for name, col in window.columns.items():
        j = owner.get(name)
        if j is None:
            out[name] = np.concatenate([col] * len(masks))
            continue
        drawn = draws.columns[name]
        out[name] = np.concatenate([drawn if mask >> j & 1 else col for mask in masks])
    return out


def _shapley_matrix(players: int) -> np.ndarray:
    """``M[i, S]``: the weight of coalition mask ``S`` in player ``i``'s Shapley value (``M @ v``)."""
    size = np.array([bin(s).count("1") for s in range(1 << players)])
    weight = [
        math.factorial(k) * math.factorial(players - k - 1) / math.factorial(players) for k in range(players)
    ]
    m = np.zeros((players, 1 << players))
    for i in range(players):
        for s in range(1 << players):
            if not s >> i & 1:
                w = weight[size[s]]
                m[i, s | 1 << i] += w
                m[i, s] -= w
    return m


class _Evaluator:
    """The figure and the prediction's figure of coalitions of the same rows, under bootstrap weightings."""

    def __init__(
        self,
        *,
        window: RowSample,
        draws: RowSample,
        predictor: Predictor,
        figure: Figure | None,
        weights: np.ndarray,
        task: Task,
    ) -> None:
        self.window, self.draws, self.predictor = window, draws, predictor
        self.figure, self.weights, self.task = figure, weights, task
        self.evaluations = 0
        self._parts: tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]] | None = None

    def run(
        self, players: Sequence[Sequence[str]], masks: Sequence[int]
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """``([C, B] figure or None, [C, B] or [C, B, K] prediction summaries)`` of coalitions ``masks``."""
        n = self.window.rows
        additive = self.predictor.additive
        if additive is None:  # the model: every coalition's rows in one batched call
            columns = _stacked(self.window, self.draws, players, masks)
            answers = np.asarray(self.predictor.predict(columns), dtype=np.float64)
        self.evaluations += len(masks)
        perf: list[np.ndarray] | None = [] if self.figure is not None else None
        pred = []
        for c, mask in enumerate(masks):
            if additive is None:
                p = answers[c * n : (c + 1) * n]
                cols = {k: v[c * n : (c + 1) * n] for k, v in columns.items()}
            else:
                p, cols = self._summed(additive, players, mask)
            if perf is not None and self.figure is not None:
                perf.append(
                    values(
                        self.figure,
                        predictions=p,
                        weights=self.weights,
                        labels=self.window.labels,
                        columns=cols,
                    )
                )
            pred.append(self._prediction(p))
        return (None if perf is None else np.array(perf)), np.array(pred)

    def _summed(
        self, additive: Additive, players: Sequence[Sequence[str]], mask: int
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A coalition's answers from the parts of an additive model (the window's and the draws', computed
        once), and its columns."""
        if self._parts is None:
            intercept, window = additive.parts(self.window.columns)
            _, drawn = additive.parts(self.draws.columns)
            self._parts = (intercept + sum(window.values()), window, drawn)
        base, window, drawn = self._parts
        scores, cols = base, dict(self.window.columns)
        for j, group in enumerate(players):
            if mask >> j & 1:
                for name in group:
                    if name in window:
                        scores = scores + (drawn[name] - window[name])
                    cols[name] = self.draws.columns[name]
        return np.asarray(additive.answers(np.asarray(scores)), dtype=np.float64), cols

    def _prediction(self, p: np.ndarray) -> np.ndarray:
        """The mean prediction ``[B]`` or, multi-class, the predicted-class shares ``[B, K]``."""
        w = self.weights
        if self.task is Task.MULTICLASS:
            chosen = np.zeros(p.shape)
            chosen[np.arange(p.shape[0]), np.argmax(p, axis=1)] = 1.0
            return (w @ chosen) / w.sum(axis=1, keepdims=True)
        return (w @ p) / w.sum(axis=1)


def _prediction_values(summaries: np.ndarray, task: Task) -> np.ndarray:
    """``[C, B]``: the mean prediction, or multi-class the TV between each coalition's predicted-class shares
    and those of the last coalition (every feature replaced)."""
    if task is not Task.MULTICLASS:
        return summaries
    return 0.5 * np.abs(summaries - summaries[-1][None]).sum(axis=2)


# ---------------------------------------------------------------- attribution


def attribute(
    *,
    reference: RowSample,
    window: RowSample,
    drifted: Sequence[str],
    predictor: Predictor,
    profile: Profile,
    seed: int = 0,
    metric: str | None = None,
) -> dict[str, Any] | None:
    """Split the window's change of performance and prediction between the ``drifted`` features (module
    docstring); None: no drifted feature both samples hold, or too few rows."""
    started = time.perf_counter()
    names = [n for n in dict.fromkeys(drifted) if n in window.columns and n in reference.columns]
    if not names or reference.rows == 0:
        return None
    figure = choose_figure(profile=profile, metric=metric)
    rows = window
    if rows.rows < MIN_ROWS:
        return None
    rng = np.random.default_rng(seed)
    players: list[list[str]] = [[n] for n in names]
    grouped: list[str] = []
    ranking = 0
    if len(names) > MAX_PLAYERS:
        players, grouped, ranking = _rank(names, rows, reference, predictor, figure, profile.task, seed)
    coalitions = 1 << len(players)
    n = min(MAX_ROWS, max(ROW_BUDGET // coalitions, MIN_ROWS), rows.rows)
    sample = rows.take(uniform_positions(rows.rows, n, seed=seed))
    draws = reference.take(rng.integers(0, reference.rows, size=n))
    weights = np.vstack([np.ones(n), rng.multinomial(n, np.full(n, 1.0 / n), size=RESAMPLES)]).astype(
        np.float64
    )
    evaluator = _Evaluator(
        window=sample, draws=draws, predictor=predictor, figure=figure, weights=weights, task=profile.task
    )
    perf, summaries = evaluator.run(players, range(coalitions))
    shapley = _shapley_matrix(len(players))
    pred = _prediction_values(summaries, profile.task)
    pred_effects = -(shapley @ pred)  # [players, B]
    perf_effects = None if perf is None else -(shapley @ perf)
    sizes = {name: drift_size(name, window=window, reference=reference, profile=profile) for name in names}
    return _document(
        figure=figure,
        predictor=predictor,
        players=players,
        grouped=grouped,
        perf=perf,
        perf_effects=perf_effects,
        pred=pred,
        pred_effects=pred_effects,
        sizes=sizes,
        rows=n,
        evaluations=evaluator.evaluations + ranking,
        seconds=time.perf_counter() - started,
    )


def _rank(
    names: Sequence[str],
    rows: RowSample,
    reference: RowSample,
    predictor: Predictor,
    figure: Figure | None,
    task: Task,
    seed: int,
) -> tuple[list[list[str]], list[str], int]:
    """More drifted features than players: each replaced alone; the ones that move the figure most (the
    prediction without one) play alone, the rest as one group. Returns players, the grouped names and the
    coalitions evaluated."""
    rng = np.random.default_rng(seed + 1)
    n = min(MAX_ROWS, rows.rows)
    sample = rows.take(uniform_positions(rows.rows, n, seed=seed))
    draws = reference.take(rng.integers(0, reference.rows, size=n))
    evaluator = _Evaluator(
        window=sample, draws=draws, predictor=predictor, figure=figure, weights=np.ones((1, n)), task=task
    )
    singles = [[name] for name in names]
    masks = [0, *(1 << j for j in range(len(names)))]
    perf, summaries = evaluator.run(singles, masks)
    if perf is not None and np.all(np.isfinite(perf[:, 0])):
        moved = np.abs(perf[1:, 0] - perf[0, 0])
    elif task is Task.MULTICLASS:
        moved = 0.5 * np.abs(summaries[1:, 0] - summaries[0, 0][None]).sum(axis=1)
    else:
        moved = np.abs(summaries[1:, 0] - summaries[0, 0])
    order = np.argsort(-moved, kind="stable")
    alone = [names[j] for j in order[: MAX_PLAYERS - 1]]
    rest = [names[j] for j in order[MAX_PLAYERS - 1 :]]
    return [[a] for a in alone] + [rest], rest, evaluator.evaluations


def _bounds(samples: np.ndarray) -> tuple[float, float]:
    """The percentile bounds of bootstrap values (NaN when none is finite)."""
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return math.nan, math.nan
    lo, hi = np.percentile(finite, [100 * LEVEL / 2, 100 * (1 - LEVEL / 2)])
    return float(lo), float(hi)


def _significant(change: np.ndarray, reference_value: float, figure: Figure | None) -> bool:
    """Whether the total change is a change (module docstring)."""
    if not math.isfinite(change[0]):
        return False
    lo, hi = _bounds(change[1:])
    if not math.isfinite(lo) or lo <= 0 <= hi:
        return False
    if figure is not None and figure.task is Task.REGRESSION:
        return abs(change[0]) >= MIN_RELATIVE_CHANGE * abs(reference_value)
    return abs(change[0]) >= (MIN_CHANGE if figure is not None else 0.0)


def _document(
    *,
    figure: Figure | None,
    predictor: Predictor,
    players: Sequence[Sequence[str]],
    grouped: Sequence[str],
    perf: np.ndarray | None,
    perf_effects: np.ndarray | None,
    pred: np.ndarray,
    pred_effects: np.ndarray,
    sizes: Mapping[str, tuple[float, str]],
    rows: int,
    evaluations: int,
    seconds: float,
) -> dict[str, Any]:
    """The agreed ``report.attribution`` document."""
    main, effects = (
        (perf, perf_effects) if perf is not None and perf_effects is not None else (pred, pred_effects)
    )
    change = main[0] - main[-1]
    significant = _significant(change, float(main[-1, 0]), figure)
    entries = []
    for j, group in enumerate(players):
        effect = float(effects[j, 0])
        lower, upper = _bounds(effects[j, 1:])
        impact = effect / float(change[0]) if significant and change[0] != 0 else 0.0
        harmless = (
            not significant or not lower <= upper or lower <= 0 <= upper or abs(impact) < NEGLIGIBLE_SHARE
        )
        name = GROUP if grouped and j == len(players) - 1 else group[0]
        entry: dict[str, Any] = {
            "name": name,
            "impact": _num(impact),
            "effect": _num(effect) if perf is not None else None,
            "lower": _num(lower) if perf is not None else None,
            "upper": _num(upper) if perf is not None else None,
            "prediction_effect": _num(float(pred_effects[j, 0])),
            "harmless": bool(harmless),
        }
        if name != GROUP:
            entry["drift"], entry["drift_unit"] = _num(sizes[name][0]), sizes[name][1]
        else:
            entry["features"] = list(group)
        entries.append(entry)
    entries.sort(key=lambda e: -abs(e["impact"] or 0.0))
    doc: dict[str, Any] = {
        "method": predictor.method,
        "surrogate_fit": predictor.fit if predictor.method == "surrogate" else None,
        "estimate": None if figure is None else figure.estimate,
        "metric": None if figure is None else figure.metric,
        "change": _num(float(change[0])) if perf is not None else None,
        "change_lower": _num(_bounds(change[1:])[0]) if perf is not None else None,
        "change_upper": _num(_bounds(change[1:])[1]) if perf is not None else None,
        "significant": bool(significant),
        "prediction_change": _num(float(pred[0, 0] - pred[-1, 0])),
        "features": [e for e in entries if e["name"] != GROUP],
        "grouped": list(grouped),
        "grouped_effect": next((e for e in entries if e["name"] == GROUP), None),
        "rows": rows,
        "evaluations": evaluations,
        "resamples": RESAMPLES,
        "seconds": round(seconds, 3),
    }
    for entry in doc["features"]:
        entry["message"] = feature_message(entry, doc)
    doc["message"] = summary_message(doc)
    return doc


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# ---------------------------------------------------------------- words


def _figure_words(doc: Mapping[str, Any]) -> str:
    """``"estimated ROC AUC"``, ``"realised RMSE"``, or ``"mean prediction"`` without a figure."""
    if doc.get("metric") is None:
        return "prediction"
    kind = "realised" if doc.get("estimate") == "realised" else "estimated"
    return f"{kind} {METRIC_NAMES.get(doc['metric'], doc['metric'])}"


def _drift_words(entry: Mapping[str, Any]) -> str:
    size = entry.get("drift")
    if size is None:
        return f"{entry['name']} drifted"
    if entry.get("drift_unit") == "sd":
        return f"{entry['name']} drifted {abs(size):.2g} sd"
    return f"{entry['name']} drifted {size:.2g} in total variation"


def feature_message(entry: Mapping[str, Any], doc: Mapping[str, Any]) -> str:
    """One feature's verdict in plain words."""
    figure = _figure_words(doc)
    drifted = _drift_words(entry)
    if entry["harmless"]:
        return f"{drifted}; it explains none of the {figure} change"
    share = f"{100 * entry['impact']:.0f}%"
    if doc.get("change") is None:
        return (
            f"{drifted}; it explains {share} of the prediction's change ({entry['prediction_effect']:+.3g})"
        )
    bounds = f"{entry['lower']:+.3f} to {entry['upper']:+.3f}"
    part = f"{entry['effect']:+.3f} of {doc['change']:+.3f}, {bounds}"
    return f"{drifted}; it explains {share} of the {figure} change ({part})"


def summary_message(doc: Mapping[str, Any]) -> str:
    """The attribution in one or two sentences."""
    figure = _figure_words(doc)
    change = doc.get("change") if doc.get("change") is not None else doc.get("prediction_change")
    total = "unknown" if change is None else f"{change:+.3f}"
    harmful = [e for e in doc["features"] if not e["harmless"]]
    harmless = [e["name"] for e in doc["features"] if e["harmless"]]
    if not doc.get("significant"):
        text = f"the drifted features explain no significant {figure} change ({total})"
    else:
        text = "; ".join(
            f"{e['name']} explains {100 * e['impact']:.0f}% of the {figure} change ({total})" for e in harmful
        )
        text = text or f"no single drifted feature explains the {figure} change ({total})"
    if harmless and doc.get("significant"):
        text += f"; {', '.join(harmless)} drifted harmlessly"
    if doc.get("grouped"):
        text += f" ({len(doc['grouped'])} more drifted features attributed as one group)"
    if doc.get("method") == "surrogate" and doc.get("surrogate_fit"):
        fit = doc["surrogate_fit"]
        text += f" [a surrogate of the model, {fit['metric']} {fit['value']:.2f} on held-out reference rows]"
    return text


def apply_impacts(report: DriftReport, attribution: Mapping[str, Any]) -> None:
    """Set each attributed feature's ``impact`` on the report (a grouped feature gets its group's entry)."""
    entries = {e["name"]: e for e in attribution.get("features") or []}
    group = attribution.get("grouped_effect")
    features = []
    for feature in report.features:
        entry = entries.get(feature.name)
        if entry is None and group is not None and feature.name in group.get("features", []):
            others = ", ".join(n for n in group["features"] if n != feature.name)
            words = "none" if group["harmless"] else f"{100 * group['impact']:.0f}%"
            said = f"together they explain {words} of the {_figure_words(attribution)} change"
            entry = {
                **group,
                "name": feature.name,
                "message": f"{feature.name} was attributed with {others}: {said}",
            }
        features.append(replace(feature, impact=dict(entry)) if entry is not None else feature)
    report.features = features
    report.attribution = dict(attribution)
