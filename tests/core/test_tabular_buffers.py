"""A batch's numbers and codes read from the Arrow buffers: the values ``Array.to_numpy`` gives (nulls NaN,
codes -1), for every numeric type, with nulls and at an offset (a slice), without loading pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.tabular import CodedColumn, _batch_column

TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.float32(), pa.float64(), pa.bool_()]


def _expected(array: pa.Array) -> np.ndarray:
    """The values as the ``to_numpy`` path typed them: int64 without nulls, else float64 with NaN."""
    if array.null_count or pa.types.is_floating(array.type):
        return np.asarray(array.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    return np.asarray(array.to_numpy(zero_copy_only=False)).astype(np.int64)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(TYPES),
    st.lists(st.one_of(st.none(), st.integers(0, 100)), min_size=0, max_size=40),
    st.integers(0, 5),
    st.integers(0, 5),
)
def test_numbers_are_the_values_to_numpy_gives(
    kind: pa.DataType, cells: list[int | None], lo: int, cut: int
) -> None:
    values = [None if v is None else (bool(v % 2) if kind == pa.bool_() else v) for v in cells]
    array = pa.array(values, type=kind)
    array = array.slice(min(lo, len(array)), max(len(array) - lo - cut, 0))
    got = _batch_column(array)
    assert isinstance(got, np.ndarray)
    want = _expected(array)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dictionary", [False, True])
def test_codes_mark_nulls_minus_one_at_any_offset(dictionary: bool) -> None:
    array = pa.array(["a", None, "b", "a", None, "c"])
    if dictionary:
        array = pc.dictionary_encode(array)
    for start in range(4):
        part = array.slice(start)
        got = _batch_column(part)
        assert isinstance(got, CodedColumn)
        assert got.decode().tolist() == part.to_pylist()
        assert (got.codes == -1).tolist() == [v is None for v in part.to_pylist()]


def test_reading_a_parquet_file_loads_no_pandas(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = {"x": [1.0, None, 3.0], "n": [1, 2, None], "t": ["a", None, "b"], "b": [True, False, True]}
    pq.write_table(pa.table(table), path)
    script = """
import sys
import numpy as np
from core.tabular import TableStream, fold_batches
rows = fold_batches(TableStream(sys.argv[1]), columns=None, start=list, add=lambda s, b: s.append(b))
assert len(rows) == 1 and np.isnan(rows[0]["x"][1]) and np.isnan(rows[0]["n"][2]), rows
assert rows[0]["t"].decode().tolist() == ["a", None, "b"] and rows[0]["b"].tolist() == [1, 0, 1]
print("pandas" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
