"""The traffic of an alert backtest: a version's reference rows resampled, with or without a planted shift.

Rows are drawn with replacement from the reference (features, the model's answer and the label of one row
together), by their position in the stream: the rows of any range of positions are the same whenever they
are asked for (each block of :data:`CHUNK` positions has a generator of its own, seeded by the seed and the
block), so a window can be counted again, or from any run on, without keeping its rows. A :class:`Shift`
changes the rows at and after its first position; the stream without a shift and a shifted one share their
draws.

Resampled values never leave the reference's range, real traffic does: a numeric feature's values beyond the
threshold of one of its tails (:class:`registry.tails.Tail`, fitted to the traffic's rows by
:func:`fit_tails`) are replaced by draws from that tail's generalized Pareto fit (a stream of uniforms of
their own per feature and side), so the stream keeps the reference's distribution and its tails go on beyond
its extremes, as fresh values of a heavy-tailed feature do. The model's answer and the label stay those of
the row drawn.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from core.tabular import CodedColumn, Column, as_float
from registry.schema import Task
from registry.tails import Tail, fit_tail

CHUNK = 1 << 16  # positions per generator
TAIL_STREAMS = 3  # the streams of draws from 3 on: each numeric feature's tails (lower, upper)
MINUTES_PER_DAY = 1440


class ShiftKind(enum.StrEnum):
    """What a planted shift changes."""

    ABRUPT_MEAN = "abrupt_mean"  # a numeric feature's mean moves by ABRUPT_SD reference sd at once
    GRADUAL_MEAN = "gradual_mean"  # ... by GRADUAL_SD_PER_DAY reference sd per day since the start
    NEW_CATEGORY = "new_category"  # a categorical feature takes NEW_CATEGORY in NEW_CATEGORY_SHARE of rows
    PERFORMANCE_DROP = "performance_drop"  # FLIPPED_SHARE of the labels flipped (the inputs unchanged)


ABRUPT_SD = 1.0
GRADUAL_SD_PER_DAY = 0.25
NEW_CATEGORY_SHARE = 0.10
FLIPPED_SHARE = 0.20
NEW_CATEGORY = "backtest_new_category"
GRADUAL = frozenset({ShiftKind.GRADUAL_MEAN})  # never settles: followed for the whole backtest


@dataclass(frozen=True)
class Shift:
    """A planted shift: its kind, the feature it moves (None for a performance drop) and that feature's
    reference standard deviation (the mean shifts' unit)."""

    kind: ShiftKind
    feature: str | None = None
    sd: float = 0.0


Tails = tuple[Tail | None, Tail | None]
"""A numeric feature's lower and upper tails (None: that side not fitted)."""


@dataclass(frozen=True)
class Pool:
    """The reference rows the traffic is drawn from: the features, the model's answers (``[n]``, or
    ``[n, K]`` for a multi-class model) and the labels (NaN where unknown; None without a target)."""

    columns: Mapping[str, Column]
    predictions: np.ndarray
    labels: np.ndarray | None
    task: Task
    tails: Mapping[str, Tails] = dataclasses.field(default_factory=dict)
    """Numeric features' tails, whose values are drawn from the fit (:func:`fit_tails`)."""

    @property
    def rows(self) -> int:
        return int(len(self.predictions))

    def sd(self, feature: str) -> float:
        """A numeric feature's standard deviation over the reference rows."""
        values = as_float(self.columns[feature])
        return float(np.nanstd(values)) if np.isfinite(values).any() else 0.0


@dataclass(frozen=True)
class Rows:
    """Rows of the stream: feature columns, the model's answers and the labels (None without a target)."""

    columns: dict[str, Column]
    predictions: np.ndarray
    labels: np.ndarray | None


def fit_tails(columns: Mapping[str, Column], numeric: list[str]) -> dict[str, Tails]:
    """The tails of the ``numeric`` features of ``columns`` (those with neither side fitted left out); the
    lower one of a feature whose values are all >= 0 is not drawn (its natural bound, as the contract's)."""
    out: dict[str, Tails] = {}
    for name in numeric:
        values = as_float(columns[name])
        values = values[np.isfinite(values)]
        lower = fit_tail(values, side=-1) if values.size and values.min() < 0 else None
        sides = (lower, fit_tail(values, side=+1))
        if sides != (None, None):
            out[name] = sides
    return out


@functools.lru_cache(maxsize=64)
def _draws(seed: int, block: int, stream: int, rows: int) -> np.ndarray:
    """One block's reference rows (``stream`` 0) or uniform numbers (1: new categories, 2: flips, from
    :data:`TAIL_STREAMS`: the tails' draws)."""
    rng = np.random.default_rng([seed, block, stream])
    return rng.integers(0, rows, CHUNK) if stream == 0 else rng.random(CHUNK)


def draws(seed: int, lo: int, hi: int, *, stream: int, rows: int) -> np.ndarray:
    """The draws of positions ``[lo, hi)`` of one stream of draws."""
    first, last = lo // CHUNK, (hi - 1) // CHUNK
    parts = [_draws(seed, b, stream, rows) for b in range(first, last + 1)]
    joined = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return joined[lo - first * CHUNK : hi - first * CHUNK]


@dataclass(frozen=True)
class Traffic:
    """Rows resampled from ``pool`` by position (``rate`` rows a minute), shifted from position ``start``."""

    pool: Pool
    seed: int
    rate: float
    shift: Shift | None = None
    start: int = 0

    def rows(self, lo: int, hi: int) -> Rows:
        """The rows of positions ``[lo, hi)``, features included."""
        index = draws(self.seed, lo, hi, stream=0, rows=self.pool.rows)
        columns = {name: values[index] for name, values in self.pool.columns.items()}
        for i, (name, sides) in enumerate(sorted(self.pool.tails.items())):
            columns[name] = self._tails_drawn(columns[name], sides, lo, hi, stream=TAIL_STREAMS + 2 * i)
        predictions, labels = self._outputs(index, lo, hi)
        shift = self.shift
        if shift is not None and shift.feature is not None and hi > self.start:
            columns[shift.feature] = self._shifted(columns[shift.feature], lo, hi)
        return Rows(columns=columns, predictions=predictions, labels=labels)

    def _tails_drawn(self, values: Column, sides: Tails, lo: int, hi: int, *, stream: int) -> Column:
        """``values`` with those beyond a tail's threshold drawn from its fit instead."""
        out = as_float(values).copy()
        for k, tail in enumerate(sides):
            if tail is None:
                continue
            beyond = out > tail.threshold if tail.side > 0 else out < tail.threshold
            if beyond.any():
                uniforms = draws(self.seed, lo, hi, stream=stream + k, rows=self.pool.rows)
                out[beyond] = tail.draw(uniforms[beyond])
        return out

    def outputs(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The model's answers and the labels of positions ``[lo, hi)`` (no features)."""
        return self._outputs(draws(self.seed, lo, hi, stream=0, rows=self.pool.rows), lo, hi)

    def _outputs(self, index: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray | None]:
        pool = self.pool
        labels = None if pool.labels is None else pool.labels[index]
        shift = self.shift
        if labels is not None and shift is not None and shift.kind is ShiftKind.PERFORMANCE_DROP:
            labels = self._flipped(labels, index, lo, hi)
        return pool.predictions[index], labels

    def _after(self, lo: int, hi: int) -> np.ndarray:
        """Which of positions ``[lo, hi)`` are at or after the shift's start."""
        return np.arange(lo, hi) >= self.start

    def _shifted(self, values: Column, lo: int, hi: int) -> Column:
        shift = self.shift
        assert shift is not None
        after = self._after(lo, hi)
        if shift.kind is ShiftKind.NEW_CATEGORY:
            chosen = after & (draws(self.seed, lo, hi, stream=1, rows=self.pool.rows) < NEW_CATEGORY_SHARE)
            return with_category(values, chosen)
        out = as_float(values).copy()
        if shift.kind is ShiftKind.ABRUPT_MEAN:
            out[after] += ABRUPT_SD * shift.sd
        else:
            days = (np.arange(lo, hi)[after] - self.start) / (self.rate * MINUTES_PER_DAY)
            out[after] += GRADUAL_SD_PER_DAY * shift.sd * days
        return out

    def _flipped(self, labels: np.ndarray, index: np.ndarray, lo: int, hi: int) -> np.ndarray:
        chosen = self._after(lo, hi) & (
            draws(self.seed, lo, hi, stream=2, rows=self.pool.rows) < FLIPPED_SHARE
        )
        chosen &= ~np.isnan(labels)
        out = labels.copy()
        pool = self.pool
        if pool.task is Task.BINARY:
            out[chosen] = 1.0 - out[chosen]
        elif pool.task is Task.MULTICLASS:
            classes = int(pool.predictions.shape[1])
            out[chosen] = (out[chosen] + 1.0) % classes
        else:  # a regression's label: another reference row's
            assert pool.labels is not None
            out[chosen] = pool.labels[(index[chosen] + pool.rows // 2) % pool.rows]
        return out


def with_category(values: Column, chosen: np.ndarray) -> Column:
    """A categorical column with :data:`NEW_CATEGORY` in the ``chosen`` rows."""
    if isinstance(values, CodedColumn):
        categories = np.append(values.categories, np.array([NEW_CATEGORY], dtype=object))
        codes = np.where(chosen, len(values.categories), values.codes).astype(np.int32)
        return CodedColumn(codes=codes, categories=categories)
    out = np.asarray(values, dtype=object).copy()
    out[chosen] = NEW_CATEGORY
    return out


def describe(shift: Shift) -> str:
    """What ``shift`` plants, in words: its kind, size and feature (``abrupt mean +1 sd on income``)."""
    match shift.kind:
        case ShiftKind.ABRUPT_MEAN:
            return f"abrupt mean +{ABRUPT_SD:g} sd on {shift.feature} (+{ABRUPT_SD * shift.sd:.4g} at once)"
        case ShiftKind.GRADUAL_MEAN:
            per_day = GRADUAL_SD_PER_DAY * shift.sd
            return f"gradual mean +{GRADUAL_SD_PER_DAY:g} sd a day on {shift.feature} (+{per_day:.4g} a day)"
        case ShiftKind.NEW_CATEGORY:
            return f"new category '{NEW_CATEGORY}' in {shift.feature} at {NEW_CATEGORY_SHARE * 100:g} %"
    return f"{FLIPPED_SHARE * 100:g} % of the labels flipped (inputs and answers unchanged)"
