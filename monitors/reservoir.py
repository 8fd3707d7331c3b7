"""A uniform sample of rows that arrive in batches of unknown number (pure): the rows of a file read batch by
batch (``driftwarden drift``'s CURRENT), kept as a :class:`monitors.rows.RowSample`.

Each row draws a uniform key (one seeded generator, so the same batches give the same sample); the sample is
the rows with the ``rows`` smallest keys, which is a uniform sample without replacement of every row seen.
Only a batch's rows whose key beats the current ``rows``-th smallest are taken out of it (a text column may
be dictionary codes: :class:`core.tabular.CodedColumn`), so the cost after the first batches is a draw of
keys per row and a few copies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from core.tabular import CodedColumn, Column, as_float
from monitors.rows import RowSample
from registry.schema import FeatureKind


def sample_texts(values: Column) -> np.ndarray:
    """Categorical values as ``str`` or None (missing: None, NaN or ``""``), an object array; codes are
    mapped by their words, each word once."""
    if isinstance(values, CodedColumn):
        lookup = np.empty(len(values.categories) + 1, dtype=object)  # the last: code -1, a null
        lookup[:-1] = [None if w == "" else str(w) for w in values.categories.tolist()]
        return lookup[values.codes]
    raw = np.asarray(values, dtype=object)
    out = np.empty(len(raw), dtype=object)
    for i, v in enumerate(raw.tolist()):
        missing = v is None or v == "" or (isinstance(v, float) and math.isnan(v))
        out[i] = None if missing else str(v)
    return out


class RowReservoir:
    """At most ``rows`` rows drawn uniformly from every row added, batch by batch."""

    def __init__(self, kinds: Mapping[str, FeatureKind], *, rows: int, seed: int = 0) -> None:
        self.kinds = dict(kinds)
        self.size = rows
        self.seed = seed
        self.reset()

    def reset(self) -> None:
        """Forget every row (a file read again from its start)."""
        self.rng = np.random.default_rng(self.seed)
        self.seen = 0
        self.keys = np.empty(0)
        self.positions = np.empty(0, dtype=np.int64)
        numeric = {name for name, kind in self.kinds.items() if kind is FeatureKind.NUMERIC}
        self.columns: dict[str, np.ndarray] = {
            name: np.empty(0, dtype=np.float64 if name in numeric else object) for name in self.kinds
        }
        self.predictions = np.empty(0)
        self.labels: np.ndarray | None = None

    def add(
        self,
        columns: Mapping[str, Column],
        *,
        predictions: np.ndarray | None = None,
        labels: np.ndarray | None = None,
    ) -> None:
        """Offer one batch's rows (every feature of ``kinds``; answers and labels when the file has them)."""
        n = len(next(iter(columns.values()))) if columns else (0 if predictions is None else len(predictions))
        if n == 0 or self.size <= 0:
            return
        keys = self.rng.random(n)
        if self.keys.size >= self.size:
            limit = np.partition(self.keys, self.size - 1)[self.size - 1]
            taken = np.flatnonzero(keys < limit)
        else:
            taken = np.arange(n)
        self._append(taken, keys, columns, predictions, labels)
        self.seen += n
        if self.keys.size > self.size:
            self._keep(np.argpartition(self.keys, self.size - 1)[: self.size])

    def _append(
        self,
        taken: np.ndarray,
        keys: np.ndarray,
        columns: Mapping[str, Column],
        predictions: np.ndarray | None,
        labels: np.ndarray | None,
    ) -> None:
        self.keys = np.concatenate([self.keys, keys[taken]])
        self.positions = np.concatenate([self.positions, self.seen + taken])
        for name, kind in self.kinds.items():
            numeric = kind is FeatureKind.NUMERIC
            if name not in columns:  # a feature the file lacks: missing in every row
                new = np.full(taken.size, np.nan) if numeric else np.full(taken.size, None, dtype=object)
            else:
                values = columns[name][taken]
                new = as_float(values).astype(np.float64) if numeric else sample_texts(values)
            self.columns[name] = np.concatenate([self.columns[name], new])
        answers = np.full(taken.size, np.nan) if predictions is None else as_float(predictions[taken])
        self.predictions = np.concatenate([self.predictions, answers])
        if labels is not None or self.labels is not None:
            held = self.labels if self.labels is not None else np.full(self.keys.size - taken.size, np.nan)
            new_labels = np.full(taken.size, np.nan) if labels is None else as_float(labels[taken])
            self.labels = np.concatenate([held, new_labels])

    def _keep(self, index: np.ndarray) -> None:
        self.keys, self.positions = self.keys[index], self.positions[index]
        self.columns = {name: values[index] for name, values in self.columns.items()}
        self.predictions = self.predictions[index]
        self.labels = None if self.labels is None else self.labels[index]

    def sample(self) -> RowSample | None:
        """The rows kept, in the order they were added (None before any row)."""
        if self.seen == 0 or self.size <= 0:
            return None
        order = np.argsort(self.positions, kind="stable")
        return RowSample(
            columns={name: values[order] for name, values in self.columns.items()},
            kinds=dict(self.kinds),
            predictions=self.predictions[order],
            labels=None if self.labels is None else self.labels[order],
            population=self.seen,
        )

    def kept_positions(self) -> np.ndarray:
        """The kept rows' places among every row added, in order."""
        return np.sort(self.positions)
