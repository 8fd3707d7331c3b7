"""``driftwarden drift``: exit codes, JSON and HTML outputs, registered reference versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from core.config import get_settings
from core.tabular import write_table
from registry.schema import infer_schema
from service.cli import app
from tests.monitors.helpers import true_probability
from training.cluster.datagen import generate

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("drift")
    out = {}
    for name, scenario, seed, rows in (
        ("reference", "baseline", 61, 20_000),
        ("same", "baseline", 62, 5_000),
        ("shifted", "covariate_shift", 63, 5_000),
    ):
        cols = generate(rows, scenario=scenario, seed=seed)
        cols["prediction"] = true_probability(cols)
        out[name] = write_table(cols, root / f"{name}.{'csv' if name == 'same' else 'parquet'}")
    return out


def test_shifted_file_exits_1_with_reports(files: dict[str, Path], tmp_path: Path) -> None:
    args = ["drift", str(files["reference"]), str(files["shifted"]), "--target", "default"]
    args += [
        "--prediction-column",
        "prediction",
        "--json",
        str(tmp_path / "r.json"),
        "--html",
        str(tmp_path / "r.html"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "DATASET DRIFTED" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["dataset"]["drifted"] is True
    assert [f["name"] for f in report["features"][:3]] == sorted(
        [f["name"] for f in report["features"][:3]], key=lambda n: -_effect(report, n)
    )
    assert {f["name"] for f in report["features"] if f["drifted"]} == {"age", "income", "credit_score"}
    assert "prediction" not in {f["name"] for f in report["features"]}  # the prediction is not a feature
    assert report["prediction"]["drifted"] is True and report["performance"]["label_coverage"] == 1.0
    page = (tmp_path / "r.html").read_text()
    # a histogram per feature, the prediction and the multivariate detector (the summary's bars apart)
    assert page.startswith("<!doctype html>") and page.count(' histogram">') == len(report["features"]) + 2


def _effect(report: dict[str, Any], name: str) -> float:
    return next(f["result"]["effect"] for f in report["features"] if f["name"] == name)


def test_same_distribution_exits_0(files: dict[str, Path]) -> None:
    result = runner.invoke(app, ["drift", str(files["reference"]), str(files["same"]), "--target", "default"])
    assert result.exit_code == 0, result.output
    assert "dataset stable" in result.output


def test_reference_version_from_registry(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile_dict: dict[str, Any]
) -> None:
    schema = infer_schema(generate(1_000, seed=64), target="default")
    meta = tmp_path / "credit" / "3" / "driftwarden"
    meta.mkdir(parents=True)
    (meta / "schema.json").write_text(json.dumps(schema.to_dict()))
    (meta / "profile.json").write_text(json.dumps(profile_dict))
    monkeypatch.setenv("DRIFTWARDEN_REGISTRY_PATH", str(tmp_path))
    get_settings.cache_clear()
    try:
        shifted = runner.invoke(app, ["drift", str(files["shifted"]), "--reference-version", "credit:3"])
        same = runner.invoke(app, ["drift", str(files["same"]), "--reference-version", "credit:3"])
        missing = runner.invoke(app, ["drift", str(files["same"]), "--reference-version", "credit:9"])
    finally:
        get_settings.cache_clear()
    assert shifted.exit_code == 1, shifted.output
    assert same.exit_code == 0, same.output
    assert missing.exit_code == 2 and "no registered version" in missing.output


def test_bad_arguments_exit_2(files: dict[str, Path]) -> None:
    assert runner.invoke(app, ["drift", str(files["same"])]).exit_code == 2
