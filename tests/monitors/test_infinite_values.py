"""A numeric feature holding infinities (a ratio over a zero, say): the comparison still judges its finite
values, with no NaN, no overflow warning and no failure of the multivariate detector on the way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.tabular import Columns, write_table
from monitors.profile import build_reference_profile
from registry.schema import infer_schema
from tests.monitors.helpers import drift_report

ROWS = 20_000


def _columns(seed: int, *, shift: float = 0.0) -> Columns:
    rng = np.random.default_rng(seed)
    return {
        "ratio": rng.normal(shift, 1.0, ROWS),
        "b": rng.normal(0.0, 1.0, ROWS),
        "c": rng.exponential(1.0, ROWS),
        "k": rng.choice(np.array(["x", "y"], dtype=object), ROWS),
    }


def _with_infinities(cols: Columns) -> Columns:
    cols["ratio"][[5, 50]] = np.inf
    cols["ratio"][500] = -np.inf
    return cols


def _reference() -> Columns:
    return _with_infinities(_columns(1))


def _labelled(cols: Columns, seed: int) -> Columns:
    """``cols`` with a model's answers (``prediction``, of the finite values) and the labels it predicts."""
    logit = np.nan_to_num(cols["ratio"], posinf=0.0, neginf=0.0) - cols["b"] + 0.5 * cols["c"]
    p = 1.0 / (1.0 + np.exp(-logit))
    label = (np.random.default_rng(seed).random(ROWS) < p).astype(np.int64)
    return {**cols, "prediction": p, "label": label}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("infinite")
    tables = {"reference": _reference(), "same": _columns(2), "shifted": _columns(3, shift=0.5)}
    tables["labelled reference"] = _labelled(_reference(), 4)
    tables["labelled shifted"] = _labelled(_with_infinities(_columns(5, shift=0.5)), 6)
    return {name: write_table(cols, root / f"{name}.parquet") for name, cols in tables.items()}


@pytest.mark.filterwarnings("error")  # a NaN or an overflow on the way would warn
def test_a_shift_of_the_finite_values_is_drift_with_a_finite_effect(
    files: dict[str, Path], tmp_path: Path
) -> None:
    code, report = drift_report(files["reference"], files["shifted"], tmp_path)
    assert code == 1
    ratio = next(f for f in report["features"] if f["name"] == "ratio")
    assert ratio["drifted"] and ratio["result"]["effect"] == pytest.approx(0.5, abs=0.05)
    assert report["multivariate"] is not None  # fitted with the infinities as missing values


@pytest.mark.filterwarnings("error")
def test_the_same_finite_values_without_the_infinities_are_stable(
    files: dict[str, Path], tmp_path: Path
) -> None:
    code, report = drift_report(files["reference"], files["same"], tmp_path)
    assert code == 0, report["features"]
    ratio = next(f for f in report["features"] if f["name"] == "ratio")
    assert not ratio["drifted"] and 0.0 <= ratio["result"]["effect"] < 0.05


@pytest.mark.filterwarnings("error")
def test_the_explanations_read_the_shift_of_the_finite_values(files: dict[str, Path], tmp_path: Path) -> None:
    """With the model's answers and labels: the drift's size in the attribution is the shift's, not NaN."""
    labelled = ("--target", "label", "--prediction-column", "prediction")
    code, report = drift_report(files["labelled reference"], files["labelled shifted"], tmp_path, *labelled)
    assert code == 1
    ratio = next(f for f in report["attribution"]["features"] if f["name"] == "ratio")
    assert ratio["drift"] == pytest.approx(0.5, abs=0.05) and ratio["drift_unit"] == "sd"


def test_the_profile_keeps_the_infinities_as_values_and_a_finite_spread() -> None:
    cols = _reference()
    schema = infer_schema({**cols, "y": np.arange(ROWS) % 2}, target="y")
    profile = build_reference_profile(cols, schema)
    ratio = profile["features"]["ratio"]
    finite = cols["ratio"][np.isfinite(cols["ratio"])]
    assert ratio["min"] == -np.inf and ratio["max"] == np.inf and ratio["count"] == ROWS
    assert ratio["mean"] == pytest.approx(finite.mean()) and ratio["std"] == pytest.approx(finite.std())
    json.dumps({k: v for k, v in profile.items() if k != "features"}, allow_nan=False)  # PCA: all finite
