"""A sample of rows (pure): the raw values root-cause analysis needs, where the sketches keep only counts.

The reference profile keeps a uniform sample of its training rows (``profile["sample"]``) and a monitor run
reads a sample of its window (``monitors.log_window``). Harmful-drift attribution replaces one feature's
window values with draws from the reference sample, segments and weak slices group the window's rows: all
of them work on a :class:`RowSample`, numpy in and numbers out.

Columns hold a numeric feature as float64 (NaN: missing) and a categorical feature as an object array of
``str`` or ``None`` (missing). ``predictions`` is ``[n]`` (a binary model's probability, a regression's
value) or ``[n, K]`` (a multi-class model's probabilities); ``labels`` is ``[n]`` float64, NaN where a row
has none (class indexes for a multi-class model), or None when no row has one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from registry.schema import FeatureKind

SAMPLE_FORMAT = "driftwarden.rows/1"

Predict = Callable[[Mapping[str, np.ndarray]], np.ndarray]
"""A model's answers to feature columns: ``[n]`` or ``[n, K]``, as :attr:`RowSample.predictions`."""


@dataclass(frozen=True)
class Additive:
    """A model whose score is a sum of one part per feature (the surrogate): ``parts(columns)`` gives the
    intercept ``[T]`` and each feature's part ``[n, T]``, ``answers(scores)`` turns their sum into answers.
    Attribution then sums parts per coalition instead of asking the model for every coalition's rows."""

    parts: Callable[[Mapping[str, np.ndarray]], tuple[np.ndarray, dict[str, np.ndarray]]]
    answers: Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Predictor:
    """What a run asks for the model's answers: the version's own model, or a surrogate of its answers
    fitted on the reference (a version served elsewhere), with how well the surrogate fits."""

    predict: Predict
    method: str  # "model" | "surrogate"
    fit: dict[str, Any] | None = None  # the surrogate's fit on held-out reference rows
    additive: Additive | None = None  # the same answers, part by part (a surrogate)


@dataclass(frozen=True)
class RowSample:
    """Rows of a reference or a window: feature columns, predictions and (where known) labels."""

    columns: dict[str, np.ndarray]
    kinds: dict[str, FeatureKind]
    predictions: np.ndarray
    labels: np.ndarray | None = None
    population: int | None = None  # how many rows the sample was drawn from (None: unknown)

    @property
    def rows(self) -> int:
        return int(len(self.predictions))

    @property
    def labelled(self) -> int:
        """Rows with a label."""
        if self.labels is None:
            return 0
        return int(np.count_nonzero(~np.isnan(self.labels)))

    def numeric(self) -> list[str]:
        return [k for k, v in self.kinds.items() if v is FeatureKind.NUMERIC]

    def categorical(self) -> list[str]:
        return [k for k, v in self.kinds.items() if v is FeatureKind.CATEGORICAL]

    def take(self, index: np.ndarray, *, features: bool = True) -> RowSample:
        """The rows at ``index`` (positions or a boolean mask); ``features=False``: their predictions and
        labels only (no feature column copied)."""
        return RowSample(
            columns={k: v[index] for k, v in self.columns.items()} if features else {},
            kinds=dict(self.kinds) if features else {},
            predictions=self.predictions[index],
            labels=None if self.labels is None else self.labels[index],
            population=self.population,
        )

    def with_columns(self, columns: Mapping[str, np.ndarray]) -> RowSample:
        """The same rows with some columns replaced (the predictions left as they were)."""
        return RowSample(
            columns={**self.columns, **columns},
            kinds=dict(self.kinds),
            predictions=self.predictions,
            labels=self.labels,
            population=self.population,
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as null)."""

        def values(kind: FeatureKind, v: np.ndarray) -> list[Any]:
            if kind is FeatureKind.NUMERIC:  # NaN and infinities: null (tolist, then one test a value)
                x = np.asarray(v, dtype=np.float64).reshape(-1)
                return [None if f != f else f for f in np.where(np.isfinite(x), x, np.nan).tolist()]
            return [None if x is None else str(x) for x in v]

        return {
            "format": SAMPLE_FORMAT,
            "kinds": {k: v.value for k, v in self.kinds.items()},
            "columns": {k: values(self.kinds[k], v) for k, v in self.columns.items()},
            "predictions": _json_floats(self.predictions),
            "labels": None
            if self.labels is None
            else [None if not math.isfinite(x) else float(x) for x in self.labels],
            "population": self.population,
        }


def _json_floats(values: np.ndarray) -> list[Any]:
    """Rows of floats as JSON lists (NaN and infinities: null), one level per dimension."""
    x = np.asarray(values, dtype=np.float64)
    nested: list[Any] = np.where(np.isfinite(x), x, np.nan).tolist()

    def clean(v: Any) -> Any:
        return [clean(i) for i in v] if isinstance(v, list) else (None if v != v else v)

    return [clean(v) for v in nested]


def _floats(values: Sequence[Any]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def sample_from_dict(data: Mapping[str, Any]) -> RowSample:
    """Rebuild a sample from :meth:`RowSample.as_dict` output."""
    kinds = {k: FeatureKind(v) for k, v in data["kinds"].items()}
    columns: dict[str, np.ndarray] = {}
    for name, values in data["columns"].items():
        if kinds[name] is FeatureKind.NUMERIC:
            columns[name] = _floats(values)
        else:
            columns[name] = np.array([None if v is None else str(v) for v in values], dtype=object)
    raw = data.get("predictions") or []
    predictions = (
        np.array([[np.nan if x is None else float(x) for x in row] for row in raw], dtype=np.float64)
        if raw and isinstance(raw[0], list)
        else _floats(raw)
    )
    labels = data.get("labels")
    return RowSample(
        columns=columns,
        kinds=kinds,
        predictions=predictions,
        labels=None if labels is None else _floats(labels),
        population=data.get("population"),
    )


def uniform_positions(n: int, k: int, *, seed: int = 0) -> np.ndarray:
    """``min(n, k)`` distinct positions of ``0..n-1``, drawn uniformly, in increasing order."""
    if n <= k:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def category_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A categorical column's int64 codes (-1: missing, None or "") into its sorted distinct levels, and the
    levels (an object array). The text is compared as Python strings, never copied into a fixed-width array:
    one 2 MB category in a sample of 20,000 rows would make that copy 160 GB. When every present value is a
    ``str`` (text: the samples hold nothing else), the distinct words are sorted, not every value (the same
    levels and codes as ``np.unique``, whose object sort compares each value: ~3 of ~4 ms for 10,000 rows)."""
    col = np.asarray(values, dtype=object)
    missing = np.equal(col, np.array([None], dtype=object)) | (col == "")
    present = col[~missing]
    words = present.tolist()
    if all(type(w) is str for w in words):  # str's order is total: as np.unique sorts and merges them
        found = sorted(set(words))
        index = {w: i for i, w in enumerate(found)}
        inverse = np.fromiter(map(index.__getitem__, words), dtype=np.int64, count=len(words))
        levels = np.empty(len(found), dtype=object)
        levels[:] = found
    else:
        levels, inverse = np.unique(present, return_inverse=True)
    codes = np.full(col.size, -1, dtype=np.int64)
    codes[~missing] = inverse.reshape(-1)
    return codes, levels
