"""The column-wise contract check answers exactly as the row-by-row walk does (property-based).

Serving checks a column of ``FAST_MIN_ROWS`` or more values as a whole and walks it row by row only when
something needs a closer look. Whatever the values (nulls, booleans, text in numeric features, huge
integers, NaN and infinities, values outside either range, empty strings, unseen categories, TF Serving's
``{"b64": ...}``), both paths must give the same model inputs bit for bit, the same flags, the same logged
rows and the same violations in the same order.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from registry import contracts
from registry.contracts import CheckedInputs, ContractViolation, check_inputs, rows_to_columns
from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec, Policy

CATEGORIES = ("a", "b", "c")


def _schema(policy: Policy, nullable: bool) -> ModelSchema:
    return ModelSchema(
        features=(
            FeatureSpec(
                "x",
                FeatureKind.NUMERIC,
                "float64",
                nullable=nullable,
                observed_min=-5.0,
                observed_max=5.0,
                allowed_min=-50.0,
                allowed_max=50.0,
                policy=policy,
            ),
            FeatureSpec("n", FeatureKind.NUMERIC, "int64", nullable=nullable, policy=policy),
            FeatureSpec(
                "c",
                FeatureKind.CATEGORICAL,
                "string",
                nullable=nullable,
                categories=CATEGORIES,
                policy=policy,
            ),
        ),
        outputs=(OutputSpec("probability"),),
        target="y",
        max_rows_per_request=1024,
    )


numbers = st.one_of(
    st.floats(min_value=-4.0, max_value=4.0),  # inside both ranges: the column-wise path's case
    st.integers(min_value=-4, max_value=4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.integers(min_value=2**53, max_value=2**64),  # float32 rounding of large integers
)
oddities = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.just([1]), st.just({"k": 1}))
categories = st.one_of(
    st.sampled_from(CATEGORIES),
    st.just(""),
    st.text(max_size=3),
    st.just({"b64": base64.b64encode(b"a").decode()}),
)


def _column(values: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """Mostly well-behaved columns (so the column-wise path runs), sometimes with odd values mixed in."""
    clean = st.lists(values, min_size=8, max_size=40)
    mixed = st.lists(st.one_of(values, odd), min_size=8, max_size=40)
    return st.one_of(clean, mixed)


@st.composite
def requests(draw: st.DrawFn) -> tuple[ModelSchema, list[dict[str, Any]]]:
    schema = _schema(draw(st.sampled_from(list(Policy))), draw(st.booleans()))
    x = draw(_column(numbers, oddities))
    n = len(x)
    col_n = draw(st.lists(st.one_of(st.integers(-3, 3), oddities), min_size=n, max_size=n))
    col_c = draw(st.lists(st.one_of(categories, oddities), min_size=n, max_size=n))
    if draw(st.booleans()):  # a clean request: every value passes
        x = [draw(st.floats(-4.0, 4.0)) for _ in range(n)]
        col_n = [draw(st.integers(-3, 3)) for _ in range(n)]
        col_c = [draw(st.sampled_from(CATEGORIES)) for _ in range(n)]
    rows = [{"x": a, "n": b, "c": c} for a, b, c in zip(x, col_n, col_c, strict=True)]
    return schema, rows


def _check(schema: ModelSchema, rows: list[dict[str, Any]], fast_min_rows: int) -> CheckedInputs | list[Any]:
    old = contracts.FAST_MIN_ROWS
    contracts.FAST_MIN_ROWS = fast_min_rows
    try:
        values, n = rows_to_columns(schema, rows)
        return check_inputs(schema, values, n, rows=rows)
    except ContractViolation as exc:
        return [v.to_dict() for v in exc.violations]
    finally:
        contracts.FAST_MIN_ROWS = old


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == np.float32:
        return a.tobytes() == b.tobytes()  # bit for bit, NaN included
    return a.tolist() == b.tolist()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
@example((_schema(Policy.FLAG, True), [{"x": 2**53 + 1, "n": 1, "c": "a"}] * 8))
@example((_schema(Policy.REJECT, False), [{"x": 1.0, "n": 1, "c": "a"}] * 7 + [{"x": 6.0, "n": 1, "c": "a"}]))
@example((_schema(Policy.FLAG, True), [{"x": 1.0, "n": True, "c": "a"}] * 8))
def test_column_wise_equals_row_walk(case: tuple[ModelSchema, list[dict[str, Any]]]) -> None:
    schema, rows = case
    walked = _check(schema, rows, fast_min_rows=10**9)  # never column-wise
    whole = _check(schema, rows, fast_min_rows=1)  # column-wise wherever it applies
    if isinstance(walked, list) or isinstance(whole, list):
        assert whole == walked
        return
    assert whole.n == walked.n
    assert whole.flags == walked.flags
    assert set(whole.arrays) == set(walked.arrays)
    for name in walked.arrays:
        assert _same_array(whole.arrays[name], walked.arrays[name]), name
    # the logged rows: the same values per feature (a reused request row may list its keys in another order)
    assert [sorted(r.items()) for r in whole.rows] == [sorted(r.items()) for r in walked.rows]


def test_clean_rows_are_logged_as_sent_without_copies() -> None:
    schema = _schema(Policy.FLAG, True)
    rows = [{"c": "b", "x": 1.5, "n": 2} for _ in range(16)]
    values, n = rows_to_columns(schema, rows)
    checked = check_inputs(schema, values, n, rows=rows)
    assert checked.rows is rows  # nothing changed: the request's own objects, no dict per row
    assert checked.arrays["x"].dtype == np.float32 and checked.arrays["c"].tolist() == ["b"] * 16


@pytest.mark.parametrize("odd", ["", {"b64": base64.b64encode(b"a").decode()}])
def test_a_changed_value_builds_the_logged_rows_again(odd: Any) -> None:
    schema = _schema(Policy.FLAG, True)
    rows = [{"x": 1.0, "n": 1, "c": "a"} for _ in range(12)]
    rows[5] = {**rows[5], "c": odd}
    values, n = rows_to_columns(schema, rows)
    checked = check_inputs(schema, values, n, rows=rows)
    assert checked.rows is not rows
    expected = None if odd == "" else "a"  # an empty category is logged as null; b64 as its text
    assert checked.rows[5] == {"x": 1.0, "n": 1, "c": expected}


def test_non_finite_and_out_of_range_columns_still_name_row_and_rule() -> None:
    schema = _schema(Policy.FLAG, True)
    rows = [{"x": 1.0, "n": 1, "c": "a"} for _ in range(20)]
    rows[13] = {**rows[13], "x": math.inf}
    rows[17] = {**rows[17], "x": 60.0}
    values, n = rows_to_columns(schema, rows)
    with pytest.raises(ContractViolation) as info:
        check_inputs(schema, values, n, rows=rows)
    assert [(v.row, v.feature, v.rule) for v in info.value.violations] == [
        (13, "x", "finite"),
        (17, "x", "allowed_range"),
    ]
