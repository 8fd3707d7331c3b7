"""``driftwarden models import``: a SavedModel from any TensorFlow or Keras code becomes a staged version.

The registry's own commands (``models list|show|promote|...``, :mod:`registry.cli`) live below training; this
module adds ``import`` to that group (it profiles the reference and calls TensorFlow, both above the
registry) and registers the group on the root.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from core.bounds import MAX_REFERENCE_COLUMNS
from core.errors import Invalid
from registry.cli import models_app
from registry.cli import register as register_models

if TYPE_CHECKING:
    from training.imports import ImportSpec


@models_app.command("import")
def models_import(
    name: Annotated[str, typer.Argument(help="Model name in the registry.")],
    reference: Annotated[
        Path,
        typer.Option(
            "--reference",
            "-r",
            help="CSV or Parquet rows the model was trained or validated on: the contract's ranges and "
            "categories and the drift baseline come from them and the model's answers on them. At most "
            f"{MAX_REFERENCE_COLUMNS:,} columns; each feature needs DRIFTWARDEN_DRIFT_MIN_ROWS (30) values "
            "that are not missing.",
        ),
    ],
    path: Annotated[
        Path | None,
        typer.Argument(
            help="The SavedModel folder (with saved_model.pb). Leave it out for a model served elsewhere "
            "(with --prediction-column)."
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option("--target", help="The reference's label column: its metrics are measured on it."),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            help="binary, multiclass or regression (default: inferred from the outputs and the target).",
        ),
    ] = None,
    signature: Annotated[
        str,
        typer.Option("--signature", help="The signature to serve (its clients keep its names and shapes)."),
    ] = "serving_default",
    features: Annotated[
        str | None,
        typer.Option(
            "--features",
            help="For one dense [batch, D] input: the reference columns it holds, in order (a,b,...).",
        ),
    ] = None,
    classes: Annotated[
        str | None,
        typer.Option(
            "--classes",
            help="Multi-class: the class names in the order of the output vector (default: the target's "
            "sorted values, else 0..K-1). With --target the order is checked: one that fits the labels "
            "clearly better is named and the import refused.",
        ),
    ] = None,
    positive_class: Annotated[
        int | None,
        typer.Option(
            "--positive-class",
            help="Binary SavedModel: the label (0 or 1) its probability is of; 0 serves 1 - p as the "
            "probability of label 1 (default 1: of an output of two columns, the second).",
        ),
    ] = None,
    accept_below_chance: Annotated[
        bool,
        typer.Option(
            "--accept-below-chance",
            help="Register even when the reference metric (--target) is not clearly above chance.",
        ),
    ] = False,
    model_fn: Annotated[
        str | None,
        typer.Option(
            "--model-fn",
            help="FILE.py:FUNC or package.module:FUNC that builds this model's network (see "
            "docs/training.md): retraining jobs train it. Without it the version cannot be retrained.",
        ),
    ] = None,
    prediction_column: Annotated[
        str | None,
        typer.Option(
            "--prediction-column",
            help="Without PATH: the reference column holding the model's own answers (a probability, a "
            "value, or a list of class probabilities). The version is monitored, not served: its "
            "predictions come from KServe's logger, the ingest route or `predictions import`.",
        ),
    ] = None,
) -> None:
    """Register the SavedModel at PATH, or a model served elsewhere, as the next (staged) version of NAME.

    With PATH the model keeps its graph and weights; driftwarden wraps its signature into one input per
    feature and one output by task for its monitors, checks it on the reference rows and records the
    source's path, content hash and signature: served, it answers its TF Serving clients in that
    signature's own names and shapes (REST and OIP v2). Without PATH, --prediction-column names the
    reference's column of the model's answers: the contract, the drift baseline and the performance
    estimates come from the reference, and driftwarden monitors the predictions your own serving sends it.
    Promote it with `driftwarden models promote NAME VERSION`.
    """
    from registry.schema import Task
    from training.imports import ImportSpec

    _check_import_options(
        name=name,
        path=path,
        reference=reference,
        prediction_column=prediction_column,
        model_fn=model_fn,
        signature=signature,
        positive_class=positive_class,
    )
    try:
        kind = Task.parse(task) if task is not None else None
    except ValueError as exc:
        raise Invalid(f"--task: {exc}") from None
    spec = ImportSpec(
        model_name=name,
        path=path,
        reference=reference,
        target=target,
        task=kind,
        signature=signature,
        features=_names(features, "--features"),
        classes=_names(classes, "--classes"),
        model_fn=model_fn,
        prediction_column=prediction_column,
        positive_class=positive_class,
        accept_below_chance=accept_below_chance,
    )
    _import_and_report(spec)


def _check_import_options(
    *,
    name: str,
    path: Path | None,
    reference: Path,
    prediction_column: str | None,
    model_fn: str | None,
    signature: str,
    positive_class: int | None,
) -> None:
    """Refuse (one line) options that contradict each other or name nothing."""
    from registry.names import check_name

    check_name(name)
    if path is not None and prediction_column is not None:
        raise Invalid(
            "give the SavedModel folder PATH or --prediction-column (a model served elsewhere), not both"
        )
    if path is None and prediction_column is None:
        raise Invalid(
            "give the SavedModel folder PATH, or --prediction-column COL naming the reference's column of "
            "the model's answers (a model served elsewhere)"
        )
    if path is None and (model_fn is not None or signature != "serving_default"):
        raise Invalid("--model-fn and --signature describe a SavedModel; a model served elsewhere has none")
    if positive_class not in (None, 0, 1):
        raise Invalid(
            f"--positive-class must be 0 or 1 (the label the probability is of), got {positive_class}"
        )
    if not reference.is_file():
        raise Invalid(f"--reference {reference} is not a file (a CSV or Parquet table of reference rows)")


def _import_and_report(spec: ImportSpec) -> None:
    """Run the import ``spec`` asks for and say what was registered."""
    from core.config import get_settings
    from core.database import open_database
    from core.logs import quiet_tensorflow_banner
    from training.imports import import_reference, import_saved_model

    name, path = spec.model_name, spec.path
    settings = get_settings()
    db = open_database()
    try:
        if path is None:
            done = import_reference(spec=spec, db=db, registry=settings.registry_path)
        else:
            quiet_tensorflow_banner()
            done = import_saved_model(spec=spec, db=db, registry=settings.registry_path)
    finally:
        db.dispose()
    schema = done.schema
    measured = ""
    if done.metrics:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in done.metrics.items() if k not in {"rows", "measured_on"})
        measured = f"; on the reference: {shown}"
    what = schema.kind.short + (f" ({len(schema.classes)} classes)" if schema.classes else "")
    how = "imported" if path is not None else "served elsewhere, monitored here"
    typer.echo(
        f"registered {name}:{done.version.version} (staged, {how}): {what}, {len(schema.features)} "
        f"features, profile of {done.rows} reference rows{measured}"
    )
    typer.echo(f"promote it with `driftwarden models promote {name} {done.version.version}`")


def _names(text: str | None, option: str) -> tuple[str, ...]:
    if text is None:
        return ()
    names = tuple(part.strip() for part in text.split(","))
    if not all(names) or len(set(names)) != len(names):
        raise Invalid(f"{option} must be distinct, non-empty names separated by commas, got {text!r}")
    return names


def register(app: typer.Typer) -> None:
    """Add ``models ...`` (the registry's commands and ``import``) to the root CLI."""
    register_models(app)
