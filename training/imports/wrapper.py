"""driftwarden's serving signature wrapped around the source's, and the source's answers on the reference
rows through it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core.errors import Invalid
from registry.schema import OUTPUT_NAMES, FeatureKind, FeatureSpec, Task, is_missing
from registry.signature import output_key
from training.imports.source import input_is_text
from training.imports.spec import STRING_DTYPES, Layout

BATCH = 4096  # reference rows per model call


def make_wrapper(
    tf: Any, source: Any, *, fn_name: str, layout: Layout, output: str, width: int, served: tuple[str, ...]
) -> Any:
    """A tf.Module with driftwarden's signature around the source's (its task set later by ``finish``):
    the task's output, and each source output of ``served`` as it is under ``output_key(position)`` (what
    a TF Serving client of the source is answered), from the same call."""
    numeric = {name for name in layout.features if not input_is_text(name, layout)}

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


def source_answers(
    tf: Any, module: Any, columns: Mapping[str, np.ndarray], features: tuple[FeatureSpec, ...]
) -> Any:
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
