"""The one module that loads a version's SavedModel (TensorFlow) and calls its signature (serving, gate).

A concrete function's public call binds its keyword arguments to the signature on every call (Python work
that costs more than the model itself on small batches). The signature's flat call takes the input tensors in
the signature's flattened order (``tf.nest`` flattens a dict by sorted key) and skips that binding. It is a
private method of TensorFlow's: it is used only after a probe at load has shown that it exists and answers
exactly as the public call does; otherwise every call goes through the public one.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

SIGNATURE = "serving_default"

log = logging.getLogger("driftwarden.registry.saved_model")


def limit_threads(*, intra_op: int) -> int:
    """Let one model call use at most ``intra_op`` threads (0: TensorFlow's default, one per core); returns
    the setting in force.

    TensorFlow takes it only before it first runs anything in the process: later, a differing setting is
    logged and the earlier one stays.
    """
    import tensorflow as tf

    threading = tf.config.threading
    if threading.get_intra_op_parallelism_threads() != intra_op:
        try:
            threading.set_intra_op_parallelism_threads(intra_op)
        except RuntimeError as exc:  # TensorFlow already ran in this process
            log.warning("model calls keep TensorFlow's earlier thread setting, not %d: %s", intra_op, exc)
    return int(threading.get_intra_op_parallelism_threads())


class SignatureRunner:
    """A loaded SavedModel's ``serving_default`` signature, called with numpy columns."""

    def __init__(self, path: Path) -> None:
        import tensorflow as tf

        self._tf = tf
        self._module = tf.saved_model.load(str(path))
        if SIGNATURE not in self._module.signatures:
            raise ValueError(f"{path}: no '{SIGNATURE}' signature (has {list(self._module.signatures)})")
        self._fn = self._module.signatures[SIGNATURE]
        _, specs = self._fn.structured_input_signature
        self.inputs: dict[str, Any] = {name: spec.dtype for name, spec in specs.items()}
        self.input_dtypes: dict[str, str] = {name: spec.dtype.name for name, spec in specs.items()}
        self.output_dtypes: dict[str, str] = {
            name: spec.dtype.name for name, spec in self._fn.structured_outputs.items()
        }
        self._order = sorted(self.inputs)  # the signature's flat input order
        self.flat_call = self._probe_flat_call()

    def __call__(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the signature on 1-D columns (float32 / str objects) and return numpy outputs."""
        tf = self._tf
        inputs = self.inputs
        if self.flat_call:
            flat = [tf.constant(columns[name], dtype=inputs[name]) for name in self._order]
            out = self._fn._call_flat(flat, self._fn.captured_inputs)
        else:
            feeds = {name: tf.constant(columns[name], dtype=dtype) for name, dtype in inputs.items()}
            out = self._fn(**feeds)
        return {name: value.numpy() for name, value in out.items()}

    def _probe_flat_call(self) -> bool:
        """Whether the flat call exists here and answers one row exactly as the public call does."""
        tf = self._tf
        call_flat = getattr(self._fn, "_call_flat", None)
        if call_flat is None:
            return False
        feeds = {name: tf.zeros([1], dtype=dtype) for name, dtype in self.inputs.items()}
        try:
            flat = call_flat([feeds[name] for name in self._order], self._fn.captured_inputs)
            public = self._fn(**feeds)
            return set(flat) == set(public) and all(
                np.array_equal(flat[k].numpy(), public[k].numpy(), equal_nan=public[k].dtype.is_floating)
                for k in public
            )
        except Exception:  # a TensorFlow whose private API differs: the public call it is
            return False


def load(path: Path) -> SignatureRunner:
    """Load the SavedModel at ``path``."""
    return SignatureRunner(path)
