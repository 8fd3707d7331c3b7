"""A model version's input/output contract, and its inference from training data.

In the spirit of TFDV's schema inference: each feature gets a kind, a dtype, the observed
range or category set, and nullability. Two ranges are kept for numeric features: the
*observed* one (values outside it are flagged, they are what drift looks like) and a wider
*allowed* one (values outside it violate the contract), from a tail estimate of the training
values at a stated chance per value of refusing a legitimate one (:mod:`registry.tails`).
"""

from __future__ import annotations

import enum
import math
import os
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from core.tabular import CodedColumn, text_codes
from registry.tails import (
    DEFAULT_CHANCE,
    AllowedRange,
    SortedEnds,
    allowed_range,
    finite_sorted,
    sorted_range,
)

MAX_CATEGORIES = 64  # a string column with more distinct values is not treated as categorical
MAX_CATEGORY_CHARS = 256  # default longest categorical value a contract accepts (or the longest trained on)


class FeatureKind(enum.StrEnum):
    NUMERIC = "numeric"
    CATEGORICAL = "categorical"


class Task(enum.StrEnum):
    """What the model predicts; names the output, the labels it takes and the metrics it is judged by."""

    BINARY = "binary_classification"  # one probability of the positive class (label 0 or 1)
    MULTICLASS = "multiclass_classification"  # a probability per class, summing to 1 (label: a class)
    REGRESSION = "regression"  # one value (label: a number)

    @classmethod
    def parse(cls, text: str) -> Task:
        """``binary``, ``multiclass`` or ``regression`` (or the full names); ValueError otherwise."""
        short = {"binary": cls.BINARY, "multiclass": cls.MULTICLASS, "regression": cls.REGRESSION}
        found = short.get(text) or next((t for t in cls if t.value == text), None)
        if found is None:
            raise ValueError(f"task {text!r} is not one of binary, multiclass, regression")
        return found

    @property
    def short(self) -> str:
        return {"binary_classification": "binary", "multiclass_classification": "multiclass"}.get(
            self.value, self.value
        )


OUTPUT_NAMES = {Task.BINARY: "probability", Task.MULTICLASS: "probabilities", Task.REGRESSION: "value"}
"""The one output of a version's serving signature, by task."""

SUM_TOLERANCE = 1e-3  # a multi-class probability vector sums to 1 within this
REGRESSION_RANGE_WIDENING = 0.5
"""A regression value outside the reference predictions' range widened by this share of its span on each side
is flagged (``output_range``), not refused."""


class Policy(enum.StrEnum):
    """What serving does with a soft violation (unseen category, value outside observed range)."""

    REJECT = "reject"
    FLAG = "flag"  # accept, log and count the flag


@dataclass(frozen=True)
class FeatureSpec:
    """One input feature of the contract."""

    name: str
    kind: FeatureKind
    dtype: str  # dtype of the source column: "int64", "float64" or "string"
    nullable: bool
    missing_rate: float = 0.0
    observed_min: float | None = None
    observed_max: float | None = None
    allowed_min: float | None = None
    allowed_max: float | None = None
    allowed_chance: float | None = None
    """The chance per value, by the tail estimate, that a legitimate value falls outside the allowed range
    (:mod:`registry.tails`; None: a contract written before the estimate, its range the span rule)."""
    categories: tuple[str, ...] = ()
    policy: Policy = Policy.FLAG
    max_length: int = MAX_CATEGORY_CHARS  # characters of a categorical value (a longer one is refused)
    levels: int = 0
    """A high-cardinality categorical (hashed into an embedding): its distinct training values, of which
    ``categories`` keeps the most frequent ``MAX_CATEGORIES``; any other value is valid, never unseen. 0: the
    categories are every training value."""

    @property
    def model_dtype(self) -> str:
        """dtype of the SavedModel input: float32 for numeric, string for categorical."""
        return "float32" if self.kind is FeatureKind.NUMERIC else "string"

    @cached_property
    def category_set(self) -> frozenset[str]:
        """The training categories as a set (computed once per spec: serving checks every request)."""
        return frozenset(self.categories)


@dataclass(frozen=True)
class OutputSpec:
    """One output of the model, with the range every answer must lie in."""

    name: str
    dtype: str = "float32"
    min: float | None = 0.0  # hard bounds: an answer outside them breaks the contract (refused)
    max: float | None = 1.0
    width: int = 1  # values per row (a multi-class model: one per class)
    expected_min: float | None = None  # soft bounds (regression): outside them the answer is flagged
    expected_max: float | None = None

    @classmethod
    def for_task(
        cls, task: Task, *, classes: int = 0, expected: tuple[float, float] | None = None
    ) -> OutputSpec:
        """The output of ``task``: a probability, ``classes`` probabilities, or a value expected within the
        reference range ``expected`` widened by :data:`REGRESSION_RANGE_WIDENING`."""
        name = OUTPUT_NAMES[task]
        if task is Task.MULTICLASS:
            return cls(name=name, width=classes)
        if task is Task.REGRESSION:
            lo = hi = None
            if expected is not None:
                span = max(expected[1] - expected[0], abs(expected[1]), 1e-9) * REGRESSION_RANGE_WIDENING
                lo, hi = expected[0] - span, expected[1] + span
            return cls(name=name, min=None, max=None, expected_min=lo, expected_max=hi)
        return cls(name=name)


@dataclass(frozen=True)
class ModelSchema:
    """The contract stored with every version (``schema.json``)."""

    features: tuple[FeatureSpec, ...]
    outputs: tuple[OutputSpec, ...]
    target: str
    task: str = Task.BINARY.value
    max_rows_per_request: int = 1024
    extra: dict[str, Any] = field(default_factory=dict)
    classes: tuple[str, ...] = ()  # multi-class: the class names, in the order of the output vector

    @property
    def kind(self) -> Task:
        """The task as an enum."""
        return Task(self.task)

    @property
    def output(self) -> OutputSpec:
        """The model's one output."""
        return self.outputs[0]

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    @cached_property
    def feature_set(self) -> frozenset[str]:
        """The input names as a set (computed once per schema: serving checks every request)."""
        return frozenset(f.name for f in self.features)

    def feature(self, name: str) -> FeatureSpec:
        """The spec of feature ``name`` (KeyError if unknown)."""
        for spec in self.features:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for f in out["features"]:
            f["categories"] = list(f["categories"])
            if not f["levels"]:  # a contract without a high-cardinality feature reads as it always did
                del f["levels"]
        out["classes"] = list(out["classes"])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSchema:
        features = tuple(
            FeatureSpec(
                **{
                    **f,
                    "kind": FeatureKind(f["kind"]),
                    "policy": Policy(f.get("policy", Policy.FLAG)),
                    "categories": tuple(f.get("categories", ())),
                }
            )
            for f in data["features"]
        )
        outputs = tuple(OutputSpec(**o) for o in data["outputs"])
        rest = {k: v for k, v in data.items() if k not in {"features", "outputs", "classes"}}
        return cls(features=features, outputs=outputs, classes=tuple(data.get("classes", ())), **rest)


def is_missing(values: np.ndarray) -> np.ndarray:
    """Boolean mask of missing entries: NaN for numbers, None or "" for strings."""
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "iub":
        return np.zeros(values.shape, dtype=bool)
    coded = text_codes(values) if values.dtype == object else None
    if coded is not None:  # text: one hashing pass, then the missing words looked up by code
        return _missing_words(coded)[coded.codes]
    return np.array([v is None or v == "" or (isinstance(v, float) and math.isnan(v)) for v in values])


def _missing_words(coded: CodedColumn) -> np.ndarray:
    """Per code of ``coded`` (and, last, for code -1, a null) whether it is missing: a null or ``""``."""
    return np.array([w == "" for w in coded.categories.tolist()] + [True], dtype=bool)


def _infer_text(name: str, coded: CodedColumn, *, wide: bool, wide_above: int | None) -> FeatureSpec:
    """:func:`infer_feature` of a text column held as codes: counted by code, each distinct word once."""
    n = len(coded)
    per_code = np.bincount(coded.codes.astype(np.int64) + 1, minlength=len(coded.categories) + 1)
    missing_words = _missing_words(coded)
    missing = int(per_code[0]) + int(per_code[1:][missing_words[:-1]].sum())
    counts: dict[str, int] = {}
    for word, k in zip(coded.categories.tolist(), per_code[1:].tolist(), strict=True):
        if k and word != "":
            counts[word] = counts.get(word, 0) + k
    return _categorical_spec(
        name,
        counts,
        nullable=missing > 0,
        missing_rate=missing / n if n else 0.0,
        wide=wide,
        wide_above=wide_above,
    )


def _categorical_spec(
    name: str,
    counts: Mapping[str, int],
    *,
    nullable: bool,
    missing_rate: float,
    wide: bool,
    wide_above: int | None,
) -> FeatureSpec:
    """A categorical feature's spec from its present values' counts (by text)."""
    cats = sorted(counts)
    levels = 0
    if len(cats) > MAX_CATEGORIES:
        if not wide and (wide_above is None or len(cats) <= wide_above):
            raise ValueError(
                f"column {name!r} has {len(cats)} distinct strings (> {MAX_CATEGORIES}); embed it with "
                f"`--embed {name}` (hashed into a trainable embedding) or drop the column"
            )
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CATEGORIES]
        levels, cats = len(cats), sorted(word for word, _ in top)
    return FeatureSpec(
        name=name,
        kind=FeatureKind.CATEGORICAL,
        dtype="string",
        nullable=nullable,
        missing_rate=missing_rate,
        categories=tuple(cats),
        max_length=max([MAX_CATEGORY_CHARS, *map(len, cats)]),
        levels=levels,
    )


def infer_feature(
    name: str,
    values: np.ndarray | CodedColumn,
    *,
    range_chance: float = DEFAULT_CHANCE,
    wide: bool = False,
    wide_above: int | None = None,
    ordered: np.ndarray | OrderedColumn | None = None,
) -> FeatureSpec:
    """Infer one feature's spec from its training column; a numeric one's allowed range refuses a legitimate
    value with ``range_chance`` (:func:`registry.tails.allowed_range`). A string column with more than
    ``MAX_CATEGORIES`` values is refused unless ``wide`` (named to be embedded) or it has more than
    ``wide_above``: then it keeps its level count and its most frequent ``MAX_CATEGORIES`` values. Text
    may come as codes (:class:`core.tabular.CodedColumn`); text held as objects is coded first. ``ordered``:
    a numeric column's values as float64 sorted ascending (NaN last), or what is read of them
    (:class:`OrderedColumn`), which a caller that orders them anyway hands over: the same spec, read off
    their ends without a pass over the values."""
    if isinstance(values, CodedColumn):
        return _infer_text(name, values, wide=wide, wide_above=wide_above)
    coded = text_codes(values) if values.dtype == object else None
    if coded is not None:
        return _infer_text(name, coded, wide=wide, wide_above=wide_above)
    if ordered is not None and values.dtype.kind in "iufb":
        spec = _infer_ordered(name, values, ordered, range_chance=range_chance)
        if spec is not None:
            return spec
    missing = is_missing(values)
    n = len(values)
    missing_rate = float(missing.mean()) if n else 0.0
    present = values[~missing] if missing.any() else values
    if values.dtype.kind in "iufb":
        lo = float(np.min(present)) if present.size else 0.0
        hi = float(np.max(present)) if present.size else 0.0
        allowed = allowed_range(present, chance=range_chance)
        return _numeric_spec(name, values, missing=int(missing.sum()), lo=lo, hi=hi, allowed=allowed)
    return _categorical_spec(
        name,
        Counter(str(v) for v in present.tolist()),
        nullable=bool(missing.any()),
        missing_rate=missing_rate,
        wide=wide,
        wide_above=wide_above,
    )


@dataclass(frozen=True)
class OrderedColumn:
    """What :func:`infer_feature` reads of a numeric column in order: how many of its values are present
    (not NaN), the smallest and largest of them (infinities included), and the sorted ends of its finite
    ones (:class:`registry.tails.SortedEnds`)."""

    present: int
    lo: float
    hi: float
    finite: SortedEnds

    @classmethod
    def of(cls, ordered: np.ndarray) -> OrderedColumn:
        """What is read of a column's values sorted ascending as float64 (NaN last)."""
        present = ordered[: int(np.searchsorted(ordered, np.nan, side="left"))] if ordered.size else ordered
        lo, hi = (float(present[0]), float(present[-1])) if present.size else (0.0, 0.0)
        return cls(present=int(present.size), lo=lo, hi=hi, finite=SortedEnds.of(finite_sorted(present)))


def _infer_ordered(
    name: str, values: np.ndarray, ordered: np.ndarray | OrderedColumn, *, range_chance: float
) -> FeatureSpec | None:
    """:func:`infer_feature` of a numeric column from its values in order; None when an extreme is a zero
    of both signs, whose sign as ``np.min`` gives it only the values' own order decides."""
    known = OrderedColumn.of(ordered) if isinstance(ordered, np.ndarray) else ordered
    if _signed_zero_end(values, known):
        return None
    allowed = sorted_range(known.finite, chance=range_chance)
    missing = len(values) - known.present
    return _numeric_spec(name, values, missing=missing, lo=known.lo, hi=known.hi, allowed=allowed)


def _numeric_spec(
    name: str, values: np.ndarray, *, missing: int, lo: float, hi: float, allowed: AllowedRange
) -> FeatureSpec:
    """A numeric feature's spec: its dtype, its ``missing`` count's rate, its observed and allowed ranges."""
    n = len(values)
    return FeatureSpec(
        name=name,
        kind=FeatureKind.NUMERIC,
        dtype="int64" if values.dtype.kind in "iub" else "float64",
        nullable=missing > 0,
        missing_rate=missing / n if n else 0.0,
        observed_min=lo,
        observed_max=hi,
        allowed_min=allowed.low,
        allowed_max=allowed.high,
        allowed_chance=allowed.chance,
    )


def _signed_zero_end(values: np.ndarray, known: OrderedColumn) -> bool:
    """Whether an end of the ordered values (or of their finite ones) is zero and the column's zeros have
    both signs: -0.0 and 0.0 are equals, so which of them ``np.min`` gives is the values' order's (and a sort
    may give either back); zeros of one sign keep it."""
    ends = (known.lo, known.hi) if known.present else ()
    finite = (*known.finite.low[:1], *known.finite.high[-1:])
    if values.dtype.kind != "f" or not any(v == 0 for v in (*ends, *finite)):
        return False
    signs = np.signbit(values[values == 0])
    return bool(signs.any() and not signs.all())


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


INFER_WORKERS = min(4, _cores())
"""Threads that infer features at once (numpy's partitions and reductions release the GIL)."""


def infer_features(
    columns: Mapping[str, np.ndarray | CodedColumn],
    *,
    range_chance: float = DEFAULT_CHANCE,
    wide: frozenset[str] = frozenset(),
    wide_above: int | None = None,
) -> tuple[FeatureSpec, ...]:
    """:func:`infer_feature` of every column, in order, on up to :data:`INFER_WORKERS` threads (each column
    on its own: the same specs as one after the other)."""

    def infer(item: tuple[str, np.ndarray | CodedColumn]) -> FeatureSpec:
        name, values = item
        return infer_feature(
            name, values, range_chance=range_chance, wide=name in wide, wide_above=wide_above
        )

    if len(columns) < 2 or INFER_WORKERS < 2:
        return tuple(map(infer, columns.items()))
    with ThreadPoolExecutor(max_workers=INFER_WORKERS, thread_name_prefix="infer") as pool:
        return tuple(pool.map(infer, columns.items()))


def infer_schema(
    columns: Mapping[str, np.ndarray],
    *,
    target: str,
    task: Task = Task.BINARY,
    classes: tuple[str, ...] = (),
    range_chance: float = DEFAULT_CHANCE,
    wide: frozenset[str] = frozenset(),
    wide_above: int | None = None,
) -> ModelSchema:
    """Infer the contract from training columns; the ``target`` column must hold the ``task``'s labels.

    Multi-class: the classes are ``classes`` (in the model's output order) or the target's sorted distinct
    values. Regression: the target's range is the expected range of the model's values. Each numeric
    feature's allowed range refuses a legitimate value with ``range_chance`` (:mod:`registry.tails`).
    """
    if target not in columns:
        raise ValueError(f"target column {target!r} not in data (columns: {sorted(columns)})")
    y = columns[target]
    present = y[~is_missing(y)]
    expected = None
    if task is Task.BINARY:
        labels = set(np.unique(present).tolist())
        if not labels <= {0, 1}:
            raise ValueError(f"target column {target!r} must hold 0/1 labels, found {sorted(labels)[:5]}")
    elif task is Task.MULTICLASS:
        classes = check_classes(present, target=target, classes=classes)
    else:
        if present.dtype.kind not in "iuf":
            raise ValueError(f"target column {target!r} of a regression must hold numbers, found text")
        values = present.astype(np.float64)
        if not np.isfinite(values).all():
            raise ValueError(f"target column {target!r} of a regression holds an infinite value")
        if values.size:
            expected = (float(values.min()), float(values.max()))
    features = infer_features(
        {name: col for name, col in columns.items() if name != target},
        range_chance=range_chance,
        wide=wide,
        wide_above=wide_above,
    )
    if not features:
        raise ValueError("no feature columns besides the target")
    output = OutputSpec.for_task(task, classes=len(classes), expected=expected)
    return ModelSchema(
        features=features, outputs=(output,), target=target, task=task.value, classes=tuple(classes)
    )


def class_names(values: np.ndarray) -> tuple[str, ...]:
    """The distinct labels of a multi-class target, sorted (numerically when they are numbers), as text."""
    distinct = np.unique(values)
    if distinct.dtype.kind in "iuf":
        return tuple(_number_text(v) for v in sorted(distinct.tolist()))
    return tuple(sorted(str(v) for v in distinct))


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def check_classes(values: np.ndarray, *, target: str, classes: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The classes of a multi-class target: ``classes`` when given (every label must be one), else its
    sorted distinct values; ValueError when fewer than 3 (a 2-class model is a binary one)."""
    found = class_names(values)
    if classes:
        unknown = sorted(set(found) - set(classes))
        if unknown:
            raise ValueError(
                f"target column {target!r} holds {unknown[:5]}, not among the classes {list(classes)}"
            )
        names = tuple(classes)
    else:
        names = found
    if len(names) < 3:
        raise ValueError(
            f"a multi-class target needs at least 3 classes, {target!r} has {list(names)} "
            "(two classes: use --task binary with 0/1 labels)"
        )
    if len(names) > MAX_CATEGORIES:
        raise ValueError(f"target column {target!r} has {len(names)} classes (> {MAX_CATEGORIES})")
    return names


def label_codes(values: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
    """A multi-class target's labels as class indexes (float64, NaN when missing or not a class)."""
    index = {name: float(i) for i, name in enumerate(classes)}
    missing = is_missing(values)
    numeric = values.dtype.kind in "iuf"
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if not missing[i]:
            out[i] = index.get(_number_text(v) if numeric else str(v), np.nan)
    return out
