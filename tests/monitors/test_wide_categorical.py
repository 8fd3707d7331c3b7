"""A high-cardinality categorical (an id) in the reference profile and the drift tests: its most frequent
levels plus one count of the others, so the profile stays bounded and chi-square still compares; and
`driftwarden drift` on a file holding such text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.tabular import write_table
from monitors.drift.categorical import CategoricalCounts, ChiSquare
from monitors.profile import OTHER_LEVELS, PROFILE_LEVELS, categorical_summary
from tests.monitors.helpers import drift_report


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


def _export(seed: int, *, shift: float = 0.0, new_cities: float = 0.0) -> dict[str, np.ndarray]:
    """A table as a team exports it: a numeric feature, a city of 500 levels (a long tail) and a user id."""
    rng = np.random.default_rng(seed)
    n = 20_000
    city = np.array([f"city_{int(v)}" for v in rng.zipf(1.6, n).clip(1, 500)], dtype=object)
    city[rng.random(n) < new_cities] = "city_new"
    user = np.array([f"u{seed}_{i}" for i in range(n)], dtype=object)
    return {"amount": rng.normal(shift, 1.0, n), "city": city, "user_id": user}


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("wide")
    tables = {"reference": _export(0), "same": _export(1), "new cities": _export(2, new_cities=0.3)}
    return {name: write_table(cols, root / f"{name}.parquet") for name, cols in tables.items()}


def _flagged(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(q["feature"], q["check"]) for q in report["quality"] if q["flagged"]}


def test_drift_compares_text_of_many_values_as_a_folded_categorical(
    exports: dict[str, Path], tmp_path: Path
) -> None:
    """An id and a long-tailed text column from the same source: compared, stable, and no quality alarm
    (a window's value of a level the profile folded is none of the kept ones: expected, not unseen)."""
    code, report = drift_report(exports["reference"], exports["same"], tmp_path)  # was exit 2: "--embed"
    kinds = {f["name"]: f["kind"] for f in report["features"]}
    assert kinds == {"amount": "numeric", "city": "categorical", "user_id": "categorical"}
    assert code == 0 and not _flagged(report), report["quality"]


def test_new_values_of_a_folded_categorical_are_still_an_alarm(
    exports: dict[str, Path], tmp_path: Path
) -> None:
    """30 % of the window's cities never seen: the unseen-category check flags them, and city drifted."""
    code, report = drift_report(exports["reference"], exports["new cities"], tmp_path)
    assert code == 1 and ("city", "unseen_category") in _flagged(report)
    assert ("user_id", "unseen_category") not in _flagged(report)
    assert next(f for f in report["features"] if f["name"] == "city")["drifted"]
