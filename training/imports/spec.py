"""What an import is asked to register (``ImportSpec``), how the source signature takes the features
(``Layout``) and what it registered (``Imported``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.models import ModelVersion
from registry.schema import ModelSchema, Task

log = logging.getLogger("driftwarden.training.importer")


SIGNATURE = "serving_default"
NUMERIC_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8"}
STRING_DTYPES = {"string"}


@dataclass(frozen=True)
class ImportSpec:
    """What ``driftwarden models import`` was asked to register."""

    model_name: str
    path: Path | None  # None: a model served elsewhere, its answers in ``prediction_column``
    reference: Path
    target: str | None = None
    task: Task | None = None
    signature: str = SIGNATURE
    features: tuple[str, ...] = ()  # the columns of a dense [batch, D] input, in order
    classes: tuple[str, ...] = ()  # multi-class names in output order
    model_fn: str | None = None  # FILE.py:FUNC or package.module:FUNC that builds its network (to retrain it)
    prediction_column: str | None = None  # served elsewhere: the reference column of the model's answers
    positive_class: int | None = None  # binary: the label (0 or 1) the model's probability is of (default 1)
    accept_below_chance: bool = False  # register even when the reference metric is not clearly above chance


@dataclass(frozen=True)
class SourceInput:
    """One input of the source signature."""

    name: str
    dtype: str  # TensorFlow dtype name
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class Layout:
    """How the source signature takes the contract's features."""

    inputs: tuple[SourceInput, ...]
    features: tuple[str, ...]  # the contract's features, in order
    dense: bool  # one [batch, D] input holding ``features`` in order


@dataclass(frozen=True)
class Imported:
    """The registered version and what was measured on the reference."""

    version: ModelVersion
    schema: ModelSchema
    metrics: dict[str, Any]
    rows: int
