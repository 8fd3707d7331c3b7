"""`driftwarden train --features a,b,... | --exclude c,d`: only the chosen columns become features
(issue 40, item 4).

A table with a second label (``loss_amount``) and an id column beside the multi-class target: ``--features``
keeps exactly the columns named, in that order, ``--exclude`` all but the named and the target; the contract
and the lineage list them, with the built-in network and with ``--model-fn``. Bad choices are one line,
exit 2, nothing registered.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from core.database import open_database
from core.tabular import write_table
from registry.schema import Task
from registry.service import list_versions
from tests.training.helpers import Workspace, refused, run_cli
from training.cluster.datagen import generate
from training.cluster.run_spec import TrainingRunSpec

BUILDER = """
import keras


def build(input_dim, outputs, task):
    hidden = keras.layers.Dense(8, activation="relu")
    return keras.Sequential([keras.Input(shape=(input_dim,)), hidden, keras.layers.Dense(outputs)])
"""

REGISTERED = re.compile(r"registered ([\w-]+):(\d+) \(staged\)")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("features")
    data = generate(1_500, seed=5, task=Task.MULTICLASS)
    loss = generate(1_500, seed=5, task=Task.REGRESSION)["loss_amount"]  # a second label of the same rows
    table = {"customer_id": np.arange(1_500, dtype=np.int64), **data, "loss_amount": loss}
    write_table(table, root / "segments.csv")
    (root / "team.py").write_text(BUILDER)
    return {"data": root / "segments.csv", "builder": root / "team.py"}


def _docs(ws: Workspace, model: str, version: str) -> tuple[dict, dict]:
    folder = ws.root / "var" / "models" / model / version / "driftwarden"
    return (
        json.loads((folder / "schema.json").read_text()),
        json.loads((folder / "lineage.json").read_text()),
    )


def _train(ws: Workspace, files: dict[str, Path], model: str, *extra: str) -> tuple[str, str]:
    rc, out = ws.run(
        "train",
        *("--model", model, "--data", str(files["data"]), "--task", "multiclass", "--mode", "local"),
        *("--epochs", "0.5"),
        *extra,
        log_name=f"{model}.log",
    )
    assert rc == 0, out[-4000:]
    found = REGISTERED.search(out)
    assert found, out[-2000:]
    return found.group(1), found.group(2)


def test_features_keeps_exactly_the_named_columns_in_order(
    workspace: Workspace, files: dict[str, Path]
) -> None:
    chosen = ["region", "income", "credit_score", "debt_to_income"]
    model, version = _train(workspace, files, "seg", "--features", ",".join(chosen))
    schema, lineage = _docs(workspace, model, version)
    assert [f["name"] for f in schema["features"]] == chosen
    assert lineage["features"] == chosen and "excluded" not in lineage


def test_exclude_leaves_out_a_second_label_and_an_id_with_a_model_fn(
    workspace: Workspace, files: dict[str, Path]
) -> None:
    model, version = _train(
        workspace,
        files,
        "seg-own",
        *("--exclude", "loss_amount,customer_id", "--model-fn", f"{files['builder']}:build"),
    )
    schema, lineage = _docs(workspace, model, version)
    names = [f["name"] for f in schema["features"]]
    assert "loss_amount" not in names and "customer_id" not in names and "risk_band" not in names
    assert names == [n for n in generate(5, seed=0, task=Task.MULTICLASS) if n != "risk_band"]
    assert lineage["features"] == names and lineage["excluded"] == ["loss_amount", "customer_id"]
    assert lineage["model_fn"]["ref"].endswith("team.py:build")


def test_bad_choices_are_one_line_and_register_nothing(
    cli: Path, database_url: str, files: dict[str, Path]
) -> None:
    base = ("train", "--model", "seg", "--data", files["data"], "--task", "multiclass", "--mode", "local")
    cases = [
        (("--features", "income", "--exclude", "region"), "--features and --exclude"),
        (("--features", "income,nope,gone"), "--features names 'nope', 'gone': not a column of --data"),
        (("--exclude", "nope"), "--exclude names 'nope'"),
        (("--features", "income,risk_band"), "names the target 'risk_band'"),
        (("--exclude", "risk_band"), "names the target 'risk_band'"),
        (("--features", "income,,region"), "--features must be distinct"),
        (("--exclude", "region,region"), "--exclude must be distinct"),
    ]
    for extra, part in cases:
        refused(run_cli(*base, *extra), part)
    db = open_database(database_url)
    try:
        with db.session() as s:
            assert list_versions(session=s, model_name="seg") == []
    finally:
        db.dispose()


def test_the_chosen_columns_are_part_of_the_run_key(files: dict[str, Path]) -> None:
    """Another choice of features is another run: it never resumes from the checkpoints of the first."""
    data = files["data"]
    every = TrainingRunSpec(model_name="m", data=data, task="multiclass")
    keys = {
        every.key,
        TrainingRunSpec(model_name="m", data=data, task="multiclass", features=("income", "region")).key,
        TrainingRunSpec(model_name="m", data=data, task="multiclass", features=("region", "income")).key,
        TrainingRunSpec(model_name="m", data=data, task="multiclass", exclude=("loss_amount",)).key,
    }
    assert len(keys) == 4
    assert TrainingRunSpec(model_name="m", data=data, task="multiclass", features=[]).key == every.key  # type: ignore[arg-type]
