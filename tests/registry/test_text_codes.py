"""Text held as objects, counted by codes (``core.tabular.text_codes``): the same contract, missing mask,
reference profile and window counts as the per-value path it replaces, on any mix of words, empty strings,
None and NaN; a column holding anything else keeps the per-value path."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.tabular import SMALL_TEXT, CodedColumn, as_coded, text_codes, value_counts
from monitors.profile import categorical_summary
from monitors.sketch import split_missing
from registry.schema import MAX_CATEGORIES, FeatureKind, infer_feature, is_missing

CELLS = st.one_of(
    st.sampled_from(["a", "b", "B", "ä", " a", "a ", "10", "1.0", "x" * 300, ""]),
    st.text(max_size=4),
    st.none(),
    st.just(float("nan")),
)


def _missing(v: Any) -> bool:
    """The per-value rule: None, "" or a float NaN."""
    return v is None or v == "" or (isinstance(v, float) and math.isnan(v))


def column(cells: list[Any]) -> np.ndarray:
    out = np.empty(len(cells), dtype=object)
    out[:] = cells
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(CELLS, min_size=1, max_size=60))
def test_codes_give_the_per_value_contract_and_counts(cells: list[Any]) -> None:
    values = column(cells)
    coded = text_codes(values)
    assert coded is not None
    assert coded.decode().tolist() == [None if v is None or v != v else v for v in cells]
    assert is_missing(values).tolist() == [_missing(v) for v in cells]
    present = [str(v) for v in cells if not _missing(v)]
    spec = infer_feature("f", values)
    assert spec.kind is FeatureKind.CATEGORICAL
    assert spec.categories == tuple(sorted(set(present)))
    assert spec.missing_rate == sum(map(_missing, cells)) / len(cells)
    assert spec.nullable == any(map(_missing, cells))
    assert infer_feature("f", coded) == spec
    tiled = np.tile(values, SMALL_TEXT // len(cells) + 1)  # long enough to be hashed by pandas
    big = text_codes(tiled)
    assert big is not None
    assert big.decode().tolist() == coded.decode().tolist() * (len(tiled) // len(cells))
    assert is_missing(tiled).tolist() == is_missing(values).tolist() * (len(tiled) // len(cells))
    assert infer_feature("f", tiled) == spec
    old_cats, old_missing = split_missing(Counter(cells))
    new_cats, new_missing = split_missing(value_counts(coded))
    assert (new_cats, new_missing) == (old_cats, old_missing)
    assert categorical_summary(coded, name="f") == categorical_summary(values, name="f")


def test_many_levels_keep_the_most_frequent_by_count_then_text() -> None:
    words = [f"w{i:03d}" for i in range(MAX_CATEGORIES + 6)]
    cells = [w for i, w in enumerate(words) for _ in range(1 + (i % 3))] + [None, ""]
    values = column(cells)
    spec = infer_feature("f", values, wide=True)
    counts = Counter(str(c) for c in cells if not _missing(c))
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CATEGORIES]
    assert spec.levels == len(words)
    assert spec.categories == tuple(sorted(w for w, _ in top))
    with pytest.raises(ValueError, match="distinct strings"):
        infer_feature("f", values)


@pytest.mark.parametrize(
    "cells",
    [["a", 1, "b"], ["a", 1.5], ["a", True], [1, 1.0, None], ["a", np.datetime64("2024-01-01")]],
)
def test_a_column_with_other_values_keeps_the_per_value_path(cells: list[Any]) -> None:
    values = column(cells)
    assert text_codes(values) is None
    assert text_codes(np.tile(values, SMALL_TEXT)) is None
    assert as_coded(values) is values
    spec = infer_feature("f", values)
    assert spec.categories == tuple(sorted({str(v) for v in cells if not _missing(v)}))
    assert is_missing(values).tolist() == [_missing(v) for v in cells]


def test_as_coded_leaves_numbers_and_codes_alone() -> None:
    numbers = np.array([1.0, np.nan])
    codes = CodedColumn(codes=np.array([0, -1], dtype=np.int32), categories=column(["a"]))
    assert as_coded(numbers) is numbers
    assert as_coded(codes) is codes
    assert isinstance(as_coded(column(["a", None])), CodedColumn)


def test_a_str_subclass_is_coded_as_plain_text() -> None:
    for size in (3, SMALL_TEXT + 1):
        values = column([np.str_("a"), "b", None] * (size // 3 + 1))
        coded = text_codes(values)
        assert coded is not None
        assert [type(w) for w in coded.categories.tolist()] == [str, str]
        assert infer_feature("f", values).categories == ("a", "b")
