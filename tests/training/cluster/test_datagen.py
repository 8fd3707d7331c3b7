"""The synthetic credit table (``training.cluster.datagen``): seeded, each scenario planted, and its contract
as ``registry.schema.infer_schema`` infers it for training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.tabular import read_table, write_table
from registry.schema import FeatureKind, ModelSchema, infer_schema
from training.cluster.datagen import TARGET, Scenario, generate


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
