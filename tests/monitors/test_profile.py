"""The reference profile: content, JSON round trip, exact grid counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from core.tabular import Columns
from monitors.binning import coarse_counts, count_on_grid
from monitors.profile import (
    N_QUANTILES,
    CategoricalProfile,
    NumericProfile,
    build_reference_profile,
    read_profile,
    write_profile,
)
from registry.schema import ModelSchema


def test_numeric_feature_summary_matches_numpy(reference: Columns, profile_dict: dict[str, Any]) -> None:
    x = reference["employment_years"]
    present = x[~np.isnan(x)]
    f = profile_dict["features"]["employment_years"]
    assert f["count"] == present.size
    assert f["missing"] == int(np.isnan(x).sum()) > 0
    assert np.isclose(f["mean"], present.mean(), rtol=1e-12)
    assert np.isclose(f["std"], present.std(), rtol=1e-12)
    assert f["min"] == present.min() and f["max"] == present.max()
    assert len(f["quantiles"]) == N_QUANTILES
    want = np.quantile(present, np.linspace(0, 1, N_QUANTILES), method="inverted_cdf")
    assert np.allclose(f["quantiles"], want)
    assert sum(f["grid_counts"]) == present.size
    assert sum(f["bin_counts"]) == present.size
    # decile bins hold about a tenth each
    shares = np.asarray(f["bin_counts"]) / present.size
    assert shares.min() > 0.05 and shares.max() < 0.15


def test_categorical_feature_summary(reference: Columns, profile_dict: dict[str, Any]) -> None:
    f = profile_dict["features"]["home_ownership"]
    values, counts = np.unique(reference["home_ownership"].astype(str), return_counts=True)
    assert f["categories"] == dict(zip(values.tolist(), counts.tolist(), strict=True))
    assert f["missing"] == 0


def test_grid_counts_are_exact_cdf(reference: Columns, profile_dict: dict[str, Any]) -> None:
    x = reference["income"]
    f = profile_dict["features"]["income"]
    grid = np.asarray(f["grid"])
    cells = np.asarray(f["grid_counts"])
    cum = np.cumsum(cells)
    # after cell 2j+1 we have #x <= g_j; after cell 2j we have #x < g_j (checked on every 7th point)
    idx = np.arange(0, grid.size, 7)
    assert np.array_equal(cum[2 * idx + 1], (x[:, None] <= grid[None, idx]).sum(axis=0))
    assert np.array_equal(cum[2 * idx], (x[:, None] < grid[None, idx]).sum(axis=0))
    assert np.array_equal(coarse_counts(cells, grid, np.asarray(f["bin_cuts"])), f["bin_counts"])


def test_counts_merge_across_chunks() -> None:
    rng = np.random.default_rng(3)
    grid = np.unique(np.round(rng.normal(size=500), 2))
    x = np.round(rng.normal(0.3, 1.5, size=10_000), 2)
    x[::17] = np.nan
    whole = count_on_grid(x, grid)
    parts = count_on_grid(x[:3000], grid).merge(count_on_grid(x[3000:], grid))
    assert np.array_equal(whole.cells, parts.cells)
    assert whole.missing == parts.missing == int(np.isnan(x).sum())
    assert np.allclose(whole.sums, parts.sums, rtol=1e-12)
    assert np.isclose(whole.sums[0], np.sum(x[x < grid[0]]))
    assert np.isclose(whole.sums[-1], np.sum(x[x > grid[-1]]))
    assert np.isclose(whole.sums[3], np.sum(x[x == grid[1]]))
    assert np.isclose(whole.sums[4], np.sum(x[(x > grid[1]) & (x < grid[2])]))


def test_json_round_trip(tmp_path: Path, profile_dict: dict[str, Any]) -> None:
    path = write_profile(profile_dict, tmp_path / "profile.json")
    json.loads(path.read_text())  # strict JSON (no NaN)
    prof = read_profile(path)
    assert isinstance(prof.features["age"], NumericProfile)
    assert isinstance(prof.features["region"], CategoricalProfile)
    assert prof.prediction is not None and prof.prediction.count == profile_dict["rows"]
    assert prof.performance is not None and 0.9 < prof.performance["roc_auc"] <= 1.0
    assert prof.multivariate is not None and prof.multivariate.components.shape[1] == 7
    assert prof.calibration is not None and np.all(np.diff(prof.calibration["mean_label"]) >= 0)


def test_profile_without_predictions(reference: Columns, schema: ModelSchema) -> None:
    prof = build_reference_profile(reference, schema)
    assert prof["prediction"] is None and prof["performance"] is None
    assert set(prof["features"]) == set(schema.feature_names)
