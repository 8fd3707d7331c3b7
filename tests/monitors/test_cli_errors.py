"""The exit-code contract of ``driftwarden drift`` and ``driftwarden monitor --once`` (issue 13, items 2-5).

0 = no drift, 1 = drift, 2 = usage or input error / insufficient data / not evaluated: one line on stderr
naming the file, column or option, no traceback unless ``--debug``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from core.config import get_settings
from core.database import open_database
from core.tabular import TableError, write_table
from registry.schema import infer_schema
from service.cli import app
from tests.monitors.helpers import true_probability
from tests.monitors.logdata import log_columns, register_profile
from training.cluster.datagen import TARGET, generate

runner = CliRunner()
DRIFTWARDEN = Path(sys.executable).with_name("driftwarden")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real files: a baseline reference, a same-distribution and a shifted current, broken variants."""
    root = tmp_path_factory.mktemp("drift-errors")
    out: dict[str, Path] = {}
    for name, scenario, seed, rows in (
        ("reference", "baseline", 71, 3000),
        ("same", "baseline", 72, 1000),
        ("shifted", "covariate_shift", 73, 1000),
    ):
        cols = generate(rows, scenario=scenario, seed=seed)
        cols["prediction"] = true_probability(cols)
        out[name] = write_table(cols, root / f"{name}.csv")
    header = out["reference"].read_text().splitlines()[0]
    lines = out["same"].read_text().splitlines()
    out["header_only"] = root / "header_only.csv"
    out["header_only"].write_text(header + "\n")
    out["three_rows"] = root / "three_rows.csv"
    out["three_rows"].write_text("\n".join(out["reference"].read_text().splitlines()[:4]) + "\n")
    out["empty"] = root / "empty.csv"
    out["empty"].write_bytes(b"")
    out["text"] = root / "reference.txt"
    out["text"].write_text(out["reference"].read_text())
    out["ragged"] = root / "ragged.csv"
    out["ragged"].write_text("\n".join(lines[:50] + ["1,2"] + lines[50:100]) + "\n")
    out["not_parquet"] = root / "broken.parquet"
    out["not_parquet"].write_text("this is not parquet")
    same = generate(1000, seed=72)
    same["prediction"] = true_probability(same)
    same["income"] = np.full(1000, np.nan)
    out["empty_column"] = write_table(same, root / "empty_column.csv")
    out["trailing"] = root / "trailing.csv"  # a separator that ends every line: a column without a name
    out["trailing"].write_text("".join(line + ",\n" for line in out["reference"].read_text().splitlines()))
    labelled = generate(3000, seed=71)
    labelled["prediction"] = true_probability(labelled)
    labelled[TARGET] = np.array(["yes" if v else "no" for v in labelled[TARGET]], dtype=object)
    out["string_target"] = write_table(labelled, root / "string_target.csv")
    out["bad_json"] = root / "bad.json"
    out["bad_json"].write_text("{not json")
    out["bad_alpha"] = root / "alpha.json"
    out["bad_alpha"].write_text(json.dumps({"alpha": 5}))
    out["bad_test"] = root / "test.json"
    out["bad_test"].write_text(json.dumps({"numeric_test": "t_test"}))
    out["not_schema"] = root / "schema.json"
    out["not_schema"].write_text(json.dumps({"features": 1}))
    out["a_dir"] = root / "reports"
    out["a_dir"].mkdir()
    out["not_utf8"] = root / "latin1.csv"  # its header is not UTF-8: was "a bug" (UnicodeDecodeError)
    out["not_utf8"].write_bytes(b"income,r\xe9gion\n1,a\n")
    return out


def _drift(*args: str | Path) -> Any:
    return runner.invoke(app, ["drift", *map(str, args)])


def _assert_one_line_error(result: Any, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


Case = Callable[[dict[str, Path]], tuple[list[str | Path], list[str]]]
INPUT_ERRORS: dict[str, Case] = {
    "missing file": lambda d: ([d["reference"], d["a_dir"] / "nope.csv"], ["nope.csv", "not found"]),
    "unsupported extension": lambda d: ([d["text"], d["same"]], ["reference.txt", ".csv or .parquet"]),
    "0-byte reference": lambda d: ([d["empty"], d["same"]], ["empty.csv", "0 bytes"]),
    "0-byte current": lambda d: ([d["reference"], d["empty"]], ["empty.csv", "0 bytes"]),
    "ragged csv": lambda d: ([d["reference"], d["ragged"]], ["ragged.csv", "cannot read"]),
    "not UTF-8": lambda d: ([d["reference"], d["not_utf8"]], ["latin1.csv", "not UTF-8 (byte 0xe9)"]),
    "not parquet": lambda d: ([d["reference"], d["not_parquet"]], ["broken.parquet", "PARQUET"]),
    "directory as data": lambda d: ([d["reference"], d["a_dir"]], ["reports", "directory"]),
    "header-only reference": lambda d: (
        [d["header_only"], d["same"]],
        ["insufficient data", "REFERENCE", "header_only.csv", "0 rows", "--min-rows"],
    ),
    "string target": lambda d: (
        [d["string_target"], d["same"], "--target", "default", "--prediction-column", "prediction"],
        ["--target 'default'", "string_target.csv", "0/1", "'yes'"],
    ),
    "missing --config": lambda d: (
        [d["reference"], d["same"], "--config", d["a_dir"] / "m.json"],
        ["--config"],
    ),
    "invalid JSON --config": lambda d: (
        [d["reference"], d["same"], "--config", d["bad_json"]],
        ["--config", "JSON"],
    ),
    "invalid value in --config": lambda d: (
        [d["reference"], d["same"], "--config", d["bad_alpha"]],
        ["--config", "alpha.json", "'alpha'"],
    ),
    "unknown test in --config": lambda d: (
        [d["reference"], d["same"], "--config", d["bad_test"]],
        ["t_test", "--config", "test.json"],
    ),
    "invalid --alpha": lambda d: ([d["reference"], d["same"], "--alpha", "2"], ["--alpha"]),
    "missing --schema": lambda d: (
        [d["reference"], d["same"], "--schema", d["a_dir"] / "s.json"],
        ["--schema"],
    ),
    "invalid JSON --schema": lambda d: ([d["reference"], d["same"], "--schema", d["bad_json"]], ["--schema"]),
    "not a schema": lambda d: (
        [d["reference"], d["same"], "--schema", d["not_schema"]],
        ["--schema", "schema"],
    ),
    "--json is a directory": lambda d: (
        [d["reference"], d["same"], "--json", d["a_dir"]],
        ["--json", "directory"],
    ),
    "--html is a directory": lambda d: (
        [d["reference"], d["same"], "--html", d["a_dir"]],
        ["--html", "directory"],
    ),
}


@pytest.mark.parametrize("case", list(INPUT_ERRORS), ids=list(INPUT_ERRORS))
def test_input_errors_exit_2_with_one_line(case: str, data: dict[str, Path]) -> None:
    args, needles = INPUT_ERRORS[case](data)
    _assert_one_line_error(_drift(*args), *needles)


def test_insufficient_or_missing_data_is_never_stable(data: dict[str, Path]) -> None:
    """A header-only CURRENT, a 3-row REFERENCE and an all-empty column used to answer "stable", exit 0."""
    _assert_one_line_error(
        _drift(data["reference"], data["header_only"]), "insufficient data", "CURRENT", "0 rows"
    )
    _assert_one_line_error(
        _drift(data["three_rows"], data["shifted"]), "insufficient data", "three_rows.csv", "3 rows"
    )
    _assert_one_line_error(
        _drift(data["reference"], data["empty_column"], "--target", "default"),
        "column 'income'",
        "empty_column.csv",
        "no value",
    )
    _assert_one_line_error(
        _drift(data["trailing"], data["same"]),
        "the column without a name",
        "a separator that ends every line",
        "trailing.csv",
        "no value",
    )


def test_min_rows_option_and_setting(data: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_settings().drift_min_rows == 30
    _assert_one_line_error(
        _drift(data["reference"], data["same"], "--min-rows", "2000"),
        "CURRENT",
        "1000 rows",
        "minimum of 2000",
    )
    monkeypatch.setenv("DRIFTWARDEN_DRIFT_MIN_ROWS", "5000")
    get_settings.cache_clear()
    _assert_one_line_error(
        _drift(data["reference"], data["same"]), "REFERENCE", "3000 rows", "minimum of 5000"
    )
    result = _drift(data["three_rows"], data["same"], "--min-rows", "3", "--target", "default")
    assert result.exit_code in (0, 1), result.output  # the option wins over the setting; a verdict is given
    assert "features drifted" in result.output


def test_unknown_columns_name_the_option_and_list_the_columns(data: dict[str, Path]) -> None:
    result = _drift(data["reference"], data["shifted"], "--target", "nope", "--prediction-column", "nada")
    _assert_one_line_error(
        result, "--target 'nope'", "--prediction-column 'nada'", "available columns: age, income"
    )
    same_column = _drift(
        data["reference"], data["same"], "--target", "default", "--prediction-column", "default"
    )
    _assert_one_line_error(same_column, "--target and --prediction-column both name 'default'")


def test_json_and_html_to_standard_output(
    data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    as_json = _drift(data["reference"], data["shifted"], "--target", "default", "--json", "-")
    assert as_json.exit_code == 1, as_json.output
    report = json.loads(as_json.stdout)  # stdout is the JSON document alone
    assert report["dataset"]["drifted"] is True
    assert "DATASET DRIFTED" in as_json.stderr and "DATASET DRIFTED" not in as_json.stdout
    as_html = _drift(data["reference"], data["same"], "--target", "default", "--html", "-")
    assert as_html.exit_code == 0, as_html.output
    assert as_html.stdout.startswith("<!doctype html>") and as_html.stdout.rstrip().endswith("</html>")
    assert "dataset stable" in as_html.stderr
    assert not (tmp_path / "-").exists()
    both = _drift(data["reference"], data["same"], "--json", "-", "--html", "-")
    _assert_one_line_error(both, "--json - and --html -")


def test_debug_shows_the_exception(data: dict[str, Path]) -> None:
    result = runner.invoke(app, ["--debug", "drift", str(data["reference"]), str(data["a_dir"] / "nope.csv")])
    assert isinstance(result.exception, TableError) and "nope.csv" in str(result.exception)


def test_help_lists_the_exit_codes() -> None:
    for command in ("drift", "monitor"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        text = result.output
        assert "Exit codes" in text
        assert all(f"\n {code}  " in text for code in "012"), text
    drift_help = runner.invoke(app, ["drift", "--help"], env={"COLUMNS": "200"}).output
    assert "the dataset drifted" in drift_help and "usage or input error" in drift_help


def test_real_process_exit_code_and_stderr(data: dict[str, Path]) -> None:
    out = subprocess.run(
        [str(DRIFTWARDEN), "drift", str(data["header_only"]), str(data["same"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: insufficient data: REFERENCE {data['header_only']} has 0 rows, fewer than the minimum of 30 "
        "for a drift verdict (supply more rows, or lower --min-rows / DRIFTWARDEN_DRIFT_MIN_ROWS)"
    ]


# ---------------------------------------------------------------- driftwarden monitor --once


@pytest.fixture
def monitor_db(monkeypatch: pytest.MonkeyPatch, profile_dict: dict[str, Any]) -> Any:
    """A SQLite database with two serving models, ``credit`` and ``quiet``, and a low minimum of rows."""
    monkeypatch.setenv("DRIFTWARDEN_MONITOR_MIN_ROWS", "10")
    get_settings.cache_clear()
    settings = get_settings()
    db = open_database(settings.database_url.get_secret_value(), upgrade=True)
    register_profile(db, settings.registry_path, profile_dict, model="credit")
    register_profile(db, settings.registry_path, profile_dict, model="quiet")
    yield db
    db.dispose()


def _features(profile_dict: dict[str, Any]) -> list[str]:
    return list(profile_dict["features"])


def test_monitor_once_exits_1_when_a_model_drifted(monitor_db: Any, profile_dict: dict[str, Any]) -> None:
    log_columns(
        monitor_db.engine,
        generate(400, scenario="covariate_shift", seed=81),
        features=_features(profile_dict),
    )
    result = runner.invoke(app, ["monitor", "--once", "--model", "credit"])
    assert result.exit_code == 1, result.output
    assert "credit:1 run" in result.stdout and "DRIFTED" in result.stdout


def test_monitor_once_exits_0_when_stable(monitor_db: Any, profile_dict: dict[str, Any]) -> None:
    log_columns(monitor_db.engine, generate(400, seed=82), features=_features(profile_dict))
    result = runner.invoke(app, ["monitor", "--once", "--model", "credit"])
    assert result.exit_code == 0, result.output
    assert "credit:1 run" in result.stdout and "stable" in result.stdout


def test_monitor_once_reports_a_model_with_too_few_rows_as_skipped(
    monitor_db: Any, profile_dict: dict[str, Any]
) -> None:
    log_columns(
        monitor_db.engine,
        generate(400, scenario="covariate_shift", seed=83),
        features=_features(profile_dict),
    )
    result = runner.invoke(app, ["monitor", "--once"])
    # "quiet" has no traffic: skipped, so credit's drift decides (1); each model's line once on stdout
    assert result.exit_code == 1, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 and sum("credit:1 run" in x for x in lines) == 1 and "DRIFTED" in lines[0]
    assert lines[1].startswith("quiet: skipped: ") and "fewer than the minimum of 10" in lines[1]
    assert "credit" not in result.stderr  # no second copy of the lines through the log
    assert "1 model(s) skipped for too few predictions: quiet" in result.stderr
    strict = runner.invoke(app, ["monitor", "--once", "--fail-on-skip"])
    assert strict.exit_code == 2, strict.output
    error = strict.stderr.strip().splitlines()[-1]
    assert error.startswith("error: could not evaluate 1 model(s): quiet (")
    assert "fewer than the minimum of 10" in error
    unknown = runner.invoke(app, ["monitor", "--once", "--model", "credit", "--model", "nope"])
    assert unknown.exit_code == 2, unknown.output
    assert "nope (not a serving model" in unknown.stderr.strip().splitlines()[-1]


def test_monitor_once_exits_0_when_the_only_model_has_too_few_rows(monitor_db: Any) -> None:
    result = runner.invoke(app, ["monitor", "--once", "--model", "quiet"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines() == [result.stdout.strip()]  # one line, printed once
    assert result.stdout.startswith("quiet: skipped: ") and "fewer than the minimum of 10" in result.stdout


def test_monitor_once_without_any_serving_model_exits_2() -> None:
    open_database(get_settings().database_url.get_secret_value(), upgrade=True).dispose()
    result = runner.invoke(app, ["monitor", "--once"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("error: no serving model to monitor")


def test_string_target_is_checked_on_current_too(data: dict[str, Path]) -> None:
    result = _drift(
        data["reference"], data["string_target"], "--target", "default", "--prediction-column", "prediction"
    )
    _assert_one_line_error(result, "CURRENT", "string_target.csv", "0/1")


def test_schema_of_a_registered_version_is_accepted(data: dict[str, Path], tmp_path: Path) -> None:
    """A valid --schema still works (the checks use its feature list)."""
    schema = infer_schema(generate(500, seed=84), target=TARGET)
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema.to_dict()))
    result = _drift(data["reference"], data["shifted"], "--schema", str(path))
    assert result.exit_code == 1, result.output
    missing = tmp_path / "less.csv"
    cols = generate(100, seed=85)
    del cols["age"]
    write_table(cols, missing)
    _assert_one_line_error(
        _drift(data["reference"], missing, "--schema", str(path)), "less.csv", "age", "--schema"
    )


def test_reference_version_with_a_non_ascii_digit_is_an_input_error(data: dict[str, Path]) -> None:
    _assert_one_line_error(
        _drift("--reference-version", "credit:²", data["same"]), "--reference-version", "²"
    )
