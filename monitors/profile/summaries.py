"""A column summarised: a numeric column's quantile sketch and bins, a categorical column's counts, a
binary model's reliability table."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.order import PartialSort, Scratch, partial_sort
from core.tabular import Column, as_float, value_counts
from monitors.binning import coarse_counts, count_ordered
from monitors.profile.profiles import N_BINS, N_QUANTILES, OTHER_LEVELS, PROFILE_LEVELS
from registry.schema import FeatureKind

CALIBRATION_BINS = 20


def quantile_positions(n: int, q: np.ndarray) -> np.ndarray:
    """Positions in ``n`` sorted values of the quantiles ``q`` by ``np.quantile(method="inverted_cdf")``.

    Parameters
    ----------
    n : int
        Number of values (at least 1).
    q : np.ndarray
        Probabilities in [0, 1].

    Returns
    -------
    np.ndarray
        Integer positions: the smallest ``i`` with ``(i + 1) / n >= q`` (numpy's rule, in its arithmetic), so
        ``sorted_values[positions]`` equals ``np.quantile(values, q, method="inverted_cdf")`` without
        partitioning the values again.
    """
    index = n * np.asarray(q, dtype=np.float64) - 1
    below = np.floor(index)
    positions = np.where(index - below == 0, below, below + 1).astype(np.intp)
    return np.clip(positions, 0, n - 1)


def numeric_summary(
    values: Column, *, name: str, n_quantiles: int = N_QUANTILES, n_bins: int = N_BINS
) -> dict[str, Any]:
    """Summary dict of one numeric column (NaN = missing): :func:`present_summary` of its present values."""
    x = as_float(values)
    missing = np.isnan(x)
    present = x[~missing] if missing.any() else x
    return present_summary(
        present, missing=int(x.size - present.size), name=name, n_quantiles=n_quantiles, n_bins=n_bins
    )


def present_summary(
    present: np.ndarray,
    *,
    missing: int,
    name: str,
    n_quantiles: int = N_QUANTILES,
    n_bins: int = N_BINS,
    order: PartialSort | None = None,
) -> dict[str, Any]:
    """Summary dict of a numeric column's ``present`` values (float64, no NaN; ``missing`` more were NaN):
    its quantiles read off a partial sort (``order``: the caller's :func:`quantile_order` of them), its
    grid counted on the values. An infinity is a value (a quantile, a grid point, an end cell's count);
    ``mean`` and ``std`` are those of the finite values (an infinity would make both inf or NaN)."""
    out: dict[str, Any] = {"kind": FeatureKind.NUMERIC.value, "name": name, "count": int(present.size)}
    out["missing"] = int(missing)
    if present.size == 0:
        out.update(
            mean=0.0, std=0.0, min=None, max=None, quantiles=[], grid=[], grid_counts=[0], grid_sums=[0.0]
        )
        out.update(bin_cuts=[], bin_counts=[0])
        return out
    if order is None:
        order = quantile_order(present, n_quantiles=n_quantiles)
    elif order.size != present.size:
        raise ValueError(f"{name}: a sort of {order.size} values given for {present.size} present values")
    q = order.take(quantile_positions(present.size, np.linspace(0.0, 1.0, n_quantiles)))
    grid = np.unique(q)
    counts = count_ordered(order, grid)
    ordered = order.values if order.whole else present  # a whole sort's sums are taken as they always were
    if not (np.isfinite(q[0]) and np.isfinite(q[-1])):  # an infinity: the spread is the finite values'
        ordered = ordered[np.isfinite(ordered)]
    # decile cuts are taken from the sketch itself, so they are grid points
    cuts = np.unique(q[np.round(np.arange(1, n_bins) * (n_quantiles - 1) / n_bins).astype(np.int64)])
    cuts = cuts[cuts < grid[-1]]  # a cut at the maximum would leave an always-empty last bin
    out.update(
        mean=float(ordered.mean()) if ordered.size else 0.0,
        std=float(ordered.std()) if ordered.size else 0.0,
        min=float(q[0]),
        max=float(q[-1]),
        quantiles=q.tolist(),
        grid=grid.tolist(),
        grid_counts=counts.cells.tolist(),
        grid_sums=counts.sums.tolist(),
        bin_cuts=cuts.tolist(),
        bin_counts=coarse_counts(counts.cells, grid, cuts).tolist(),
    )
    return out


def quantile_order(
    present: np.ndarray,
    *,
    spans: list[tuple[int, int]] | None = None,
    n_quantiles: int = N_QUANTILES,
    scratch: Scratch | None = None,
) -> PartialSort:
    """The partial sort of a column's present values (float64, no NaN) that :func:`present_summary` reads
    its quantiles off, sorted over ``spans`` too (a caller's other reads); ``scratch``: as
    :func:`core.order.partial_sort`."""
    positions = quantile_positions(present.size, np.linspace(0.0, 1.0, n_quantiles))
    ranks = positions if present.size else positions[:0]
    return partial_sort(present, ranks=ranks, spans=spans or (), scratch=scratch)


def categorical_summary(values: Column, *, name: str) -> dict[str, Any]:
    """Summary dict of one categorical column (None or "" = missing)."""
    counts = value_counts(values)
    missing = 0
    cats: dict[str, int] = {}
    for key, n in counts.items():
        if key is None or key == "" or (isinstance(key, float) and np.isnan(key)):
            missing += n
        else:
            cats[str(key)] = cats.get(str(key), 0) + n
    if len(cats) > PROFILE_LEVELS:  # a high-cardinality feature (an id): the profile stays bounded
        top = sorted(cats.items(), key=lambda kv: (-kv[1], kv[0]))[: PROFILE_LEVELS - 1]
        cats = {**dict(top), OTHER_LEVELS: sum(cats.values()) - sum(n for _, n in top)}
    return {
        "kind": FeatureKind.CATEGORICAL.value,
        "name": name,
        "count": int(sum(cats.values())),
        "missing": int(missing),
        "categories": dict(sorted(cats.items())),
    }


def calibration_table(predictions: np.ndarray, labels: np.ndarray) -> dict[str, list[float]]:
    """Reliability table on prediction-quantile bins: mean prediction and mean label per bin."""
    order = np.argsort(predictions, kind="stable")
    p, y = predictions[order], labels[order].astype(np.float64)
    chunks = np.array_split(np.arange(p.size), min(CALIBRATION_BINS, max(p.size, 1)))
    mean_p = [float(p[c].mean()) for c in chunks if c.size]
    mean_y = [float(y[c].mean()) for c in chunks if c.size]
    # isotonic (pool adjacent violators) so the map is monotone
    from scipy.optimize import isotonic_regression

    weights = [float(c.size) for c in chunks if c.size]
    fitted = isotonic_regression(mean_y, weights=weights).x
    return {"mean_prediction": mean_p, "mean_label": [float(v) for v in fitted]}
