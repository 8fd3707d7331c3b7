"""A partition's figures (monitors/segment_figures.py), pure: counted for every segment at once, they are the
very numbers a pass over each segment's own rows gives (KS distance, sizes, category counts, missing
values), ties, missing values, empty segments and rows of no segment included."""

from __future__ import annotations

import numpy as np
import pytest

from monitors.rows import RowSample
from monitors.segment_figures import figures, pool_values
from registry.schema import FeatureKind

SIZE = 5  # segment codes 0..4; -1 and 5: rows of no segment


def _ks(current: np.ndarray, reference: np.ndarray) -> float:
    """The two-sample KS distance, straight from its definition (both ECDFs at every point)."""
    current, reference = np.sort(current[~np.isnan(current)]), np.sort(reference[~np.isnan(reference)])
    if current.size == 0 or reference.size == 0:
        return 0.0
    points = np.concatenate([current, reference])
    f_c = np.searchsorted(current, points, side="right") / current.size
    f_r = np.searchsorted(reference, points, side="right") / reference.size
    return float(np.max(np.abs(f_c - f_r)))


def _sample(rng: np.random.Generator, rows: int, shift: float) -> tuple[RowSample, np.ndarray]:
    x = np.round(rng.normal(shift, 1.0, rows) * 2) / 2  # halves: many ties, across both samples
    x[rng.random(rows) < 0.1] = np.nan
    x[rng.random(rows) < 0.05] = -0.0  # equal to 0.0
    cats = rng.integers(-1, 4, rows)  # -1: missing
    codes = rng.integers(-1, SIZE + 1, rows)
    codes[codes == 3] = 2  # segment 3 empty in both samples
    if shift:
        codes[codes == 4] = 0  # segment 4 empty in the window only
    kinds = {"x": FeatureKind.NUMERIC, "c": FeatureKind.CATEGORICAL, "s": FeatureKind.CATEGORICAL}
    columns = {"x": x, "c": cats, "s": np.zeros(rows, dtype=np.int64)}
    return RowSample(columns=columns, kinds=kinds, predictions=np.zeros(rows)), codes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_figures_are_the_per_segment_numbers(seed: int) -> None:
    rng = np.random.default_rng(seed)
    (window, w_codes), (reference, r_codes) = _sample(rng, 3_000, 0.3), _sample(rng, 4_000, 0.0)
    pools = {"x": pool_values(window.columns["x"], reference.columns["x"])}
    found = figures(
        window=window, reference=reference, codes=(w_codes, r_codes), size=SIZE, skip="s", pools=pools
    )
    assert found.names == ["x", "c", "s"] and set(found.ks) == {"x"} and set(found.counts) == {"c"}
    w_x, r_x = window.columns["x"], reference.columns["x"]
    w_c, r_c = window.columns["c"], reference.columns["c"]
    for code in range(SIZE):
        w_in, r_in = w_codes == code, r_codes == code
        d, n, m = found.ks["x"][0][code], found.ks["x"][1][code], found.ks["x"][2][code]
        assert (n, m) == (np.count_nonzero(~np.isnan(w_x[w_in])), np.count_nonzero(~np.isnan(r_x[r_in])))
        assert float(d) == _ks(w_x[w_in], r_x[r_in])
        rest = found.rest_ks("x", code)
        assert rest[0] == _ks(w_x[~w_in], r_x[~r_in])
        assert rest[1:] == (np.count_nonzero(~np.isnan(w_x[~w_in])), np.count_nonzero(~np.isnan(r_x[~r_in])))
        assert (found.rows[0][code], found.rows[1][code]) == (np.count_nonzero(w_in), np.count_nonzero(r_in))
        assert found.missing["x"][0][code] == np.count_nonzero(np.isnan(w_x[w_in]))
        assert found.missing["c"][1][code] == np.count_nonzero(r_c[r_in] < 0)
        w_counts, _, r_counts, _ = found.counts["c"]
        assert list(w_counts[code]) == [np.count_nonzero(w_c[w_in] == k) for k in range(4)]
        assert list(r_counts[code]) == [np.count_nonzero(r_c[r_in] == k) for k in range(4)]
    assert found.ks["x"][0][3] == 0.0 and found.ks["x"][1][3] == 0  # an empty segment: no distance
    assert found.total_rows == (3_000, 4_000)
    assert found.total_missing["x"] == (np.count_nonzero(np.isnan(w_x)), np.count_nonzero(np.isnan(r_x)))
