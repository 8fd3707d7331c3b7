"""A high-cardinality categorical (an id) in the reference profile and the drift tests: its most frequent
levels plus one count of the others, so the profile stays bounded and chi-square still compares."""

from __future__ import annotations

import numpy as np

from monitors.drift.categorical import CategoricalCounts, ChiSquare
from monitors.profile import OTHER_LEVELS, PROFILE_LEVELS, categorical_summary


def _ids(rng: np.random.Generator, n: int, levels: int, *, prefix: str = "m") -> np.ndarray:
    popular = rng.random(n) < 0.5  # half the rows on 100 popular ids, half spread over all of them
    codes = np.where(popular, rng.integers(0, 100, n), rng.integers(0, levels, n))
    return np.array([f"{prefix}{c}" for c in codes], dtype=object)


def test_profile_keeps_the_most_frequent_levels_and_folds_the_rest() -> None:
    values = _ids(np.random.default_rng(1), 20_000, 50_000)
    summary = categorical_summary(values, name="merchant_id")
    cats = summary["categories"]
    assert len(cats) == PROFILE_LEVELS
    assert sum(cats.values()) == summary["count"] == 20_000  # no row lost
    assert {f"m{c}" for c in range(100)} <= set(cats)  # the popular ids are kept by name
    assert cats[OTHER_LEVELS] > 5_000


def test_chi_square_compares_a_window_against_the_folded_profile() -> None:
    rng = np.random.default_rng(2)
    reference = CategoricalCounts(
        counts=categorical_summary(_ids(rng, 20_000, 50_000), name="x")["categories"]
    )
    same = CategoricalCounts.from_values(_ids(rng, 5_000, 50_000))
    moved = CategoricalCounts.from_values(_ids(rng, 5_000, 50_000, prefix="new"))  # every id a new one
    test = ChiSquare()
    kept = test.measure(reference, same).p_value
    assert kept is not None and kept > 0.001
    shifted = test.measure(reference, moved)
    assert shifted.p_value is not None and shifted.p_value < 1e-6 and shifted.details["dof"] <= PROFILE_LEVELS
