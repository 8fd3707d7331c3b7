"""``driftwarden models import NAME --reference FILE --prediction-column COL``: a model served elsewhere
registered from its reference rows and its answers on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.config import get_settings
from core.database import Database
from core.errors import Invalid
from registry.schema import ModelSchema, infer_feature
from training.imports.publish import register_version
from training.imports.reference import check_reference_rows, read_prediction_column, read_reference
from training.imports.spec import Imported, ImportSpec
from training.imports.task import check_order, infer_task, output_spec, target_labels


def import_reference(*, spec: ImportSpec, db: Database, registry: Path) -> Imported:
    """Register ``spec.model_name`` served elsewhere: the contract and profile from the reference rows, the
    reference predictions from ``spec.prediction_column`` (numbers, or lists of class probabilities)."""
    column = spec.prediction_column
    assert column is not None, "a reference import names its prediction column"
    reference = read_reference(spec.reference)
    raw = read_prediction_column(reference, column, spec.reference)
    names = spec.features or tuple(c for c in reference if c not in {column, spec.target})
    missing = [name for name in names if name not in reference]
    if missing:
        raise Invalid(f"--features names {', '.join(map(repr, missing))}: not a column of {spec.reference}")
    if not names:
        raise Invalid(f"the reference {spec.reference} has no feature column beside {column!r}")
    columns = {name: np.asarray(reference[name]) for name in names}
    check_reference_rows(columns, spec.reference)
    try:
        chance = get_settings().range_chance
        features = tuple(infer_feature(name, columns[name], range_chance=chance) for name in names)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    if spec.positive_class == 0:
        raise Invalid(
            "--positive-class 0 turns a SavedModel's output into the probability of label 1; a model "
            f"served elsewhere sends its own answers, logged as they come: recode the target so that 1 is "
            f"the label the probabilities in {column!r} are of"
        )
    task, answers = infer_task(spec, raw, reference)
    labels, classes = target_labels(spec, task, reference, width=raw.shape[1] if raw.ndim == 2 else 1)
    check_order(spec, task, answers=answers, labels=labels, classes=classes)
    schema = ModelSchema(
        features=features,
        outputs=(output_spec(task, answers, classes),),
        target=spec.target or "",
        task=task.value,
        classes=classes,
    )
    lineage: dict[str, Any] = {
        "source": "reference",
        "prediction_column": column,
        "reference": str(spec.reference.resolve()),
        "reference_rows": int(len(answers)),
        "task": task.short,
        "model_fn": None,
    }
    return register_version(
        spec=spec,
        db=db,
        registry=registry,
        write_model=None,
        schema=schema,
        columns=columns,
        answers=answers,
        labels=labels,
        lineage=lineage,
    )
