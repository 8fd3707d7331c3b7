"""Shared fixtures: a seeded credit-risk reference and its profile; the serving tests' trained model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.tabular import Columns
from monitors.profile import build_reference_profile
from registry.schema import ModelSchema, infer_schema
from tests.service.conftest import module_db_url, trained  # noqa: F401  (one trained model for this folder)
from training.datagen import TARGET, default_logit, generate


def true_probability(cols: Columns) -> np.ndarray:
    """A perfectly calibrated model of the baseline concept: the generator's own P(default | x)."""
    return np.asarray(1.0 / (1.0 + np.exp(-default_logit(cols))))


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
