"""What ``driftwarden drift`` gathers of a file's columns while it reads them batch by batch
(:mod:`monitors.offline`): the facts the pre-flight checks read (:class:`FileFacts`; the values are not kept)
and a column assembled whole from its batches (:class:`Assembled`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from core.tabular import CodedColumn, Column


@dataclass
class ColumnFacts:
    """What the pre-flight checks read of one column, gathered batch by batch (the values are not kept).

    Text keeps its distinct values (the dictionary, small by nature); numbers keep one present value, their
    range with ``ranged`` (predictions: the checks report it) and every distinct value with ``distinct``
    (labels: the checks list those that are not 0/1).
    """

    distinct: bool = False
    ranged: bool = False
    rows: int = 0
    missing: int = 0
    text: bool = False
    integer: bool = True  # every batch held integers without a missing value
    low: float = np.inf
    high: float = -np.inf
    values: set[Any] = field(default_factory=set)

    def add(self, values: Column) -> None:
        """Count one batch of the column."""
        self.rows += len(values)
        if isinstance(values, CodedColumn):
            self.text, self.integer = True, False
            for key, n in values.counts().items():
                self.missing += n if key is None or key == "" else 0
                self.values.add(key)
            return
        present = values
        if values.dtype.kind == "f":
            self.integer = False
            nan = np.isnan(values)
            missing = int(np.count_nonzero(nan))
            if missing:
                self.missing += missing
                if not (self.distinct or self.ranged):  # one present value is all that is kept
                    if self.low == np.inf and missing < len(values):
                        self.low = self.high = float(values[int(np.argmin(nan))])
                    return
                present = values[~nan]
        if not present.size:
            return
        if self.distinct:
            self.values.update(np.unique(present).tolist())
        elif self.ranged:
            self.low = min(self.low, float(present.min()))
            self.high = max(self.high, float(present.max()))
        elif self.low == np.inf:
            self.low = self.high = float(present[0])

    def sample(self) -> np.ndarray:
        """A few values standing for the column: its distinct values (text, labels), its range (or one
        value), plus a missing value when it has one; the dtype ``read_table`` would give the whole column."""
        if self.text:
            out = np.empty(len(self.values), dtype=object)
            out[:] = sorted(self.values, key=lambda v: (v is not None, "" if v is None else str(v)))
            return out
        present = [self.low, self.high] if self.rows > self.missing else []
        present = sorted(self.values) if self.distinct else present
        if self.integer:
            return np.array(present, dtype=np.int64)
        return np.array(present + ([np.nan] if self.missing else []), dtype=np.float64)


class _StandIn:
    """A column as the checks see it: ``len`` is its row count, ``np.asarray`` its sample of values."""

    def __init__(self, rows: int, values: np.ndarray) -> None:
        self.rows, self.values = rows, values

    def __len__(self) -> int:
        return self.rows

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return self.values if dtype is None else self.values.astype(dtype)


@dataclass
class FileFacts:
    """A file's column names (in order), its row count, and the facts of the columns that were read."""

    names: list[str]
    rows: int = 0
    columns: dict[str, ColumnFacts] = field(default_factory=dict)

    def for_checks(self) -> dict[str, np.ndarray]:
        """Every column as a stand-in the functions of :mod:`monitors.checks` read like the full column."""
        empty = np.zeros(0)
        out = {
            name: _StandIn(self.rows, self.columns[name].sample() if name in self.columns else empty)
            for name in self.names
        }
        return cast(dict[str, np.ndarray], out)  # they read only len() and np.asarray(): see _StandIn

    def missing_rate(self, name: str) -> float:
        facts = self.columns[name]
        return facts.missing / facts.rows if facts.rows else 0.0


def column_facts(name: str, target: str | None, prediction: str | None, numeric_target: bool) -> ColumnFacts:
    """What is gathered of a column: the target's distinct values (a numeric target's range), the
    prediction's range."""
    is_target = name == target
    return ColumnFacts(
        distinct=is_target and not numeric_target,
        ranged=name == prediction or (is_target and numeric_target),
    )


class Assembled:
    """One column assembled from its batches: numbers into one array (allocated once when the row count is
    known; a first batch of every row is kept as it is, no copy), codes onto one dictionary."""

    def __init__(self, rows: int | None) -> None:
        self.rows = rows
        self.filled = 0
        self.array: np.ndarray | None = None
        self.parts: list[Column] = []

    def add(self, values: Column) -> None:
        if self.rows is None or isinstance(values, CodedColumn):
            self.parts.append(values)
            return
        if self.array is None and len(values) == self.rows:  # the whole column in one batch
            self.array, self.filled = values, len(values)
            return
        if self.array is None:
            self.array = np.empty(self.rows, dtype=values.dtype)
        elif self.array.dtype != values.dtype and values.dtype.kind == "f":
            self.array = self.array.astype(np.float64)  # an integer column with a missing value: floats
        self.array[self.filled : self.filled + len(values)] = values
        self.filled += len(values)

    def column(self) -> Column:
        if self.array is not None:
            return self.array[: self.filled]
        coded = [p for p in self.parts if isinstance(p, CodedColumn)]
        if coded:
            return CodedColumn.concat(coded)
        return np.concatenate([np.asarray(p) for p in self.parts]) if self.parts else np.zeros(0)
