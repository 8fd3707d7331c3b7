"""``driftwarden models import``: a team's own SavedModel (plain Keras / TensorFlow) becomes a staged version.

Each task in a different signature style (tests/own_models.py); the registry's copy answers exactly as the
source called directly; every refusal is one line, exit 2, nothing registered.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from core.database import open_database
from core.tabular import write_table
from registry.saved_model import load
from registry.service import list_versions
from tests import own_models
from tests.training.helpers import refused, run_cli


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The reference table and one SavedModel per task, written once."""
    root = tmp_path_factory.mktemp("own")
    data = own_models.reference(2_000, seed=0)
    write_table(data, root / "reference.csv")
    write_table(own_models.reference(2_000, seed=1, shift=1.5), root / "shifted.parquet")
    return {
        "reference": root / "reference.csv",
        "binary": own_models.write_binary(root / "binary", data),
        "multiclass": own_models.write_multiclass(root / "multiclass", data),
        "regression": own_models.write_regression(root / "regression", data),
    }


def _versions(database_url: str) -> list[int]:
    db = open_database(database_url)
    try:
        with db.session() as s:
            return [v.version for v in list_versions(session=s, model_name="own")]
    finally:
        db.dispose()


def _meta(registry: Path, version: int, name: str) -> dict:
    return json.loads((registry / "own" / str(version) / "driftwarden" / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("task", "extra", "target"),
    [
        ("binary", (), "y_bin"),
        ("multiclass", ("--features", "a,b,c"), "y_cls"),
        ("regression", (), "y_reg"),
    ],
)
def test_import_each_task(
    sources: dict[str, Path], cli: Path, database_url: str, task: str, extra: tuple[str, ...], target: str
) -> None:
    r = run_cli(
        "models",
        "import",
        "own",
        sources[task],
        "--reference",
        sources["reference"],
        "--target",
        target,
        *extra,
    )
    assert r.exit_code == 0, r.output
    assert re.search(rf"registered own:1 \(staged, imported\): {task}", r.stdout), r.stdout
    assert _versions(database_url) == [1]
    schema = _meta(cli, 1, "schema")
    lineage = _meta(cli, 1, "lineage")
    metrics = _meta(cli, 1, "metrics")
    profile = _meta(cli, 1, "profile")
    assert schema["task"] == {
        "binary": "binary_classification",
        "multiclass": "multiclass_classification",
    }.get(task, task)
    assert lineage["source"] == "import" and lineage["source_path"] == str(sources[task].resolve())
    assert re.fullmatch(r"[0-9a-f]{64}", lineage["source_sha256"])
    assert lineage["model_fn"] is None and lineage["task"] == task
    assert metrics["measured_on"] == "reference" and metrics["rows"] == 2_000
    assert profile["prediction"]["count"] == 2_000
    shown = run_cli("models", "show", "own:1")
    assert shown.exit_code == 0 and 'measured_on: "reference"' in shown.stdout, shown.output
    assert run_cli("models", "list", "--model", "own").exit_code == 0
    data = own_models.reference(300, seed=5)
    runner_ = load(cli / "own" / "1")  # the registry's copy, through the serving loader
    names = [f["name"] for f in schema["features"]]
    columns = {n: (data[n].astype(np.float32) if n != "color" else data[n].astype(object)) for n in names}
    answered = runner_(columns)  # the task's output, and the source's own output as it is
    served = answered[schema["outputs"][0]["name"]]
    want = own_models.direct(sources[task], data)
    signature = _meta(cli, 1, "signature")  # the source's own signature, for its TF Serving clients
    (source_output,) = signature["outputs"]
    assert source_output["key"] == "source_0" and answered["source_0"].shape == want.shape
    np.testing.assert_allclose(answered["source_0"], want, atol=1e-5)
    if task == "binary":
        assert names == ["a", "b", "c", "color"] and schema["outputs"][0]["name"] == "probability"
        assert metrics["roc_auc"] > 0.8
        np.testing.assert_allclose(served, want.reshape(-1), atol=1e-5)
    elif task == "multiclass":
        assert names == ["a", "b", "c"] and schema["classes"] == list(own_models.CLASSES)
        assert schema["outputs"][0] == {**schema["outputs"][0], "name": "probabilities", "width": 3}
        assert served.shape == (300, 3) and metrics["accuracy"] > 0.6
        np.testing.assert_allclose(served, want, atol=1e-5)
    else:
        out = schema["outputs"][0]
        assert out["name"] == "value" and out["min"] is None and out["expected_min"] < out["expected_max"]
        assert metrics["rmse"] > 0 and metrics["r2"] > 0.8
        np.testing.assert_allclose(served, want, atol=1e-5)


def test_task_inferred_without_target_and_settled_by_task(sources: dict[str, Path], cli: Path) -> None:
    # probabilities in [0, 1] and no target: binary or regression cannot be told apart
    r = run_cli("models", "import", "own", sources["binary"], "--reference", sources["reference"])
    assert r.exit_code == 2 and "--task binary or --task regression" in r.stderr, r.output
    r = run_cli("models", "import", "own", sources["binary"], "-r", sources["reference"], "--task", "binary")
    assert r.exit_code == 0 and "registered own:1 (staged, imported): binary" in r.stdout, r.output
    assert _meta(cli, 1, "metrics") == {}  # no target: nothing measured
    # values outside [0, 1]: a regression, inferred
    r = run_cli("models", "import", "own", sources["regression"], "-r", sources["reference"])
    assert r.exit_code == 0 and "own:2 (staged, imported): regression" in r.stdout, r.output
    # a [batch, 3] probability vector: multi-class, classes 0..2 without a target or --classes
    r = run_cli(
        "models", "import", "own", sources["multiclass"], "-r", sources["reference"], "--features", "a,b,c"
    )
    assert r.exit_code == 0 and "multiclass (3 classes)" in r.stdout, r.output
    assert _meta(cli, 3, "schema")["classes"] == ["0", "1", "2"]


def test_bad_input_is_one_line_and_registers_nothing(
    sources: dict[str, Path], cli: Path, database_url: str, tmp_path: Path
) -> None:
    ref = sources["reference"]
    lacking = tmp_path / "lacking.csv"
    data = own_models.reference(200, seed=3)
    write_table({k: v for k, v in data.items() if k != "color"}, lacking)
    three_valued = tmp_path / "three.csv"
    write_table({**data, "y_bin": np.arange(200) % 3}, three_valued)
    cases = [
        (("models", "import", "own", tmp_path, "-r", ref), "is not a SavedModel"),
        (
            ("models", "import", "own", sources["binary"], "-r", ref, "--signature", "nope"),
            "no signature 'nope'",
        ),
        (("models", "import", "own", sources["binary"], "-r", lacking), "lacks the column(s) 'color'"),
        (("models", "import", "own", sources["multiclass"], "-r", ref), "--features a,b,..."),
        (("models", "import", "own", sources["regression"], "-r", ref, "--task", "binary"), "a logit?"),
        (
            (
                "models",
                "import",
                "own",
                sources["multiclass"],
                "-r",
                ref,
                "--features",
                "a,b,c",
                "--task",
                "regression",
            ),
            "--task regression contradicts the outputs",
        ),
        (
            (
                "models",
                "import",
                "own",
                sources["binary"],
                "-r",
                three_valued,
                "--target",
                "y_bin",
                "--task",
                "binary",
            ),
            "must hold 0/1 labels",
        ),
        (
            (
                "models",
                "import",
                "own",
                sources["multiclass"],
                "-r",
                ref,
                "--features",
                "a,b,c",
                "--target",
                "y_bin",
            ),
            "at least 3 classes",
        ),
        (
            ("models", "import", "own", sources["regression"], "-r", ref, "--target", "color"),
            "must hold finite numbers",
        ),
        (("models", "import", "own", sources["binary"], "-r", ref, "--task", "ternary"), "--task"),
        (("models", "import", "own", sources["binary"], "-r", tmp_path / "none.csv"), "is not a file"),
    ]
    for args, part in cases:
        refused(run_cli(*args), part)
    assert _versions(database_url) == []
    assert not any((cli / "own").glob("[0-9]*")) if (cli / "own").exists() else True


def test_dtype_and_outputs_the_contract_cannot_describe(
    cli: Path, sources: dict[str, Path], tmp_path: Path
) -> None:
    import tensorflow as tf

    class Odd(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.bool, name="a")])
        def flag(self, a: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"p": tf.cast(a, tf.float32)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="a")])
        def logits(self, a: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"logits": tf.stack([a, -a, 2 * a], axis=1)}

    odd = Odd()
    tf.saved_model.save(
        odd, str(tmp_path / "odd"), signatures={"serving_default": odd.flag, "logits": odd.logits}
    )
    ref = sources["reference"]
    refused(run_cli("models", "import", "own", tmp_path / "odd", "-r", ref), "dtype bool")
    refused(
        run_cli("models", "import", "own", tmp_path / "odd", "-r", ref, "--signature", "logits"),
        "fit no task",
    )
