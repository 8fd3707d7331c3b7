"""Offline `driftwarden drift --reference-version` per task: the version's task decides what `--target`
holds (0/1, class names or indices, numbers) and what `--prediction-column` may be; only the contract's
features are compared, the file's other columns listed once as ignored (issue 40, item 5). No TensorFlow:
each version is a folder with its contract and profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from core.config import get_settings
from core.tabular import write_table
from monitors.profile import build_reference_profile
from registry.schema import ModelSchema, Task, infer_schema, label_codes
from service.cli import app
from tests.monitors.references import CLASSES, multiclass_reference, regression_reference

runner = CliRunner()


def _register(name: str, schema: ModelSchema, profile: dict[str, Any]) -> None:
    """A registered version's files: its contract and its profile (what --reference-version reads)."""
    meta = get_settings().registry_path / name / "1" / "driftwarden"
    meta.mkdir(parents=True)
    (meta / "schema.json").write_text(json.dumps(schema.to_dict()))
    (meta / "profile.json").write_text(json.dumps(profile))


@pytest.fixture
def spend(tmp_path: Path) -> Path:
    """spend:1, a regression of ``y``; live.csv: fresh rows of the same process with the target, the
    model's values, a second label column and an id."""
    cols, mean = regression_reference()
    schema = infer_schema(cols, target="y", task=Task.REGRESSION)
    _register("spend", schema, build_reference_profile(cols, schema, predictions=mean, labels=cols["y"]))
    rng = np.random.default_rng(7)
    n = 2_000
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    region = rng.choice(np.array(["north", "south"], dtype=object), size=n)
    value = 3 * x1 - x2 + (region == "south")
    live = {
        "x1": x1,
        "x2": x2,
        "region": region,
        "y": value + (0.5 + np.exp(0.5 * x1)) * rng.normal(size=n),
        "predicted": value,
        "segment": rng.choice(np.array(["a", "b"], dtype=object), size=n),  # another team's label
        "customer_id": np.arange(n) * 1000,
    }
    path = tmp_path / "live.csv"
    write_table(live, path)
    return path


@pytest.fixture
def segment(tmp_path: Path) -> dict[str, Path]:
    """segment:1, a 3-class model of ``label``; files of fresh rows with the labels as names, as indices,
    and with a label that is no class."""
    cols, prob = multiclass_reference()
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=CLASSES)
    labels = label_codes(cols["label"], schema.classes)
    _register("segment", schema, build_reference_profile(cols, schema, predictions=prob, labels=labels))
    fresh, prob = multiclass_reference(1_500)
    fresh = {k: v[::-1].copy() for k, v in fresh.items()}  # other rows' order: still the same process
    fresh["p_high"] = prob[::-1, 2]
    out = {}
    for kind, label in (
        ("names", fresh["label"]),
        ("indices", label_codes(fresh["label"], CLASSES).astype(np.int64)),
        ("unknown", np.where(np.arange(1_500) == 3, "extreme", fresh["label"]).astype(object)),
    ):
        out[kind] = tmp_path / f"{kind}.csv"
        write_table({**fresh, "label": label}, out[kind])
    return out


def _drift(*args: str | Path) -> Any:
    return runner.invoke(app, ["drift", *[str(a) for a in args]])


def _one_line_error(result: Any, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_regression_target_takes_numbers_and_only_the_contracts_features_are_compared(spend: Path) -> None:
    result = _drift("--reference-version", "spend:1", spend, "--target", "y", "--json", "-")
    assert result.exit_code == 0, result.output  # same process: stable (today: exit 2 "must hold 0/1")
    report = json.loads(result.stdout)
    assert sorted(f["name"] for f in report["features"]) == ["region", "x1", "x2"]  # no label, no id
    assert report["ignored_columns"] == ["predicted", "segment", "customer_id"]
    assert (
        result.stderr.count("ignored (not features of the reference): predicted, segment, customer_id") == 1
    )
    without = _drift("--reference-version", "spend:1", spend, "--json", "-")
    assert without.exit_code == 0, without.output
    assert sorted(f["name"] for f in json.loads(without.stdout)["features"]) == ["region", "x1", "x2"]


def test_regression_labels_and_values_give_its_metrics(spend: Path) -> None:
    result = _drift(
        "--reference-version",
        "spend:1",
        spend,
        "--target",
        "y",
        "--prediction-column",
        "predicted",
        "--json",
        "-",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["performance"]["rows"] == 2_000 and report["performance"]["rmse"] > 0
    assert "segment" in report["ignored_columns"] and "predicted" not in report["ignored_columns"]


def test_regression_target_that_holds_text_is_one_line(spend: Path) -> None:
    result = _drift("--reference-version", "spend:1", spend, "--target", "segment")
    _one_line_error(result, "--target 'segment'", "regression's target values (numbers)", "'a'")


def test_multiclass_target_takes_class_names_or_indices(segment: dict[str, Path]) -> None:
    for kind in ("names", "indices"):
        result = _drift("--reference-version", "segment:1", segment[kind], "--target", "label", "--json", "-")
        assert result.exit_code == 0, (kind, result.output)
        report = json.loads(result.stdout)
        assert sorted(f["name"] for f in report["features"]) == ["region", "x1", "x2"]
        assert report["ignored_columns"] == ["p_high"]
    unknown = _drift("--reference-version", "segment:1", segment["unknown"], "--target", "label")
    _one_line_error(unknown, "class names (low, mid, high) or their indices 0-2", "'extreme'")


def test_a_binary_only_flag_on_a_multiclass_version_is_one_line(
    segment: dict[str, Path], tmp_path: Path
) -> None:
    result = _drift(
        "--reference-version",
        "segment:1",
        segment["names"],
        "--target",
        "label",
        "--prediction-column",
        "p_high",
    )
    _one_line_error(
        result, "--prediction-column 'p_high'", "segment:1 is multi-class (classes low, mid, high)"
    )
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps({"classification_threshold": 0.3}))
    threshold = _drift("--reference-version", "segment:1", segment["names"], "--config", config)
    _one_line_error(threshold, "'classification_threshold' applies to binary models", "segment:1")
