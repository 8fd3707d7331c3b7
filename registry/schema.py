"""A model version's input/output contract, and its inference from training data.

In the spirit of TFDV's schema inference: each feature gets a kind, a dtype, the observed
range or category set, and nullability. Two ranges are kept for numeric features: the
*observed* one (values outside it are flagged, they are what drift looks like) and a wider
*allowed* one (values outside it are impossible for this feature and violate the contract).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

MAX_CATEGORIES = 64  # a string column with more distinct values is not treated as categorical
MAX_CATEGORY_CHARS = 256  # default longest categorical value a contract accepts (or the longest trained on)


class FeatureKind(enum.StrEnum):
    NUMERIC = "numeric"
    CATEGORICAL = "categorical"


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
    categories: tuple[str, ...] = ()
    policy: Policy = Policy.FLAG
    max_length: int = MAX_CATEGORY_CHARS  # characters of a categorical value (a longer one is refused)

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
    min: float | None = 0.0
    max: float | None = 1.0


@dataclass(frozen=True)
class ModelSchema:
    """The contract stored with every version (``schema.json``)."""

    features: tuple[FeatureSpec, ...]
    outputs: tuple[OutputSpec, ...]
    target: str
    task: str = "binary_classification"
    max_rows_per_request: int = 1024
    extra: dict[str, Any] = field(default_factory=dict)

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
        rest = {k: v for k, v in data.items() if k not in {"features", "outputs"}}
        return cls(features=features, outputs=outputs, **rest)


def is_missing(values: np.ndarray) -> np.ndarray:
    """Boolean mask of missing entries: NaN for numbers, None or "" for strings."""
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "iub":
        return np.zeros(values.shape, dtype=bool)
    return np.array([v is None or v == "" or (isinstance(v, float) and math.isnan(v)) for v in values])


def infer_feature(name: str, values: np.ndarray) -> FeatureSpec:
    """Infer one feature's spec from its training column."""
    missing = is_missing(values)
    n = len(values)
    missing_rate = float(missing.mean()) if n else 0.0
    present = values[~missing]
    if values.dtype.kind in "iufb":
        dtype = "int64" if values.dtype.kind in "iub" else "float64"
        lo = float(np.min(present)) if present.size else 0.0
        hi = float(np.max(present)) if present.size else 0.0
        span = max(hi - lo, abs(hi), 1.0)
        allowed_lo = lo - span
        if lo >= 0:
            allowed_lo = 0.0
        return FeatureSpec(
            name=name,
            kind=FeatureKind.NUMERIC,
            dtype=dtype,
            nullable=bool(missing.any()),
            missing_rate=missing_rate,
            observed_min=lo,
            observed_max=hi,
            allowed_min=allowed_lo,
            allowed_max=hi + span,
        )
    cats = sorted({str(v) for v in present})
    if len(cats) > MAX_CATEGORIES:
        raise ValueError(
            f"column {name!r} has {len(cats)} distinct strings (> {MAX_CATEGORIES}); "
            "free text and identifiers are not supported as features: drop the column"
        )
    return FeatureSpec(
        name=name,
        kind=FeatureKind.CATEGORICAL,
        dtype="string",
        nullable=bool(missing.any()),
        missing_rate=missing_rate,
        categories=tuple(cats),
        max_length=max([MAX_CATEGORY_CHARS, *map(len, cats)]),
    )


def infer_schema(columns: Mapping[str, np.ndarray], *, target: str) -> ModelSchema:
    """Infer the contract from training columns; ``target`` must be a 0/1 column."""
    if target not in columns:
        raise ValueError(f"target column {target!r} not in data (columns: {sorted(columns)})")
    y = columns[target]
    labels = set(np.unique(y[~is_missing(y)]).tolist())
    if not labels <= {0, 1}:
        raise ValueError(f"target column {target!r} must hold 0/1 labels, found {sorted(labels)[:5]}")
    features = tuple(infer_feature(name, col) for name, col in columns.items() if name != target)
    if not features:
        raise ValueError("no feature columns besides the target")
    return ModelSchema(features=features, outputs=(OutputSpec(name="probability"),), target=target)
