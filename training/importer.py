"""Register a SavedModel written by any TensorFlow or Keras code as the next (staged) version of a model.

``driftwarden models import NAME PATH --reference FILE``: the SavedModel's signature is read, checked and
wrapped once into driftwarden's serving signature (one 1-D input per feature, float32 for numbers and
string for categories; one output by task: ``probability``, ``probabilities`` ``[batch, K]`` or
``value``), so that serving, the gate and the monitors call every version alike. The wrapper holds the
source's graph and variables unchanged and is saved as a plain SavedModel (TF Serving loads it); the
lineage records the source path and the SHA-256 of its files. The source's own signature (its inputs' and
outputs' names, dtypes and shapes) is recorded as the version's ``signature.json`` and the wrapper returns
the source's outputs beside the task's, so the server answers its TF Serving clients in the source's own
terms (``registry/signature.py``, ``service/serving/source_codec.py``).

Supported source signatures: one named input per feature (float or int for numbers, string for categories;
shape ``[batch]`` or ``[batch, 1]``), or one dense ``[batch, D]`` numeric input whose columns ``--features``
names in order. Supported outputs: one probability (binary), a ``[batch, K]`` probability vector
(multi-class; ``[batch, 2]`` is read as binary, the second column the positive class) or one value
(regression). The task is inferred from the outputs and the target where that is unambiguous.

The contract is the signature's inputs described by the reference rows (ranges, categories, missing rates,
as for trained versions). The reference profile is built from the reference rows and the model's own
answers on them; with ``--target`` the reference metrics are computed too, marked as measured on the
reference, and the class order is checked (:func:`check_order`, :mod:`training.class_order`): a
multi-class model whose outputs fit the labels clearly better in another order than ``--classes`` (else the
sorted labels) gives, a binary model whose probability is of label 0 (ROC AUC well below 0.5; a SavedModel
says so with ``--positive-class 0`` and serves ``1 - p``), or a reference metric not clearly above chance
(unless ``--accept-below-chance``) is refused with the order that fits and the flag that settles it.
Every refusal is a :class:`core.errors.Invalid` (one line, exit 2) raised before anything is written.

``driftwarden models import NAME --reference FILE --prediction-column COL`` (no PATH) registers a model
served elsewhere (:func:`import_reference`): the features are the reference's other columns (or
``--features``), the model's answers are the column COL (numbers, or lists of class probabilities: a Parquet
list or JSON arrays in a CSV), the task is decided as for a SavedModel's outputs. The version folder holds
the documents only; its lineage says ``serving: elsewhere``, so the server never loads it and answers a
predict on it with a 404 that says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.bounds import MAX_REFERENCE_COLUMNS
from core.config import get_settings
from core.database import Database
from core.errors import Invalid
from core.tabular import Columns, TableStream, read_table
from registry.models import ModelVersion
from registry.schema import (
    OUTPUT_NAMES,
    SUM_TOLERANCE,
    FeatureKind,
    FeatureSpec,
    ModelSchema,
    OutputSpec,
    Task,
    check_classes,
    infer_feature,
    is_missing,
    label_codes,
)
from registry.service import latest_version, publish_version
from registry.signature import SourceSignature, Tensor, output_key

log = logging.getLogger("driftwarden.training.importer")

SIGNATURE = "serving_default"
BATCH = 4096  # reference rows per model call
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


def import_saved_model(*, spec: ImportSpec, db: Database, registry: Path) -> Imported:
    """Check, wrap and register ``spec.path`` as the next staged version of ``spec.model_name``."""
    import tensorflow as tf

    assert spec.path is not None, "a SavedModel import names its folder"
    reference = read_reference(spec.reference)  # a reference too wide is refused before TensorFlow loads
    source = _load(spec.path)
    fn = _signature(source, spec)
    layout = _layout(fn, spec, reference)
    output_name, output = _output(fn, spec)
    columns = {name: _reference_column(reference[name], name, layout) for name in layout.features}
    check_reference_rows(columns, spec.reference)
    features = tuple(_feature(name, columns[name], layout) for name in layout.features)
    width = output.shape[-1] if len(output.shape) == 2 else 1
    recorded = _source_signature(fn, spec, layout)
    module = _wrapper(
        tf,
        source,
        fn_name=spec.signature,
        layout=layout,
        output=output_name,
        width=width,
        served=tuple(t.name for t in recorded.outputs),
    )
    raw = _run(tf, module, columns, features)
    task, answers = _task(spec, raw, reference)
    labels, classes = _labels(spec, task, reference, width=raw.shape[1] if raw.ndim == 2 else 1)
    check_order(spec, task, answers=answers, labels=labels, classes=classes)
    module.finish(task, positive=_positive(spec, task))
    schema = ModelSchema(
        features=features,
        outputs=(_output_spec(task, answers, classes),),
        target=spec.target or "",
        task=task.value,
        classes=classes,
    )
    return _publish(
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
    task, answers = _task(spec, raw, reference)
    labels, classes = _labels(spec, task, reference, width=raw.shape[1] if raw.ndim == 2 else 1)
    check_order(spec, task, answers=answers, labels=labels, classes=classes)
    schema = ModelSchema(
        features=features,
        outputs=(_output_spec(task, answers, classes),),
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
    return _register(
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


def read_reference(path: Path) -> Columns:
    """The reference's rows; its columns (at most :data:`core.bounds.MAX_REFERENCE_COLUMNS`) are counted
    from the Parquet metadata or the CSV header before any row is read."""
    names = TableStream(path).names
    if len(names) > MAX_REFERENCE_COLUMNS:
        raise Invalid(
            f"the reference {path} has {len(names):,} columns: a model takes at most "
            f"{MAX_REFERENCE_COLUMNS:,} (features, target and prediction column together)"
        )
    return read_table(path)


def check_reference_rows(columns: Mapping[str, np.ndarray], path: Path) -> None:
    """Every feature of the reference has at least ``drift_min_rows`` values that are not missing: fewer,
    and no drift test of that feature could ever give a verdict (``driftwarden drift`` calls it insufficient
    data)."""
    minimum = get_settings().drift_min_rows
    rows = len(next(iter(columns.values()))) if columns else 0
    if rows < minimum:
        raise Invalid(
            f"the reference {path} has {rows} row(s): a drift test needs at least {minimum} "
            "(DRIFTWARDEN_DRIFT_MIN_ROWS): give the rows the model was trained or validated on"
        )
    short = {name: int(np.count_nonzero(~is_missing(np.asarray(v)))) for name, v in columns.items()}
    short = {name: n for name, n in short.items() if n < minimum}
    if short:
        shown = ", ".join(f"{name!r} ({n})" for name, n in list(short.items())[:5])
        more = f" and {len(short) - 5} more" if len(short) > 5 else ""
        raise Invalid(
            f"the reference {path} has fewer than {minimum} values that are not missing "
            f"(DRIFTWARDEN_DRIFT_MIN_ROWS) in feature(s) {shown}{more}: no drift test of them could give a "
            "verdict; fill them, or leave them out (--features)"
        )


def read_prediction_column(reference: Columns, column: str, path: Path) -> np.ndarray:
    """A table's prediction ``column`` (of ``path``) as float64: a value per row, or [rows, K] from lists."""
    if column not in reference:
        raise Invalid(
            f"--prediction-column {column!r} is not a column of the reference {path} (its columns: "
            f"{', '.join(sorted(reference))})"
        )
    values = np.asarray(reference[column])
    if values.dtype.kind in "iufb":
        return values.astype(np.float64)
    items = values.tolist()
    if items and all(isinstance(v, str) and v.lstrip().startswith("[") for v in items):
        try:  # a CSV's lists of class probabilities, written as JSON arrays
            items = [json.loads(v) for v in items]
        except ValueError:
            raise Invalid(f"--prediction-column {column!r} holds text that is not a JSON array") from None
    if items and all(isinstance(v, list | tuple | np.ndarray) for v in items):
        widths = {len(v) for v in items}
        if len(widths) == 1:
            return np.asarray([list(v) for v in items], dtype=np.float64)
        raise Invalid(f"--prediction-column {column!r} holds lists of {len(widths)} different lengths")
    raise Invalid(
        f"--prediction-column {column!r} must hold numbers (a probability or a value) or lists of class "
        f"probabilities, found {values.dtype.name} values such as {str(items[0])[:40]!r}"
        if items
        else f"--prediction-column {column!r} is empty"
    )


# ---------------------------------------------------------------- the source


def _load(path: Path) -> Any:
    """The loaded SavedModel at ``path`` (Invalid when it is none)."""
    import tensorflow as tf

    if not path.is_dir() or not any((path / f).is_file() for f in ("saved_model.pb", "saved_model.pbtxt")):
        raise Invalid(
            f"{path} is not a SavedModel (a folder with saved_model.pb): export it with "
            "`model.export(PATH)` (Keras) or `tf.saved_model.save(module, PATH)`"
        )
    try:
        return tf.saved_model.load(str(path))
    except Exception as exc:  # TensorFlow raises many kinds for an unreadable model
        raise Invalid(f"{path}: TensorFlow cannot load this SavedModel: {str(exc).splitlines()[0]}") from None


def _signature(source: Any, spec: ImportSpec) -> Any:
    """The signature the spec names (Invalid when the model has no such signature)."""
    names = sorted(source.signatures)
    if spec.signature not in source.signatures:
        raise Invalid(
            f"{spec.path} has no signature {spec.signature!r} (it has: {', '.join(names) or 'none'}): "
            "choose one with --signature"
        )
    return source.signatures[spec.signature]


def _layout(fn: Any, spec: ImportSpec, reference: Columns) -> Layout:
    """The signature's inputs as the contract's features (Invalid for a shape or name it cannot take)."""
    _, specs = fn.structured_input_signature
    inputs = tuple(
        SourceInput(name, tensor.dtype.name, tuple(tensor.shape.as_list())) for name, tensor in specs.items()
    )
    if not inputs:
        raise Invalid(f"signature {spec.signature!r} of {spec.path} takes no inputs")
    dense = len(inputs) == 1 and len(inputs[0].shape) == 2 and inputs[0].shape[1] not in (None, 1)
    if spec.features and not dense:
        raise Invalid(
            "--features names the columns of one dense [batch, D] input; signature "
            f"{spec.signature!r} takes {_shown(inputs)}: leave --features out"
        )
    if dense:
        (source,) = inputs
        width = source.shape[1]
        if not spec.features:
            raise Invalid(
                f"signature input {source.name!r} is one [batch, {width}] matrix: name its columns in order "
                "with --features a,b,..."
            )
        if len(spec.features) != width:
            raise Invalid(f"--features names {len(spec.features)} columns, input {source.name!r} has {width}")
        if source.dtype not in NUMERIC_DTYPES:
            raise Invalid(
                f"signature input {source.name!r} has dtype {source.dtype}: a dense input must be numeric"
            )
        names = spec.features
    else:
        for source in inputs:
            if len(source.shape) > 2 or (len(source.shape) == 2 and source.shape[1] != 1):
                raise Invalid(
                    f"signature input {source.name!r} has shape {list(source.shape)}: driftwarden takes one "
                    "feature per input, shape [batch] or [batch, 1], or one dense [batch, D] input "
                    "(with --features)"
                )
            if source.dtype not in NUMERIC_DTYPES | STRING_DTYPES:
                raise Invalid(
                    f"signature input {source.name!r} has dtype {source.dtype}, which a contract cannot "
                    "describe (numbers: float or int; categories: string)"
                )
        order = {name: i for i, name in enumerate(reference)}  # the reference's column order
        names = tuple(sorted((s.name for s in inputs), key=lambda n: (order.get(n, len(order)), n)))
    missing = [name for name in names if name not in reference]
    if missing:
        raise Invalid(
            f"the reference {spec.reference} lacks the column(s) {', '.join(map(repr, missing))} that "
            f"the model takes (its columns: {', '.join(sorted(reference))})"
        )
    if spec.target is not None and spec.target in names:
        raise Invalid(f"the target {spec.target!r} is an input of the model: it cannot be both")
    return Layout(inputs=inputs, features=tuple(names), dense=dense)


def _shown(inputs: tuple[SourceInput, ...]) -> str:
    return ", ".join(f"{s.name} {list(s.shape)} {s.dtype}" for s in inputs)


def _output(fn: Any, spec: ImportSpec) -> tuple[str, Any]:
    """The one float output of the signature: its name and spec (Invalid when it has none or several)."""
    outputs = dict(fn.structured_outputs)
    floats = {name: t for name, t in outputs.items() if t.dtype.is_floating}
    if len(floats) != 1:
        shown = ", ".join(f"{n} {t.shape.as_list()} {t.dtype.name}" for n, t in outputs.items())
        raise Invalid(
            f"signature {spec.signature!r} has {len(floats)} float outputs ({shown or 'none'}): driftwarden "
            "monitors one output (a probability, a [batch, K] probability vector or a value); export a "
            "signature with exactly one"
        )
    name, tensor = next(iter(floats.items()))
    shape = tensor.shape.as_list()
    if len(shape) > 2 or len(shape) == 0:
        raise Invalid(
            f"output {name!r} has shape {shape}, which fits no task (a probability or value [batch] or "
            "[batch, 1], or a probability vector [batch, K])"
        )
    return name, tensor


def _source_signature(fn: Any, spec: ImportSpec, layout: Layout) -> SourceSignature:
    """The source's own signature, as its TF Serving clients call it (recorded with the version, inputs and
    outputs by name: a loaded signature's order varies); outputs without a batch dimension cannot be cut per
    request and are left out."""
    outputs = tuple(
        Tensor(name, t.dtype.name, tuple(t.shape.as_list()))
        for name, t in sorted(dict(fn.structured_outputs).items())
        if t.shape.rank and t.shape.as_list()[0] is None
    )
    return SourceSignature(
        name=spec.signature,
        inputs=tuple(Tensor(s.name, s.dtype, s.shape) for s in sorted(layout.inputs, key=lambda s: s.name)),
        outputs=outputs,
        features=layout.features if layout.dense else (),
    )


def _input_is_text(name: str, layout: Layout) -> bool:
    return not layout.dense and next(s for s in layout.inputs if s.name == name).dtype in STRING_DTYPES


def _reference_column(values: Any, name: str, layout: Layout) -> np.ndarray:
    """A reference column as the contract reads it (text for a string input, numbers otherwise)."""
    column = np.asarray(values)
    if _input_is_text(name, layout):
        if column.dtype.kind in "iuf":
            return np.array([None if v != v else _text(v) for v in column.tolist()], dtype=object)
        return column.astype(object)
    if column.dtype.kind not in "iufb":
        raise Invalid(
            f"the model takes {name!r} as a number, the reference holds text in that column: convert it, "
            "or export the model with a string input"
        )
    return column


def _text(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _feature(name: str, column: np.ndarray, layout: Layout) -> FeatureSpec:
    try:
        spec = infer_feature(name, column, range_chance=get_settings().range_chance)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    if _input_is_text(name, layout) and spec.kind is not FeatureKind.CATEGORICAL:  # pragma: no cover
        raise Invalid(f"the model takes {name!r} as text, the reference's column is not categorical")
    return spec


# ---------------------------------------------------------------- the wrapper


def _wrapper(
    tf: Any, source: Any, *, fn_name: str, layout: Layout, output: str, width: int, served: tuple[str, ...]
) -> Any:
    """A tf.Module with driftwarden's signature around the source's (its task set later by ``finish``):
    the task's output, and each source output of ``served`` as it is under ``output_key(position)`` (what
    a TF Serving client of the source is answered), from the same call."""
    numeric = {name for name in layout.features if not _input_is_text(name, layout)}

    class ImportedModule(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="driftwarden_imported")
            self.source = source  # tracked: its variables and functions are saved with the wrapper
            self.task = Task.REGRESSION
            self.positive = 1  # binary: the source's column (or 1 - its probability when 0)
            spec = {
                name: tf.TensorSpec([None], tf.float32 if name in numeric else tf.string, name=name)
                for name in layout.features
            }
            self.serve = tf.function(self._serve, input_signature=[spec])
            self.raw = tf.function(self._raw, input_signature=[spec])

        def _raw(self, features: dict[str, Any]) -> Any:
            return self._task_output(self._call(features))

        def _task_output(self, outputs: dict[str, Any]) -> Any:
            out = tf.cast(outputs[output], tf.float32)
            return out if width > 1 else tf.reshape(out, [-1])

        def _call(self, features: dict[str, Any]) -> dict[str, Any]:
            fn = self.source.signatures[fn_name]
            if layout.dense:
                (src,) = layout.inputs
                x = tf.stack([features[name] for name in layout.features], axis=1)
                feeds = {src.name: tf.cast(x, src.dtype)}
            else:
                feeds = {}
                for src in layout.inputs:
                    value = features[src.name]
                    if src.dtype not in STRING_DTYPES:
                        value = tf.cast(value, src.dtype)
                    feeds[src.name] = tf.expand_dims(value, 1) if len(src.shape) == 2 else value
            return dict(fn(**feeds))

        def _serve(self, features: dict[str, Any]) -> dict[str, Any]:
            outputs = self._call(features)
            out = self._task_output(outputs)
            if self.task is Task.BINARY and width == 2:
                out = out[:, self.positive]
            elif self.task is Task.BINARY and self.positive == 0:  # the source answers P(label 0)
                out = 1.0 - out
            source = {output_key(i): tf.identity(outputs[name]) for i, name in enumerate(served)}
            return {OUTPUT_NAMES[self.task]: out, **source}

        def finish(self, task: Task, *, positive: int = 1) -> None:
            self.task = task
            self.positive = positive
            self.serve = tf.function(self._serve, input_signature=self.raw.input_signature)

    return ImportedModule()


def _run(tf: Any, module: Any, columns: Mapping[str, np.ndarray], features: tuple[FeatureSpec, ...]) -> Any:
    """The source's raw answers on the reference rows, through the wrapper ([n] or [n, K] float64)."""
    feeds = {spec.name: _feed(spec, columns[spec.name]) for spec in features}
    n = len(next(iter(feeds.values())))
    parts = []
    try:
        for start in range(0, n, BATCH):
            batch = {k: tf.constant(v[start : start + BATCH]) for k, v in feeds.items()}
            parts.append(module.raw(batch).numpy().astype(np.float64))
    except Exception as exc:  # the model's own graph refused the reference rows
        raise Invalid(f"the model failed on the reference rows: {str(exc).splitlines()[0]}") from None
    if not parts:
        raise Invalid("the reference has no rows")
    return np.concatenate(parts)


def _feed(spec: FeatureSpec, column: np.ndarray) -> np.ndarray:
    """A reference column as the serving signature takes it (float32 with NaN; text with "" for missing)."""
    if spec.kind is FeatureKind.NUMERIC:
        return np.asarray(column, dtype=np.float64).astype(np.float32)
    missing = is_missing(column)
    return np.array(["" if m else str(v) for v, m in zip(column, missing, strict=True)], dtype=object)


# ---------------------------------------------------------------- the task


def _task(spec: ImportSpec, raw: np.ndarray, reference: Columns) -> tuple[Task, np.ndarray]:
    """The task the outputs and target fit (``spec.task`` when given), and the answers it serves."""
    if not np.isfinite(raw).all():
        bad = int((~np.isfinite(raw)).any(axis=-1).sum()) if raw.ndim == 2 else int((~np.isfinite(raw)).sum())
        raise Invalid(f"the model answered {bad} reference row(s) with a value that is not finite")
    width = raw.shape[1] if raw.ndim == 2 else 1
    probabilities = bool(((raw >= 0) & (raw <= 1)).all())
    sums = bool(width > 1 and (np.abs(raw.sum(axis=1) - 1.0) <= SUM_TOLERANCE).all())
    target = _target(spec, reference)
    fits = _fitting(width=width, probabilities=probabilities, sums=sums)
    if spec.task is not None:
        if spec.task not in fits:
            raise Invalid(_contradiction(spec.task, width=width, probabilities=probabilities, sums=sums))
        task = spec.task
    elif len(fits) == 1:
        task = fits[0]
    elif not fits:
        raise Invalid(_no_task(width=width, probabilities=probabilities))
    elif target is not None:  # a 0/1 target decides binary, other numbers regression
        binary = set(np.unique(target[~is_missing(target)]).tolist()) <= {0, 1}
        task = Task.BINARY if binary and Task.BINARY in fits else Task.REGRESSION
    else:
        raise Invalid(
            "the outputs are values in [0, 1]: they could be probabilities (binary) or values "
            "(regression); say which with --task binary or --task regression (or give --target)"
        )
    if spec.positive_class is not None and task is not Task.BINARY:
        raise Invalid(f"--positive-class applies to a binary model; this one is {task.short}")
    positive = _positive(spec, task)
    if task is Task.BINARY and width == 2:
        return task, raw[:, positive]
    return task, (1.0 - raw if task is Task.BINARY and positive == 0 else raw)


def _positive(spec: ImportSpec, task: Task) -> int:
    """The label a binary model's probability (or its second of two columns) is of: 0 or 1."""
    return 1 if spec.positive_class is None or task is not Task.BINARY else spec.positive_class


def _fitting(*, width: int, probabilities: bool, sums: bool) -> list[Task]:
    if width == 1:
        return [Task.BINARY, Task.REGRESSION] if probabilities else [Task.REGRESSION]
    if not (probabilities and sums):
        return []
    return [Task.BINARY] if width == 2 else [Task.MULTICLASS]


def _contradiction(task: Task, *, width: int, probabilities: bool, sums: bool) -> str:
    shape = f"[batch, {width}]" if width > 1 else "one value per row"
    if task is Task.BINARY and width == 1:
        return (
            "--task binary needs probabilities in [0, 1], the model answered values outside it on the "
            "reference (a logit? export the sigmoid)"
        )
    if width > 1 and not (probabilities and sums):
        return (
            f"--task {task.short}: the model's {shape} outputs are not probability vectors (each row in "
            "[0, 1], summing to 1): logits? export the softmax"
        )
    need = {
        Task.BINARY: "one probability (or [batch, 2])",
        Task.MULTICLASS: "a [batch, K] vector with K >= 3",
        Task.REGRESSION: "one value per row",
    }[task]
    return f"--task {task.short} contradicts the outputs: the model answers {shape}, the task needs {need}"


def _no_task(*, width: int, probabilities: bool) -> str:
    return (
        f"the outputs fit no task: [batch, {width}] rows that are not probability vectors (each in [0, 1] "
        "and summing to 1); export the softmax for a multi-class model"
    )


def _target(spec: ImportSpec, reference: Columns) -> np.ndarray | None:
    if spec.target is None:
        return None
    if spec.target not in reference:
        raise Invalid(
            f"--target {spec.target!r} is not a column of the reference {spec.reference} (its columns: "
            f"{', '.join(sorted(reference))})"
        )
    return np.asarray(reference[spec.target])


def _labels(
    spec: ImportSpec, task: Task, reference: Columns, *, width: int
) -> tuple[np.ndarray | None, tuple[str, ...]]:
    """The target as the task's labels (0/1, class indexes, values) and the class names (multi-class)."""
    target = _target(spec, reference)
    if task is Task.MULTICLASS:
        classes = spec.classes
        if target is not None:
            try:
                classes = check_classes(
                    target[~is_missing(target)], target=spec.target or "", classes=classes
                )
            except ValueError as exc:
                raise Invalid(str(exc)) from None
        classes = classes or tuple(str(i) for i in range(width))
        if len(classes) != width:
            raise Invalid(
                f"the model answers {width} class probabilities, "
                + (
                    f"--classes names {len(classes)}"
                    if spec.classes
                    else f"the target has {len(classes)} classes"
                )
            )
        return (None if target is None else label_codes(target, classes)), classes
    if spec.classes:
        raise Invalid(f"--classes names the classes of a multi-class model; this one is {task.short}")
    if target is None:
        return None, ()
    present = target[~is_missing(target)]
    if task is Task.BINARY:
        found = set(np.unique(present).tolist()) if present.dtype.kind in "iufb" else {"text"}
        if not found <= {0, 1}:
            raise Invalid(
                f"target {spec.target!r} must hold 0/1 labels for a binary model, found "
                f"{sorted(map(str, found))[:5]}"
            )
    elif present.dtype.kind not in "iuf" or not np.isfinite(present.astype(np.float64)).all():
        raise Invalid(f"target {spec.target!r} of a regression must hold finite numbers")
    return np.asarray(target, dtype=np.float64), ()


def check_order(
    spec: ImportSpec, task: Task, *, answers: np.ndarray, labels: np.ndarray | None, classes: tuple[str, ...]
) -> None:
    """Refuse (one line) a classifier whose outputs fit the reference labels clearly better in another
    class order (multi-class), whose probability is of the other label (binary), or whose reference
    metric is at or below chance (unless ``spec.accept_below_chance``); see :mod:`training.class_order`."""
    from training.class_order import check_binary, check_multiclass

    if labels is None or task is Task.REGRESSION:
        return
    override = " (--accept-below-chance registers it anyway)"
    if task is Task.MULTICLASS:
        found = check_multiclass(labels=labels, probabilities=answers)
        if found is None:
            return
        given = f"[{', '.join(classes)}]" + (" from --classes" if spec.classes else " (the sorted labels)")
        if found.reordered:
            fits = ",".join(classes[i] for i in found.best)
            raise Invalid(
                f"the model's outputs fit the classes of --target {spec.target!r} in another order: "
                f"accuracy on the reference {found.best_accuracy:.4f} as [{fits.replace(',', ', ')}], "
                f"{found.accuracy:.4f} as {given} (chance {found.chance:.4f}); name the output order "
                f"with --classes {fits}"
            )
        if found.at_chance and not spec.accept_below_chance:
            raise Invalid(
                f"the model's accuracy on the reference is {found.accuracy:.4f} with the classes as "
                f"{given}, not clearly above chance ({found.chance:.4f}), and no other order fits clearly "
                f"better: check --target {spec.target!r} and the output order (--classes a,b,...){override}"
            )
        return
    binary = check_binary(labels=labels, probabilities=answers)
    if binary is None or spec.accept_below_chance:
        return
    of = "1 - the output" if spec.positive_class == 0 else "the output"
    if binary.flipped:
        if spec.positive_class == 0:
            settle = "leave --positive-class 0 out"
        elif spec.path is not None:
            settle = "say so with --positive-class 0"
        else:
            settle = f"recode --target {spec.target!r} so that 1 is the label it is of"
        raise Invalid(
            f"the model's probability seems to be of the other label: ROC AUC {binary.auc:.4f} of {of} "
            f"against --target {spec.target!r} on the reference, well below 0.5; {settle}{override}"
        )
    if binary.at_chance:
        raise Invalid(
            f"the model's ROC AUC on the reference is {binary.auc:.4f} against --target {spec.target!r}, "
            f"not clearly above chance (0.5): check --target and the output{override}"
        )


def _output_spec(task: Task, answers: np.ndarray, classes: tuple[str, ...]) -> OutputSpec:
    if task is Task.REGRESSION:
        return OutputSpec.for_task(task, expected=(float(answers.min()), float(answers.max())))
    return OutputSpec.for_task(task, classes=len(classes))


# ---------------------------------------------------------------- publishing


def _publish(
    *,
    spec: ImportSpec,
    db: Database,
    registry: Path,
    module: Any,
    schema: ModelSchema,
    columns: Mapping[str, np.ndarray],
    answers: np.ndarray,
    labels: np.ndarray | None,
    layout: Layout,
    signature: SourceSignature,
) -> Imported:
    """Profile the reference, write the wrapped SavedModel and its documents, record the staged version."""
    from training.export import write_saved_model

    assert spec.path is not None
    lineage: dict[str, Any] = {
        "source": "import",
        "source_path": str(spec.path.resolve()),
        "source_sha256": content_hash(spec.path),
        "signature": spec.signature,
        "input_layout": "dense" if layout.dense else "per_feature",
        "reference": str(spec.reference.resolve()),
        "reference_rows": int(len(answers)),
        "task": schema.kind.short,
        "model_fn": _model_fn(spec.model_fn, schema, columns),
    }
    if schema.kind is Task.BINARY and spec.positive_class == 0:
        lineage["positive_class"] = 0  # the source answers P(label 0); the version serves 1 - it
    return _register(
        spec=spec,
        db=db,
        registry=registry,
        write_model=lambda path: write_saved_model(module, path),
        schema=schema,
        columns=columns,
        answers=answers,
        labels=labels,
        lineage=lineage,
        documents={"signature": signature.to_dict()},
    )


def _register(
    *,
    spec: ImportSpec,
    db: Database,
    registry: Path,
    write_model: Callable[[Path], None] | None,
    schema: ModelSchema,
    columns: Mapping[str, np.ndarray],
    answers: np.ndarray,
    labels: np.ndarray | None,
    lineage: dict[str, Any],
    documents: Mapping[str, Any] | None = None,
) -> Imported:
    """Profile the reference (and measure its metrics with a target), record the next staged version."""
    from monitors.performance import metrics_for
    from monitors.profile import build_reference_profile

    task = schema.kind
    profile = build_reference_profile(columns, schema, predictions=answers, labels=labels)
    metrics: dict[str, Any] = {}
    if labels is not None:
        metrics.update(metrics_for(task, y_true=labels, predictions=answers, classes=schema.classes))
        metrics["rows"] = int(metrics["rows"])
        metrics["measured_on"] = "reference"
    with db.session() as session:
        prev = latest_version(session=session, model_name=spec.model_name)
        registered = publish_version(
            session=session,
            registry=registry,
            model_name=spec.model_name,
            documents={"schema": schema.to_dict(), "profile": profile, **(documents or {})},
            metrics=metrics,
            lineage=lineage,
            write_model=write_model,
            parent_version=prev.version if prev else None,
            actor="import",
        )
    return Imported(version=registered, schema=schema, metrics=metrics, rows=int(len(answers)))


def _model_fn(
    ref: str | None, schema: ModelSchema, columns: Mapping[str, np.ndarray]
) -> dict[str, Any] | None:
    """The builder's lineage entry, probed on this contract's encoded width (None without one)."""
    if ref is None:
        return None
    from training.builders import output_width, probe
    from training.features import fit_preprocessing

    width = fit_preprocessing(columns, schema).width
    return probe(
        ref, input_dim=width, outputs=output_width(schema.kind, len(schema.classes)), task=schema.kind
    )


def content_hash(path: Path) -> str:
    """SHA-256 over a folder's files (relative paths and contents, in sorted order)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0")
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
