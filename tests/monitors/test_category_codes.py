"""``monitors.rows.category_codes``: text sorted by its distinct words gives ``np.unique``'s levels and codes;
anything else still goes through ``np.unique``."""

from __future__ import annotations

import numpy as np
import pytest

from monitors.rows import category_codes


def _by_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The codes and levels as ``np.unique`` gives them (what category_codes did for every column)."""
    col = np.asarray(values, dtype=object)
    missing = np.equal(col, np.array([None], dtype=object)) | (col == "")
    levels, inverse = np.unique(col[~missing], return_inverse=True)
    codes = np.full(col.size, -1, dtype=np.int64)
    codes[~missing] = inverse.reshape(-1)
    return codes, levels


@pytest.mark.parametrize("seed", range(20))
def test_text_codes_are_np_uniques(seed: int) -> None:
    rng = np.random.default_rng(seed)
    words = ["b", "a", "B", "ab", "a b", "é", "e\u0301", "Z", "10", "9", " ", "zz" * 50, None, ""]
    values = np.empty(int(rng.integers(0, 400)), dtype=object)
    values[:] = [words[i] for i in rng.integers(0, len(words), values.size)]
    codes, levels = category_codes(values)
    want_codes, want_levels = _by_unique(values)
    assert codes.dtype == np.int64 and np.array_equal(codes, want_codes)
    assert levels.dtype == object and levels.tolist() == want_levels.tolist()


def test_values_that_are_not_all_text_go_through_np_unique() -> None:
    values = np.array([3, 1, None, 3, "", 2.5], dtype=object)
    codes, levels = category_codes(values)
    want_codes, want_levels = _by_unique(values)
    assert np.array_equal(codes, want_codes) and levels.tolist() == want_levels.tolist() == [1, 2.5, 3]
