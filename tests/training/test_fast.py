"""Fast checks of the training domain: data generator, contract inference, cluster specs, CLI behaviour."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.tabular import read_table, write_table
from registry.schema import FeatureKind, ModelSchema, infer_schema
from training.cluster.datagen import TARGET, Scenario, generate
from training.cluster.nodes import ClusterSpec


def test_generator_is_seeded_and_plants_each_scenario() -> None:
    a, b = generate(5000, seed=3), generate(5000, seed=3)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["income"], generate(5000, seed=4)["income"])
    base = generate(20_000, seed=1)
    cov = generate(20_000, scenario=Scenario.COVARIATE_SHIFT, seed=1)
    assert np.median(cov["income"]) < 0.85 * np.median(base["income"])
    assert cov["age"].mean() > base["age"].mean() + 4
    new = generate(20_000, scenario=Scenario.NEW_CATEGORY, seed=1)
    assert "crypto" not in set(base["loan_purpose"])
    assert 0.12 < np.mean(new["loan_purpose"] == "crypto") < 0.18
    prior = generate(20_000, scenario=Scenario.PRIOR_SHIFT, seed=1)
    assert prior[TARGET].mean() > base[TARGET].mean() + 0.15
    concept = generate(20_000, scenario=Scenario.CONCEPT_DRIFT, seed=1)
    assert abs(concept["credit_score"].mean() - base["credit_score"].mean()) < 3

    # same inputs, another concept: debt_to_income no longer separates defaulters
    def gap(cols: dict[str, np.ndarray]) -> float:
        dti, y = cols["debt_to_income"], cols[TARGET]
        return float(dti[y == 1].mean() - dti[y == 0].mean())

    assert gap(base) > 0.05 and abs(gap(concept)) < 0.02


def test_schema_inference_and_round_trip(tmp_path: Path) -> None:
    path = write_table(generate(3000, seed=0), tmp_path / "d.parquet")
    cols = read_table(path)
    schema = infer_schema(cols, target=TARGET)
    assert TARGET not in schema.feature_names
    age = schema.feature("age")
    assert age.kind is FeatureKind.NUMERIC and age.dtype == "int64" and not age.nullable
    assert age.observed_min is not None and age.observed_min >= 18 and age.allowed_min == 0.0
    emp = schema.feature("employment_years")
    assert emp.nullable and 0.01 < emp.missing_rate < 0.06
    purpose = schema.feature("loan_purpose")
    assert purpose.kind is FeatureKind.CATEGORICAL and "business" in purpose.categories
    assert ModelSchema.from_dict(json.loads(json.dumps(schema.to_dict()))) == schema


def test_schema_rejects_non_binary_target() -> None:
    cols = generate(500, seed=0)
    cols[TARGET] = cols[TARGET] * 3
    with pytest.raises(ValueError, match="0/1 labels"):
        infer_schema(cols, target=TARGET)


def test_cluster_spec_parsing(tmp_path: Path) -> None:
    doc = {"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3", "h:4"]}
    spec = ClusterSpec.parse(json.dumps(doc))
    assert spec.as_dict() == doc
    assert spec.tf_config("worker", 1) == {"cluster": doc, "task": {"type": "worker", "index": 1}}
    file = tmp_path / "tf_config.json"
    file.write_text(json.dumps({"cluster": doc, "task": {"type": "ps", "index": 0}}))
    assert ClusterSpec.parse(str(file)) == spec
    with pytest.raises(ValueError, match="unknown roles"):
        ClusterSpec.parse('{"evaluator": ["h:5"]}')
    local = ClusterSpec.local(host="127.0.0.1", chief=1, ps=2, workers=3)
    ports = [addr.rsplit(":", 1)[1] for _, _, addr in local.nodes()]
    assert len(ports) == len(set(ports)) == 6


def _cli(
    *args: str, env_extra: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, cwd=cwd
    )


def test_help_does_not_import_tensorflow() -> None:
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from service.cli import app\n"
        "cmds = (['--help'], ['train', '--help'], ['cluster', 'node', '--help'],\n"
        "        ['data', 'generate', '--help'], ['drift', '--help'])\n"
        "for args in cmds:\n"
        "    r = CliRunner().invoke(app, args)\n"
        "    assert r.exit_code == 0, r.output\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
    res = _cli("--help")
    assert res.returncode == 0 and "train" in res.stdout and "demo" in res.stdout


def test_config_masks_database_password() -> None:
    res = _cli("config", env_extra={"DRIFTWARDEN_DATABASE_URL": "postgresql+psycopg://app:s3cret@db:5432/dw"})
    assert res.returncode == 0, res.stderr
    cfg = json.loads(res.stdout)
    assert cfg["database_url"] == "postgresql+psycopg://app:***@db:5432/dw"
    assert "s3cret" not in res.stdout


def test_cli_errors_say_what_to_fix(tmp_path: Path) -> None:
    res = _cli("train", "--model", "m", "--data", str(tmp_path / "missing.csv"), cwd=tmp_path)
    assert res.returncode == 2 and "does not exist" in res.stderr and "data generate" in res.stderr
    bad = tmp_path / "nolabel.csv"
    cols = generate(200, seed=0)
    del cols[TARGET]
    write_table(cols, bad)
    res = _cli("train", "--model", "m", "--data", str(bad), "--mode", "local", cwd=tmp_path)
    assert res.returncode == 2 and "no target column 'default'" in res.stderr
    res = _cli("cluster", "node", "--role", "chief", "--index", "0", "--cluster", '{"ps": ["127.0.0.1:1"]}')
    assert res.returncode == 2 and "must be ps or worker" in res.stderr
    res = _cli("cluster", "node", "--role", "ps", "--index", "3", "--cluster", '{"ps": ["127.0.0.1:1"]}')
    assert res.returncode == 2 and "1 ps task" in res.stderr
