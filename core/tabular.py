"""Tabular files (CSV or Parquet) as ordered numpy columns: floats for numbers, objects for strings.

A file that cannot be read or written raises :class:`TableError`: one line naming the file, what is wrong and
how to fix it (answered by the CLI root as ``error: ...`` with exit code 2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from core.errors import Invalid

Columns = dict[str, np.ndarray]
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class TableError(Invalid, ValueError):
    """A data file that cannot be read or written (missing, wrong format, empty, malformed).

    Also a ``ValueError`` so callers that catch bad input as ``ValueError`` keep working.
    """


def _to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    t = column.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        if column.null_count:
            return column.to_numpy(zero_copy_only=False).astype(np.float64)
        return column.to_numpy().astype(np.int64)
    if pa.types.is_floating(t):
        return column.to_numpy(zero_copy_only=False).astype(np.float64)
    return np.array(column.to_pylist(), dtype=object)


def _format(p: Path, *, verb: str) -> str:
    fmt = SUFFIXES.get(p.suffix.lower())
    if fmt is None:
        raise TableError(
            f"cannot {verb} {p}: unsupported file type {p.suffix or '(none)'!r}; use .csv or .parquet"
        )
    return fmt


def read_table(path: str | Path) -> Columns:
    """Read a ``.csv`` or ``.parquet`` file into columns; nulls become NaN or None.

    Raises :class:`TableError` for a missing, empty, malformed or unsupported file, or duplicate column names.
    """
    p = Path(path)
    if not p.exists():
        raise TableError(
            f"data file not found: {p} (check the path; make one with `driftwarden data generate`)"
        )
    if p.is_dir():
        raise TableError(f"{p} is a directory, not a data file: give a .csv or .parquet file")
    fmt = _format(p, verb="read")
    if fmt == "csv" and p.stat().st_size == 0:
        raise TableError(f"{p} is empty (0 bytes): a CSV needs a header row and data rows")
    try:
        if fmt == "csv":
            table = pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
        else:
            table = pq.read_table(p)
    except (pa.ArrowException, OSError) as exc:
        reason = " ".join(str(exc).split())
        raise TableError(f"cannot read {p} as {fmt.upper()}: {reason}") from exc
    duplicates = sorted(name for name, n in Counter(table.column_names).items() if n > 1)
    if duplicates:
        raise TableError(f"{p} has duplicate column names {duplicates}: rename them so each is unique")
    return {name: _to_numpy(table.column(name)) for name in table.column_names}


def write_table(columns: Mapping[str, np.ndarray], path: str | Path) -> Path:
    """Write columns to ``.csv`` or ``.parquet`` (chosen by the suffix); NaN/None become nulls."""
    p = Path(path)
    fmt = _format(p, verb="write")
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
    if fmt == "csv":
        pacsv.write_csv(table, p)
    else:
        pq.write_table(table, p)
    return p


def as_float(values: np.ndarray) -> np.ndarray:
    """A numeric column as float64 (NaN for missing); strings that are not numbers become NaN."""
    if values.dtype.kind in "iufb":
        return np.asarray(values, dtype=np.float64)
    out = np.full(values.shape, np.nan)
    for i, v in enumerate(values):
        try:
            out[i] = float(v) if v is not None and v != "" else np.nan
        except (TypeError, ValueError):
            out[i] = np.nan
    return out
