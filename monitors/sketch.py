"""A window's mergeable sketch: everything the drift report needs, bounded by the profile's size.

Feed chunks of the prediction log (columns as numpy arrays, plus predictions and labels when known)
with :meth:`WindowSketch.update`, in time order; sketches of different chunks or replicas combine
with :meth:`WindowSketch.merge` (except the streaming error detector, which needs order).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from core.tabular import CodedColumn, Column, value_counts
from monitors.binning import GridCounts, count_on_grid
from monitors.drift.multivariate import pca_error_counts
from monitors.drift.streaming import PageHinkley
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from registry.schema import Task

COUNT_TASKS = 4
"""Pool tasks counting one chunk's features in :meth:`WindowSketch.update` (every fourth feature each): one
task per feature cost ~25 more CPU-ms in handing over and waking threads on the 1M-row bench file
(16 chunks x 25 features), whose counts take ~0.2 CPU-s in all."""

REGRESSION_ERROR_SCALE = 4.0
"""A regression's error stream is ``|y - value| / (4 x the reference MAE)``, capped at 1: on the scale of a
classifier's ``|y - p|`` (mean about a quarter), so the Page-Hinkley detector's defaults fit both."""


@dataclass
class LabelCounts:
    """Labelled rows: confusion counts at the threshold and prediction counts per class on the grid."""

    rows: int = 0
    true_pos: int = 0
    false_pos: int = 0
    false_neg: int = 0
    true_neg: int = 0
    positive_cells: np.ndarray | None = None
    negative_cells: np.ndarray | None = None

    def merge(self, other: LabelCounts) -> LabelCounts:
        def add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            return b if a is None else a if b is None else a + b

        return LabelCounts(
            rows=self.rows + other.rows,
            true_pos=self.true_pos + other.true_pos,
            false_pos=self.false_pos + other.false_pos,
            false_neg=self.false_neg + other.false_neg,
            true_neg=self.true_neg + other.true_neg,
            positive_cells=add(self.positive_cells, other.positive_cells),
            negative_cells=add(self.negative_cells, other.negative_cells),
        )


@dataclass
class RegressionSums:
    """Labelled rows of a regression: sums of the errors, their magnitudes and squares, and of the labels."""

    rows: int = 0
    error: float = 0.0
    absolute: float = 0.0
    squared: float = 0.0
    label: float = 0.0
    label_squared: float = 0.0

    @classmethod
    def of(cls, values: np.ndarray, labels: np.ndarray) -> RegressionSums:
        err = values - labels
        return cls(
            rows=int(err.size),
            error=float(err.sum()),
            absolute=float(np.abs(err).sum()),
            squared=float((err**2).sum()),
            label=float(labels.sum()),
            label_squared=float((labels**2).sum()),
        )

    def merge(self, other: RegressionSums) -> RegressionSums:
        return RegressionSums(
            rows=self.rows + other.rows,
            error=self.error + other.error,
            absolute=self.absolute + other.absolute,
            squared=self.squared + other.squared,
            label=self.label + other.label,
            label_squared=self.label_squared + other.label_squared,
        )

    def metrics(self) -> dict[str, float]:
        """MAE, RMSE and R² of the rows summed (NaN without rows; R² NaN without spread in the labels)."""
        n = self.rows
        if n == 0:
            return {"rows": 0.0, "mae": float("nan"), "rmse": float("nan"), "r2": float("nan")}
        total = self.label_squared - self.label**2 / n  # the labels' sum of squares about their mean
        r2 = (
            1.0 - self.squared / total
            if n > 1 and total > 1e-12 * max(self.label_squared, 1.0)
            else float("nan")
        )
        return {
            "rows": float(n),
            "mae": self.absolute / n,
            "rmse": float(np.sqrt(self.squared / n)),
            "r2": r2,
        }


class MulticlassCounts:
    """A multi-class window's outputs: each class's probability on its reference grid, the predicted classes,
    the confidence-based expected confusion (label-free) and, of labelled rows, the confusion matrix
    ``[label, predicted]``, the summed log loss and the soft error ``1 - p[label]`` streamed in order."""

    def __init__(self, classes: int) -> None:
        k = classes
        self.classes = k
        self.rows = 0
        self.probabilities: list[GridCounts | None] = [None] * k
        self.predicted = np.zeros(k, dtype=np.int64)
        self.expected_true_pos = np.zeros(k)
        self.expected_false_pos = np.zeros(k)
        self.expected_false_neg = np.zeros(k)
        self.expected_correct = 0.0  # the summed calibrated confidence
        self.confusion = np.zeros((k, k), dtype=np.int64)
        self.log_loss = 0.0

    @property
    def labelled(self) -> int:
        return int(self.confusion.sum())

    def add(self, profile: Profile, vectors: np.ndarray, labels: np.ndarray, errors: PageHinkley) -> None:
        """Count one chunk of answered rows (``[n, K]`` probabilities, labels as class indexes or NaN), in
        id order (the labelled rows' soft errors go to ``errors``)."""
        from monitors.performance import LOG_LOSS_EPS, calibrate, calibrate_multiclass

        p = np.asarray(vectors, dtype=np.float64).reshape(-1, self.classes)
        y = np.asarray(labels, dtype=np.float64).reshape(-1)
        keep = ~np.isnan(p).any(axis=1)
        p, y = p[keep], y[keep]
        n = p.shape[0]
        if n == 0:
            return
        self.rows += n
        for k, reference in enumerate(list(profile.class_probabilities.values())[: self.classes]):
            if reference is not None:
                counts = count_on_grid(p[:, k], reference.grid)
                prev = self.probabilities[k]
                self.probabilities[k] = counts if prev is None else prev.merge(counts)
        pred = np.argmax(p, axis=1)
        self.predicted += np.bincount(pred, minlength=self.classes)[: self.classes]
        calibration = profile.calibration
        c = calibrate_multiclass(p, calibration)
        chosen = np.zeros(p.shape, dtype=bool)
        chosen[np.arange(n), pred] = True
        self.expected_true_pos += np.where(chosen, c, 0.0).sum(axis=0)
        self.expected_false_pos += np.where(chosen, 1.0 - c, 0.0).sum(axis=0)
        self.expected_false_neg += np.where(chosen, 0.0, c).sum(axis=0)
        top = c[np.arange(n), pred]
        self.expected_correct += float(calibrate(top, (calibration or {}).get("confidence")).sum())
        known = ~np.isnan(y) & (y >= 0) & (y < self.classes)
        if known.any():
            truth = y[known].astype(np.int64)
            np.add.at(self.confusion, (truth, pred[known]), 1)
            chance = p[known][np.arange(truth.size), truth]
            self.log_loss += float(-np.log(np.clip(chance, LOG_LOSS_EPS, 1.0)).sum())
            errors.update(1.0 - chance)


@dataclass
class WindowSketch:
    """Mergeable summary of one window of traffic, counted on the reference profile's grids."""

    rows: int = 0
    numeric: dict[str, GridCounts] = field(default_factory=dict)
    categorical: dict[str, Counter[str | None]] = field(default_factory=dict)
    prediction: GridCounts | None = None
    labels: LabelCounts = field(default_factory=LabelCounts)
    pca_error: GridCounts | None = None
    errors: PageHinkley = field(default_factory=PageHinkley)
    threshold: float = 0.5
    regression: RegressionSums = field(default_factory=RegressionSums)  # a regression's labelled rows
    multiclass: MulticlassCounts | None = None  # a multi-class model's vectors (read apart: log_window)
    sources: Counter[str] = field(default_factory=Counter)  # rows of the log by source (log_window)

    def update(
        self,
        profile: Profile,
        columns: Mapping[str, Column],
        *,
        predictions: np.ndarray | None = None,
        labels: np.ndarray | None = None,
        pool: Executor | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> WindowSketch:
        """Add one chunk of rows (in time order); returns self. Text may come as codes (``CodedColumn``).

        With a ``pool``, its threads count the chunk's features, :data:`COUNT_TASKS` tasks of several features
        each, and its PCA error, while this thread runs ``meanwhile`` (the caller's own work on the chunk);
        without one, ``meanwhile`` runs first, then the counting. Either way the counts merge in the order of
        the profile's features.
        """
        n = len(next(iter(columns.values()))) if columns else (0 if predictions is None else len(predictions))
        self.rows += n
        pca = profile.multivariate
        pca = pca if pca is not None and all(f in columns for f in pca.features) else None
        errors = pool.submit(pca_error_counts, columns, pca) if pool is not None and pca is not None else None
        features = [(name, f) for name, f in profile.features.items() if name in columns]
        if pool is None:
            if meanwhile is not None:
                meanwhile()
            counted = [_count(f, columns[name]) for name, f in features]
        else:
            tasks = [pool.submit(_count_each, features[i::COUNT_TASKS], columns) for i in range(COUNT_TASKS)]
            if meanwhile is not None:
                meanwhile()
            found = {name: counts for task in tasks for name, counts in task.result()}
            counted = [found[name] for name, _ in features]
        for (name, _), counts in zip(features, counted, strict=True):
            if isinstance(counts, GridCounts):
                prev = self.numeric.get(name)
                self.numeric[name] = counts if prev is None else prev.merge(counts)
            else:
                self.categorical.setdefault(name, Counter()).update(counts)
        if pca is not None:
            err = errors.result() if errors is not None else pca_error_counts(columns, pca)
            self.pca_error = err if self.pca_error is None else self.pca_error.merge(err)
        if predictions is not None and profile.prediction is not None:
            p = np.asarray(predictions, dtype=np.float64).reshape(-1)
            counts = count_on_grid(p, profile.prediction.grid)
            self.prediction = counts if self.prediction is None else self.prediction.merge(counts)
            if labels is not None:
                self._update_labels(profile, p, np.asarray(labels, dtype=np.float64).reshape(-1))
        return self

    @property
    def labelled(self) -> int:
        """The window's labelled rows, whatever the task (a multi-class model's once its vectors are in)."""
        if self.multiclass is not None:
            return self.multiclass.labelled
        return self.labels.rows + self.regression.rows

    def add_labels(self, profile: Profile, predictions: np.ndarray, labels: np.ndarray) -> WindowSketch:
        """Count labelled rows (in time order) into the label counts and the error stream; returns self."""
        if profile.prediction is not None:
            p = np.asarray(predictions, dtype=np.float64).reshape(-1)
            self._update_labels(profile, p, np.asarray(labels, dtype=np.float64).reshape(-1))
        return self

    def _update_labels(self, profile: Profile, p: np.ndarray, labels: np.ndarray) -> None:
        ok = ~np.isnan(labels) & ~np.isnan(p)
        if profile.task is Task.MULTICLASS:
            return  # a multi-class model's labels are counted with its vectors (MulticlassCounts)
        if profile.task is Task.REGRESSION:
            values, truth = p[ok], labels[ok]
            self.regression = self.regression.merge(RegressionSums.of(values, truth))
            mae = float((profile.performance or {}).get("mae") or 0.0)
            scale = REGRESSION_ERROR_SCALE * mae if mae > 0 else 1.0
            self.errors.update(np.minimum(np.abs(values - truth) / scale, 1.0))
            return
        assert profile.prediction is not None
        grid = profile.prediction.grid
        p, y = p[ok], labels[ok].astype(bool)
        pred = p >= self.threshold
        chunk = LabelCounts(
            rows=int(y.size),
            true_pos=int(np.sum(pred & y)),
            false_pos=int(np.sum(pred & ~y)),
            false_neg=int(np.sum(~pred & y)),
            true_neg=int(np.sum(~pred & ~y)),
            positive_cells=count_on_grid(p[y], grid).cells,
            negative_cells=count_on_grid(p[~y], grid).cells,
        )
        self.labels = self.labels.merge(chunk)
        self.errors.update(np.abs(y.astype(np.float64) - p))

    def merge(self, other: WindowSketch) -> WindowSketch:
        """Combine two sketches of the same profile (keeps the error-stream detector of ``self``)."""
        out = WindowSketch(rows=self.rows + other.rows, threshold=self.threshold, errors=self.errors)
        for name in set(self.numeric) | set(other.numeric):
            a, b = self.numeric.get(name), other.numeric.get(name)
            out.numeric[name] = b if a is None else a if b is None else a.merge(b)  # type: ignore[assignment]
        for name in set(self.categorical) | set(other.categorical):
            out.categorical[name] = self.categorical.get(name, Counter()) + other.categorical.get(
                name, Counter()
            )
        for attr in ("prediction", "pca_error"):
            a, b = getattr(self, attr), getattr(other, attr)
            setattr(out, attr, b if a is None else a if b is None else a.merge(b))
        out.labels = self.labels.merge(other.labels)
        out.regression = self.regression.merge(other.regression)
        out.sources = self.sources + other.sources
        out.multiclass = self.multiclass if other.multiclass is None else other.multiclass
        return out


SKETCH_FORMAT = 2
"""The version of :func:`encode_counts`' layout (2: the rows by source). Part of the sketch cache's key, so a
block stored in another layout is never read back, only pruned."""


def encode_counts(sketch: WindowSketch) -> bytes:
    """The parts of ``sketch`` fixed once its rows are in (rows; numeric, categorical, prediction and
    PCA-error counts; rows by source; not the labels nor the error stream) as bytes: a JSON header (orjson)
    naming each array's dtype and shape, then the arrays' bytes in that order. No pickle. Raises TypeError
    for a category that is neither text nor None."""
    grids: list[tuple[str, GridCounts]] = [(f"numeric:{name}", g) for name, g in sketch.numeric.items()]
    grids += [(attr, g) for attr in ("prediction", "pca_error") if (g := getattr(sketch, attr)) is not None]
    arrays: list[np.ndarray] = []
    described: list[list[Any]] = []
    for key, g in grids:
        parts = [np.ascontiguousarray(g.cells), np.ascontiguousarray(g.sums)]
        described.append([key, g.missing, g.outside, *[[a.dtype.str, list(a.shape)] for a in parts]])
        arrays += parts
    categorical: dict[str, list[list[Any]]] = {}
    for name, counter in sketch.categorical.items():
        for category in counter:
            if category is not None and not isinstance(category, str):
                raise TypeError(f"category {category!r} of {name} is not text")
        categorical[name] = [[c, int(n)] for c, n in counter.items()]
    sources = sorted(sketch.sources.items())
    head = orjson.dumps(
        {
            "v": SKETCH_FORMAT,
            "rows": sketch.rows,
            "grids": described,
            "categorical": categorical,
            "sources": sources,
        }
    )
    return len(head).to_bytes(4, "little") + head + b"".join(a.tobytes() for a in arrays)


def decode_counts(data: bytes, *, threshold: float = 0.5) -> WindowSketch:
    """The sketch :func:`encode_counts` wrote (empty labels and error stream)."""
    size = int.from_bytes(data[:4], "little")
    head = orjson.loads(data[4 : 4 + size])
    if head.get("v") != SKETCH_FORMAT:
        raise ValueError(f"unknown sketch format {head.get('v')!r}")
    at = 4 + size
    sketch = WindowSketch(rows=int(head["rows"]), threshold=threshold)

    def take(dtype: str, shape: list[int]) -> np.ndarray:
        nonlocal at
        kind = np.dtype(dtype)
        count = int(np.prod(shape)) if shape else 1
        out = np.frombuffer(data, dtype=kind, count=count, offset=at).reshape(shape).copy()
        at += count * kind.itemsize
        return out

    for key, missing, outside, cells, sums in head["grids"]:
        g = GridCounts(cells=take(*cells), sums=take(*sums), missing=int(missing), outside=int(outside))
        if key.startswith("numeric:"):
            sketch.numeric[key.removeprefix("numeric:")] = g
        else:
            setattr(sketch, key, g)
    if at != len(data):
        raise ValueError(f"{len(data) - at} bytes left over after the sketch's arrays")
    for name, pairs in head["categorical"].items():
        sketch.categorical[name] = Counter({key: int(n) for key, n in pairs})
    sketch.sources = Counter({str(key): int(n) for key, n in head["sources"]})
    return sketch


def fingerprint(*parts: Any) -> str:
    """A stable hex digest of values made of dataclasses, mappings, sequences, numpy arrays and scalars
    (e.g. a reference profile and a threshold): equal values, equal digests."""
    digest = hashlib.blake2b(digest_size=16)

    def feed(value: Any) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            digest.update(b"D" + type(value).__name__.encode())
            for f in dataclasses.fields(value):
                digest.update(b"F" + f.name.encode())
                feed(getattr(value, f.name))
        elif isinstance(value, Mapping):
            digest.update(b"M%d" % len(value))
            for key in sorted(value, key=repr):
                feed(key)
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(b"L%d" % len(value))
            for item in value:
                feed(item)
        elif isinstance(value, np.ndarray):
            arr = np.ascontiguousarray(value)
            digest.update(b"A" + arr.dtype.str.encode() + repr(arr.shape).encode())
            digest.update(arr.tobytes() if arr.dtype != object else repr(arr.tolist()).encode())
        else:
            digest.update(b"S" + type(value).__name__.encode() + repr(value).encode())

    for part in parts:
        feed(part)
    return digest.hexdigest()


def _count_each(
    features: list[tuple[str, NumericProfile | CategoricalProfile]], columns: Mapping[str, Column]
) -> list[tuple[str, GridCounts | Counter[Any]]]:
    """One pool task of :meth:`WindowSketch.update`: its features counted, by name."""
    return [(name, _count(feature, columns[name])) for name, feature in features]


def _count(feature: NumericProfile | CategoricalProfile, values: Column) -> GridCounts | Counter[Any]:
    """One chunk of one feature counted as the sketch keeps it: on the reference grid, or per value."""
    values = values if isinstance(values, CodedColumn) else np.asarray(values)
    if isinstance(feature, NumericProfile):
        return count_on_grid(values, feature.grid, limits=(feature.allowed_min, feature.allowed_max))
    return value_counts(values)


def split_missing(counter: Counter[str | None]) -> tuple[dict[str, int], int]:
    """Category counts without missing keys (None, "" or NaN), and the number of missing values."""
    cats: dict[str, int] = {}
    missing = 0
    for key, n in counter.items():
        if key is None or key == "" or (isinstance(key, float) and key != key):
            missing += n
        else:
            cats[str(key)] = cats.get(str(key), 0) + n
    return cats, missing
