"""``driftwarden.compare`` and ``driftwarden.profile``: the engine of ``driftwarden drift``, on frames, Arrow
tables and files, with its checks and settings; the report's renderings; a profile saved and loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from typer.testing import CliRunner

import driftwarden
from core.tabular import write_table
from service.cli import app
from training.cluster.datagen import TARGET, generate

PLANTED = {"income", "age", "credit_score"}  # what training.cluster.datagen's covariate shift moves


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, reference_frame: pd.DataFrame) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("api-files")
    return {
        "reference": write_table(generate(3_000, seed=1), root / "reference.parquet"),
        "current": write_table(generate(1_500, seed=2, scenario="covariate_shift"), root / "current.parquet"),
    }


@pytest.fixture(scope="module")
def report(reference_frame: pd.DataFrame, shifted_frame: pd.DataFrame) -> driftwarden.Report:
    return driftwarden.compare(reference_frame, shifted_frame, target=TARGET)


def test_compare_on_frames_equals_driftwarden_drift_on_the_same_data(
    report: driftwarden.Report, files: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "drift.json"
    args = ["drift", str(files["reference"]), str(files["current"]), "--target", TARGET, "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output  # drifted
    assert report.to_dict() == json.loads(out.read_text())
    assert set(report.drifted_features) == PLANTED and report.drifted


def test_paths_and_arrow_tables_give_the_same_report(
    report: driftwarden.Report, files: dict[str, Path], shifted_frame: pd.DataFrame
) -> None:
    from_paths = driftwarden.compare(str(files["reference"]), files["current"], target=TARGET)
    reference = pa.Table.from_pandas(pd.read_parquet(files["reference"]))
    from_tables = driftwarden.compare(reference, pa.Table.from_pandas(shifted_frame), target=TARGET)
    assert from_paths.to_dict() == report.to_dict() == from_tables.to_dict()


def test_settings_are_the_monitor_settings_of_driftwarden_drift(
    reference_frame: pd.DataFrame, shifted_frame: pd.DataFrame
) -> None:
    strict = driftwarden.compare(reference_frame, shifted_frame, target=TARGET, drift_share=0.5)
    assert not strict.drifted and strict.report.dataset.drift_share == 0.5  # 3 of 10 drifted: below half
    off = driftwarden.compare(
        reference_frame, shifted_frame, target=TARGET, features={"income": {"enabled": False}}
    )
    assert "income" not in {f.name for f in off.report.features}


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"alfa": 0.01}, "unknown setting 'alfa'"),
        ({"alpha": 2}, "setting 'alpha': Input should be less than 1"),
        ({"numeric_test": "nope"}, "setting 'numeric_test'"),
    ],
)
def test_a_bad_setting_is_invalid_input_naming_it(
    reference_frame: pd.DataFrame, settings: dict[str, object], named: str
) -> None:
    with pytest.raises(driftwarden.InvalidInput, match=named) as caught:
        driftwarden.compare(reference_frame, reference_frame, **settings)  # type: ignore[arg-type]
    assert isinstance(caught.value, ValueError)


def test_bad_data_is_invalid_input_naming_the_column_and_the_rule(
    reference_frame: pd.DataFrame, shifted_frame: pd.DataFrame
) -> None:
    with pytest.raises(driftwarden.InvalidInput, match="target='defualt' is not a column of REFERENCE"):
        driftwarden.compare(reference_frame, shifted_frame, target="defualt")
    with pytest.raises(driftwarden.InvalidInput, match="fewer than|too few|rows"):
        driftwarden.compare(reference_frame.head(5), shifted_frame, target=TARGET)
    with pytest.raises(driftwarden.InvalidInput, match="expected a pandas DataFrame"):
        driftwarden.compare([1, 2, 3], shifted_frame)
    with pytest.raises(driftwarden.InvalidInput, match="not found"):
        driftwarden.compare("no-such-file.parquet", shifted_frame)
    with pytest.raises(driftwarden.InvalidInput, match="task 'ordinal'"):
        driftwarden.compare(reference_frame, shifted_frame, task="ordinal")


def test_task_settles_the_labels_as_the_schema_does() -> None:
    reference = pd.DataFrame(generate(2_000, seed=3, task="multiclass"))
    current = pd.DataFrame(generate(1_000, seed=4, task="multiclass", scenario="covariate_shift"))
    with pytest.raises(driftwarden.InvalidInput, match="risk_band"):  # class names are not 0/1 labels
        driftwarden.compare(reference, current, target="risk_band")
    report = driftwarden.compare(reference, current, target="risk_band", task="multiclass")
    assert "risk_band" not in {f.name for f in report.report.features}
    assert set(report.drifted_features) >= PLANTED
    profiled = driftwarden.profile(reference, target="risk_band", task="multiclass")
    assert profiled.task == "multiclass" and profiled.schema.classes == ("high", "low", "medium")

    losses = pd.DataFrame(generate(2_000, seed=3, task="regression"))
    with pytest.raises(driftwarden.InvalidInput, match="loss_amount"):  # amounts are not 0/1 labels
        driftwarden.profile(losses, target="loss_amount")
    regression = driftwarden.profile(losses, target="loss_amount", task="regression")
    assert regression.task == "regression" and "loss_amount" not in regression.features
    low, high = losses["loss_amount"].min(), losses["loss_amount"].max()
    assert regression.schema.output.expected_min is not None and regression.schema.output.expected_min < low
    assert regression.schema.output.expected_max is not None and regression.schema.output.expected_max > high


def test_summary_has_one_row_per_feature_and_output(report: driftwarden.Report) -> None:
    summary = report.summary()
    assert list(summary.columns[:6]) == ["feature", "kind", "verdict", "statistic", "effect", "effect_name"]
    assert {"p_value", "threshold"} <= set(summary.columns)
    features = {f.name for f in report.report.features}
    assert features <= set(summary["feature"]) and len(summary) == len(report.rows())
    drifted = summary[summary["verdict"] == "drift"]
    assert set(drifted["feature"]) >= PLANTED
    assert set(summary["verdict"]) <= {"drift", "ok"}
    income = summary.set_index("feature").loc["income"]
    assert income["statistic"] == report.report.features[0].result.test and income["effect"] > 0


def test_renderings(report: driftwarden.Report, tmp_path: Path) -> None:
    assert json.loads(report.to_json()) == report.to_dict()
    page = report.to_html()
    assert page.lstrip().lower().startswith("<!doctype html") and "income" in page
    saved = report.save_html(tmp_path / "out" / "report.html")
    assert saved.read_text(encoding="utf-8") == page
    inline = report._repr_html_()
    assert report.verdict in inline and "<table" in inline and "srcdoc=" in inline
    assert "DRIFTED, 3 of 10 features drifted" in repr(report)


def test_a_saved_profile_compares_exactly_like_the_frame(
    reference_frame: pd.DataFrame, shifted_frame: pd.DataFrame, report: driftwarden.Report, tmp_path: Path
) -> None:
    profiled = driftwarden.profile(reference_frame, target=TARGET)
    path = profiled.save(tmp_path / "credit.profile.json")
    loaded = driftwarden.Profile.load(path)
    assert loaded.features == profiled.features and loaded.rows == 3_000
    assert driftwarden.compare(profiled, shifted_frame).to_dict() == report.to_dict()
    assert driftwarden.compare(loaded, shifted_frame).to_dict() == report.to_dict()
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(driftwarden.InvalidInput, match="not a profile saved by"):
        driftwarden.Profile.load(tmp_path / "other.json")


def test_a_profile_of_a_column_with_infinities_is_saved_and_loaded(
    reference_frame: pd.DataFrame, shifted_frame: pd.DataFrame, tmp_path: Path
) -> None:
    """A ratio over a zero gives a column its infinities: they are values of its profile (its minimum and
    maximum, a quantile, a grid point), which saving wrote to no file (a ValueError from ``json``)."""
    reference = reference_frame.copy()
    reference.loc[reference.index[:3], "income"] = float("inf")
    reference.loc[reference.index[3], "income"] = float("-inf")
    profiled = driftwarden.profile(reference, target=TARGET)
    path = profiled.save(tmp_path / "infinite.profile.json")
    text = path.read_text()
    assert "-Infinity" in text and "NaN" not in text
    loaded = driftwarden.Profile.load(path)
    assert loaded.to_dict() == profiled.to_dict()
    expected = driftwarden.compare(profiled, shifted_frame).to_dict()
    assert driftwarden.compare(loaded, shifted_frame).to_dict() == expected
