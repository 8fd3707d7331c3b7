"""The source SavedModel read: its signature, its inputs as the contract's features, its one output, its
own signature as its TF Serving clients call it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.config import get_settings
from core.errors import Invalid
from core.tabular import Columns
from registry.schema import FeatureKind, FeatureSpec, infer_feature
from registry.signature import SourceSignature, Tensor
from training.imports.spec import NUMERIC_DTYPES, STRING_DTYPES, ImportSpec, Layout, SourceInput


def load_saved_model(path: Path) -> Any:
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


def named_signature(source: Any, spec: ImportSpec) -> Any:
    """The signature the spec names (Invalid when the model has no such signature)."""
    names = sorted(source.signatures)
    if spec.signature not in source.signatures:
        raise Invalid(
            f"{spec.path} has no signature {spec.signature!r} (it has: {', '.join(names) or 'none'}): "
            "choose one with --signature"
        )
    return source.signatures[spec.signature]


def source_layout(fn: Any, spec: ImportSpec, reference: Columns) -> Layout:
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


def task_output(fn: Any, spec: ImportSpec) -> tuple[str, Any]:
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


def source_signature(fn: Any, spec: ImportSpec, layout: Layout) -> SourceSignature:
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


def input_is_text(name: str, layout: Layout) -> bool:
    return not layout.dense and next(s for s in layout.inputs if s.name == name).dtype in STRING_DTYPES


def reference_column(values: Any, name: str, layout: Layout) -> np.ndarray:
    """A reference column as the contract reads it (text for a string input, numbers otherwise)."""
    column = np.asarray(values)
    if input_is_text(name, layout):
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


def feature_spec(name: str, column: np.ndarray, layout: Layout) -> FeatureSpec:
    try:
        spec = infer_feature(name, column, range_chance=get_settings().range_chance)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    if input_is_text(name, layout) and spec.kind is not FeatureKind.CATEGORICAL:  # pragma: no cover
        raise Invalid(f"the model takes {name!r} as text, the reference's column is not categorical")
    return spec
