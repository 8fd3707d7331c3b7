"""Shared fixtures: a seeded credit-risk reference and its profile; the serving tests' trained model."""

from __future__ import annotations

from typing import Any

import pytest

from core.tabular import Columns
from monitors.profile import build_reference_profile
from registry.schema import ModelSchema, infer_schema
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate


@pytest.fixture(scope="session")
def reference() -> Columns:
    return generate(40_000, seed=101)


@pytest.fixture(scope="session")
def schema(reference: Columns) -> ModelSchema:
    return infer_schema(reference, target=TARGET)


@pytest.fixture(scope="session")
def profile_dict(reference: Columns, schema: ModelSchema) -> dict[str, Any]:
    return build_reference_profile(
        reference, schema, predictions=true_probability(reference), labels=reference[TARGET]
    )
