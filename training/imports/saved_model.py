"""``driftwarden models import NAME PATH``: a SavedModel checked, wrapped and registered."""

from __future__ import annotations

from pathlib import Path

from core.database import Database
from registry.schema import ModelSchema
from training.imports.publish import publish_wrapped
from training.imports.reference import check_reference_rows, read_reference
from training.imports.source import (
    feature_spec,
    load_saved_model,
    named_signature,
    reference_column,
    source_layout,
    source_signature,
    task_output,
)
from training.imports.spec import Imported, ImportSpec
from training.imports.task import check_order, infer_task, output_spec, positive_label, target_labels
from training.imports.wrapper import make_wrapper, source_answers


def import_saved_model(*, spec: ImportSpec, db: Database, registry: Path) -> Imported:
    """Check, wrap and register ``spec.path`` as the next staged version of ``spec.model_name``."""
    import tensorflow as tf

    assert spec.path is not None, "a SavedModel import names its folder"
    reference = read_reference(spec.reference)  # a reference too wide is refused before TensorFlow loads
    source = load_saved_model(spec.path)
    fn = named_signature(source, spec)
    layout = source_layout(fn, spec, reference)
    output_name, output = task_output(fn, spec)
    columns = {name: reference_column(reference[name], name, layout) for name in layout.features}
    check_reference_rows(columns, spec.reference)
    features = tuple(feature_spec(name, columns[name], layout) for name in layout.features)
    width = output.shape[-1] if len(output.shape) == 2 else 1
    recorded = source_signature(fn, spec, layout)
    module = make_wrapper(
        tf,
        source,
        fn_name=spec.signature,
        layout=layout,
        output=output_name,
        width=width,
        served=tuple(t.name for t in recorded.outputs),
    )
    raw = source_answers(tf, module, columns, features)
    task, answers = infer_task(spec, raw, reference)
    labels, classes = target_labels(spec, task, reference, width=raw.shape[1] if raw.ndim == 2 else 1)
    check_order(spec, task, answers=answers, labels=labels, classes=classes)
    module.finish(task, positive=positive_label(spec, task))
    schema = ModelSchema(
        features=features,
        outputs=(output_spec(task, answers, classes),),
        target=spec.target or "",
        task=task.value,
        classes=classes,
    )
    return publish_wrapped(
        spec=spec,
        db=db,
        registry=registry,
        module=module,
        schema=schema,
        columns=columns,
        answers=answers,
        labels=labels,
        layout=layout,
        signature=recorded,
    )
