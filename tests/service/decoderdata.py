"""The request decoders' property tests' schema, hypothesis settings, JSON value strategies and check."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from core.http import holds_nul
from registry.contracts import ContractViolation, check_inputs
from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec, Policy
from service.serving.codecs import BadRequest

SCHEMA = ModelSchema(
    features=(
        FeatureSpec("age", FeatureKind.NUMERIC, "int64", nullable=False, allowed_min=0, allowed_max=120),
        FeatureSpec(
            "income", FeatureKind.NUMERIC, "float64", nullable=True, observed_min=0, observed_max=1e6
        ),
        FeatureSpec("score", FeatureKind.NUMERIC, "float64", nullable=True),  # no range at all
        FeatureSpec(
            "region", FeatureKind.CATEGORICAL, "string", nullable=False, categories=("north", "south")
        ),
        FeatureSpec(
            "plan", FeatureKind.CATEGORICAL, "string", nullable=True, categories=("a",), policy=Policy.REJECT
        ),
    ),
    outputs=(OutputSpec("probability"),),
    target="default",
    max_rows_per_request=16,
)


NAMES = [*SCHEMA.feature_names, "input", "unknown", ""]


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["north", "south", "a", "", "NaN", "nor\x00th"]),
)


json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(NAMES)), inner, max_size=5),
    ),
    max_leaves=30,
)


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decoded_or_named(decode: Any) -> None:
    """Run ``decode`` and the contract check; only a rule-naming 4xx error may come out."""
    try:
        cols = decode()
        checked = check_inputs(SCHEMA, cols.values, cols.n, rows=cols.rows)
    except BadRequest as exc:
        assert exc.status_code == 400 and "(rule: " in str(exc), exc
        return
    except ContractViolation as exc:
        assert exc.violations and all(v.rule and v.message for v in exc.violations), exc
        assert str(exc)
        return
    # accepted: one value per row for every feature, and what reaches the model is finite where it must be
    assert 1 <= checked.n <= SCHEMA.max_rows_per_request and len(checked.rows) == checked.n
    assert not holds_nul(checked.rows)  # PostgreSQL's JSONB refuses it: the row could never be logged
    for spec in SCHEMA.features:
        column = checked.arrays[spec.name]
        assert len(column) == checked.n
        if spec.kind is FeatureKind.NUMERIC:
            assert column.dtype == np.float32
            assert not np.isinf(column).any(), (spec.name, column)  # NaN only for a missing value
