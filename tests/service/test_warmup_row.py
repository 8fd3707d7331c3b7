"""The warm-up row a version is traced with before it takes traffic, which the health checks' canary sends
again: a numeric feature's value must be finite as the model's float32, whatever the reference held. A
reference with one -inf (a ratio over a zero) had it as its observed minimum, so the canary sent -inf: a
Keras Dense(8, relu) -> Dense(1, sigmoid) answers NaN to it, and the health check then reports the version
'answered the canary row with non-finite' output."""

from __future__ import annotations

import math

import numpy as np
import pytest

from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec
from service.serving.manager import warmup_columns

INF = math.inf


def _numeric(name: str, ends: dict[str, float | None]) -> FeatureSpec:
    return FeatureSpec(
        name=name,
        kind=FeatureKind.NUMERIC,
        dtype="float64",
        nullable=False,
        observed_min=ends.get("observed_min"),
        observed_max=ends.get("observed_max"),
        allowed_min=ends.get("allowed_min"),
        allowed_max=ends.get("allowed_max"),
    )


@pytest.mark.parametrize(
    ("ends", "value"),
    [
        ({"observed_min": -3.5, "observed_max": 9.0}, -3.5),  # the observed minimum, as before
        ({"observed_min": -INF, "observed_max": 9.0}, 9.0),
        ({"observed_min": -INF, "observed_max": INF, "allowed_min": -40.0, "allowed_max": 50.0}, -40.0),
        ({"observed_min": -1e300, "observed_max": 1e300, "allowed_min": None, "allowed_max": 7.0}, 7.0),
        ({"observed_min": -INF, "observed_max": INF}, 0.0),
        ({}, 0.0),
    ],
)
def test_a_numeric_feature_warms_up_on_a_finite_float32(ends: dict[str, float | None], value: float) -> None:
    schema = ModelSchema(
        features=(
            _numeric("x", ends),
            FeatureSpec(
                name="city",
                kind=FeatureKind.CATEGORICAL,
                dtype="string",
                nullable=False,
                categories=("a", "b"),
            ),
        ),
        outputs=(OutputSpec(name="p"),),
        target="",
    )
    row = warmup_columns(schema)
    assert row["x"].dtype == np.float32 and row["x"].tolist() == [value]
    assert row["city"].tolist() == ["a"]
