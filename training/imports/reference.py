"""The reference rows of an import: read, checked for enough values, and a prediction column read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from core.bounds import MAX_REFERENCE_COLUMNS
from core.config import get_settings
from core.errors import Invalid
from core.tabular import Columns, TableStream, read_table
from registry.schema import is_missing


def read_reference(path: Path) -> Columns:
    """The reference's rows; its columns (at most :data:`core.bounds.MAX_REFERENCE_COLUMNS`) are counted
    from the Parquet metadata or the CSV header before any row is read."""
    names = TableStream(path).names
    if len(names) > MAX_REFERENCE_COLUMNS:
        raise Invalid(
            f"the reference {path} has {len(names):,} columns: a model takes at most "
            f"{MAX_REFERENCE_COLUMNS:,} (features, target and prediction column together)"
        )
    return read_table(path)


def check_reference_rows(columns: Mapping[str, np.ndarray], path: Path) -> None:
    """Every feature of the reference has at least ``drift_min_rows`` values that are not missing: fewer,
    and no drift test of that feature could ever give a verdict (``driftwarden drift`` calls it insufficient
    data)."""
    minimum = get_settings().drift_min_rows
    rows = len(next(iter(columns.values()))) if columns else 0
    if rows < minimum:
        raise Invalid(
            f"the reference {path} has {rows} row(s): a drift test needs at least {minimum} "
            "(DRIFTWARDEN_DRIFT_MIN_ROWS): give the rows the model was trained or validated on"
        )
    short = {name: int(np.count_nonzero(~is_missing(np.asarray(v)))) for name, v in columns.items()}
    short = {name: n for name, n in short.items() if n < minimum}
    if short:
        shown = ", ".join(f"{name!r} ({n})" for name, n in list(short.items())[:5])
        more = f" and {len(short) - 5} more" if len(short) > 5 else ""
        raise Invalid(
            f"the reference {path} has fewer than {minimum} values that are not missing "
            f"(DRIFTWARDEN_DRIFT_MIN_ROWS) in feature(s) {shown}{more}: no drift test of them could give a "
            "verdict; fill them, or leave them out (--features)"
        )


def read_prediction_column(reference: Columns, column: str, path: Path) -> np.ndarray:
    """A table's prediction ``column`` (of ``path``) as float64: a value per row, or [rows, K] from lists."""
    if column not in reference:
        raise Invalid(
            f"--prediction-column {column!r} is not a column of the reference {path} (its columns: "
            f"{', '.join(sorted(reference))})"
        )
    values = np.asarray(reference[column])
    if values.dtype.kind in "iufb":
        return values.astype(np.float64)
    items = values.tolist()
    if items and all(isinstance(v, str) and v.lstrip().startswith("[") for v in items):
        try:  # a CSV's lists of class probabilities, written as JSON arrays
            items = [json.loads(v) for v in items]
        except ValueError:
            raise Invalid(f"--prediction-column {column!r} holds text that is not a JSON array") from None
    if items and all(isinstance(v, list | tuple | np.ndarray) for v in items):
        widths = {len(v) for v in items}
        if len(widths) == 1:
            return np.asarray([list(v) for v in items], dtype=np.float64)
        raise Invalid(f"--prediction-column {column!r} holds lists of {len(widths)} different lengths")
    raise Invalid(
        f"--prediction-column {column!r} must hold numbers (a probability or a value) or lists of class "
        f"probabilities, found {values.dtype.name} values such as {str(items[0])[:40]!r}"
        if items
        else f"--prediction-column {column!r} is empty"
    )
