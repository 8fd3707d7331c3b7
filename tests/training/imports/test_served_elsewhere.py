"""``driftwarden models import NAME --reference FILE --prediction-column COL``: a model served elsewhere.

The version holds the contract, the reference profile and (with ``--target``) the reference metrics, and no
SavedModel; the server does not load it, answers a predict on it with a 404 that says it is served elsewhere
and stays ready; ``models list|show`` say so. Bad input is one line, exit 2, nothing registered.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.bounds import MAX_REFERENCE_COLUMNS
from core.database import open_database
from core.tabular import write_table
from monitors.performance import metrics_for
from registry.schema import Task
from registry.service import SERVED_ELSEWHERE, list_versions, serving_plans
from tests import own_models
from tests.training.helpers import refused, run_cli


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Reference rows with each task's answers, as a team's batch job would have written them."""
    root = tmp_path_factory.mktemp("elsewhere")
    data = own_models.reference(2_000, seed=3)
    score = data["a"] + 0.5 * data["b"] + 0.4 * (data["color"] == "red")
    logits = np.stack([-score, np.zeros_like(score), score], axis=1)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    binary = {**data, "p_default": _sigmoid(2.0 * score - 0.4)}
    write_table(binary, root / "binary.csv")
    regression = {**data, "amount": 2.0 * data["a"] - data["b"] + 0.5 * data["c"]}
    write_table(regression, root / "regression.parquet")
    columns = {k: pa.array(v.tolist()) for k, v in data.items()}
    columns["probs"] = pa.array(probs.tolist(), type=pa.list_(pa.float64()))
    pq.write_table(pa.table(columns), root / "multiclass.parquet")
    text = {**data, "probs": np.array([json.dumps(row) for row in probs.tolist()], dtype=object)}
    write_table(text, root / "multiclass.csv")
    return {
        "binary": root / "binary.csv",
        "regression": root / "regression.parquet",
        "multiclass": root / "multiclass.parquet",
        "multiclass_csv": root / "multiclass.csv",
    }


def _meta(registry: Path, name: str, version: int, doc: str) -> dict:
    return json.loads((registry / name / str(version) / "driftwarden" / f"{doc}.json").read_text())


@pytest.mark.parametrize(
    ("table", "column", "target", "task"),
    [
        ("binary", "p_default", "y_bin", "binary"),
        ("regression", "amount", "y_reg", "regression"),
        ("multiclass", "probs", "y_cls", "multiclass"),
        ("multiclass_csv", "probs", "y_cls", "multiclass"),
    ],
)
def test_each_task_registers_without_a_model(
    tables: dict[str, Path], cli: Path, database_url: str, table: str, column: str, target: str, task: str
) -> None:
    done = run_cli(
        "models",
        "import",
        "ext",
        "--reference",
        tables[table],
        "--prediction-column",
        column,
        "--target",
        target,
        *(("--classes", "low,mid,high") if task == "multiclass" else ()),  # the columns' order: -s, 0, s
    )
    assert done.exit_code == 0, done.output
    assert "registered ext:1 (staged, served elsewhere, monitored here)" in done.output
    folder = cli / "ext" / "1"
    assert not (folder / "saved_model.pb").exists()
    assert sorted(p.name for p in (folder / "driftwarden").iterdir()) == [
        "lineage.json",
        "metrics.json",
        "profile.json",
        "schema.json",
    ]
    schema = _meta(cli, "ext", 1, "schema")
    features = [f["name"] for f in schema["features"]]
    assert features == ["a", "b", "c", "color"] + [y for y in ("y_bin", "y_cls", "y_reg") if y != target]
    assert schema["task"] == Task.parse(task).value
    lineage = _meta(cli, "ext", 1, "lineage")
    assert lineage["serving"] == SERVED_ELSEWHERE
    assert lineage["prediction_column"] == column and lineage["reference_rows"] == 2_000
    metrics = _meta(cli, "ext", 1, "metrics")
    assert metrics["measured_on"] == "reference" and metrics["rows"] == 2_000
    data = own_models.reference(2_000, seed=3)
    if task == "regression":
        expected = metrics_for(
            Task.REGRESSION,
            y_true=data["y_reg"].astype(float),
            predictions=2.0 * data["a"] - data["b"] + 0.5 * data["c"],
        )
        assert metrics["rmse"] == pytest.approx(expected["rmse"], rel=1e-9)
    if task == "multiclass":
        assert schema["classes"] == ["low", "mid", "high"]
        assert metrics["accuracy"] > 0.5  # the order named fits: well above chance (about 1/3)
    profile = _meta(cli, "ext", 1, "profile")
    assert profile, "the reference profile is written"

    listed = run_cli("models", "list", "--model", "ext")
    assert listed.exit_code == 0 and "served elsewhere" in listed.output, listed.output
    for ref in ("ext", "ext:1"):
        shown = run_cli("models", "show", ref)
        assert shown.exit_code == 0 and "served elsewhere" in shown.output, shown.output


def test_promoted_version_is_planned_as_served_elsewhere(
    tables: dict[str, Path], cli: Path, database_url: str
) -> None:
    assert (
        run_cli(
            "models",
            "import",
            "ext",
            "--reference",
            tables["binary"],
            "--prediction-column",
            "p_default",
            "--task",
            "binary",
        ).exit_code
        == 0
    )
    assert run_cli("models", "promote", "ext", "1").exit_code == 0
    db = open_database(database_url)
    try:
        with db.session() as s:
            plan = serving_plans(session=s, only=["ext"])["ext"]
            (version,) = list_versions(session=s, model_name="ext")
    finally:
        db.dispose()
    assert plan.serving == 1 and set(plan.elsewhere) == {1} and plan.paths == {}
    assert version.lineage["serving"] == SERVED_ELSEWHERE


def test_bad_input_is_one_line_and_registers_nothing(
    tables: dict[str, Path], cli: Path, database_url: str, tmp_path: Path
) -> None:
    ref = tables["binary"]
    refused(run_cli("models", "import", "ext", "--reference", ref), "--prediction-column COL")
    refused(
        run_cli("models", "import", "ext", tmp_path, "--reference", ref, "--prediction-column", "p_default"),
        "not both",
    )
    refused(
        run_cli("models", "import", "ext", "--reference", ref, "--prediction-column", "nope"),
        "--prediction-column 'nope' is not a column",
        "p_default",
    )
    refused(
        run_cli("models", "import", "ext", "--reference", ref, "--prediction-column", "color"),
        "--prediction-column 'color' must hold numbers",
    )
    refused(
        run_cli(
            "models",
            "import",
            "ext",
            "--reference",
            ref,
            "--prediction-column",
            "p_default",
            "--model-fn",
            "x.py:f",
        ),
        "--model-fn and --signature describe a SavedModel",
    )
    refused(
        run_cli(
            "models",
            "import",
            "ext",
            "--reference",
            ref,
            "--prediction-column",
            "p_default",
            "--features",
            "a,zz",
        ),
        "--features names 'zz'",
    )
    refused(  # probabilities without --task or --target are ambiguous
        run_cli("models", "import", "ext", "--reference", ref, "--prediction-column", "p_default"),
        "--task binary",
    )
    refused(
        run_cli(
            "models", "import", "ext", "--reference", ref, "--prediction-column", "y_reg", "--task", "binary"
        ),
        "--task binary needs probabilities",
    )
    db = open_database(database_url)
    try:
        with db.session() as s:
            assert list_versions(session=s, model_name="ext") == []
    finally:
        db.dispose()
    assert not (cli / "ext").exists() or not any((cli / "ext").iterdir())


def test_a_reference_too_wide_too_short_or_empty_is_refused_before_the_work(
    tables: dict[str, Path], cli: Path, database_url: str, tmp_path: Path
) -> None:
    """10,000 columns of 30 rows took 13.6 s and 1.8 GB; a 1-row or all-NaN reference registered."""
    rng = np.random.default_rng(1)
    wide = {f"f{i}": rng.normal(size=30) for i in range(10_000)} | {"p": rng.random(30)}
    for path in (tmp_path / "wide.parquet", tmp_path / "wide.csv"):
        write_table(wide, path)
        refused(
            run_cli(
                "models", "import", "ext", "--reference", path, "--prediction-column", "p", "--task", "binary"
            ),
            f"the reference {path} has 10,001 columns: a model takes at most {MAX_REFERENCE_COLUMNS:,}",
        )
    data = own_models.reference(200, seed=4)
    score = 1.0 / (1.0 + np.exp(-data["a"]))
    one_row = {k: v[:1] for k, v in data.items()} | {"p": score[:1]}
    no_values = dict(data) | {"a": np.full(200, np.nan), "p": score}
    few_values = dict(data) | {"c": np.where(np.arange(200) < 29, data["c"], np.nan), "p": score}
    blank = dict(data) | {"color": np.array([None] * 200, dtype=object), "p": score}
    cases = {
        "one_row.csv": (one_row, "has 1 row(s): a drift test needs at least 30"),
        "no_values.parquet": (no_values, "in feature(s) 'a' (0)"),
        "few_values.csv": (few_values, "in feature(s) 'c' (29)"),
        "blank.parquet": (blank, "in feature(s) 'color' (0)"),
    }
    for name, (columns, message) in cases.items():
        path = write_table(columns, tmp_path / name)
        args = ("--prediction-column", "p", "--task", "binary")
        refused(run_cli("models", "import", "ext", "--reference", path, *args), message)
    ok = write_table(dict(data) | {"p": score}, tmp_path / "ok.csv")
    done = run_cli(
        "models", "import", "ext", "--reference", ok, "--prediction-column", "p", "--task", "binary"
    )
    assert done.exit_code == 0, done.output
    assert "profile of 200 reference rows" in done.output
