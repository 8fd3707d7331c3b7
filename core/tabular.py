"""Tabular files (CSV or Parquet) as ordered numpy columns: floats for numbers, objects for strings."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

Columns = dict[str, np.ndarray]


def _to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    t = column.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        if column.null_count:
            return column.to_numpy(zero_copy_only=False).astype(np.float64)
        return column.to_numpy().astype(np.int64)
    if pa.types.is_floating(t):
        return column.to_numpy(zero_copy_only=False).astype(np.float64)
    return np.array(column.to_pylist(), dtype=object)


def read_table(path: str | Path) -> Columns:
    """Read a ``.csv`` or ``.parquet`` file into columns; nulls become NaN or None."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"data file not found: {p}")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        table = pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    elif suffix in {".parquet", ".pq"}:
        table = pq.read_table(p)
    else:
        raise ValueError(f"unsupported data file {p.name!r}: use .csv or .parquet")
    return {name: _to_numpy(table.column(name)) for name in table.column_names}


def write_table(columns: Mapping[str, np.ndarray], path: str | Path) -> Path:
    """Write columns to ``.csv`` or ``.parquet`` (chosen by the suffix); NaN/None become nulls."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for name, col in columns.items():
        if col.dtype.kind == "f":
            arrays[name] = pa.array(col, mask=np.isnan(col))
        elif col.dtype.kind == "O":
            arrays[name] = pa.array([None if v is None or v == "" else str(v) for v in col], type=pa.string())
        else:
            arrays[name] = pa.array(col)
    table = pa.table(arrays)
    suffix = p.suffix.lower()
    if suffix == ".csv":
        pacsv.write_csv(table, p)
    elif suffix in {".parquet", ".pq"}:
        pq.write_table(table, p)
    else:
        raise ValueError(f"unsupported output file {p.name!r}: use .csv or .parquet")
    return p
