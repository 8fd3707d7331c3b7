"""The one module that loads a version's SavedModel (TensorFlow) and calls its signature (serving, gate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SIGNATURE = "serving_default"


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

    def __call__(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the signature on 1-D columns (float32 / str objects) and return numpy outputs."""
        tf = self._tf
        feeds = {name: tf.constant(columns[name], dtype=dtype) for name, dtype in self.inputs.items()}
        out = self._fn(**feeds)
        return {name: value.numpy() for name, value in out.items()}


def load(path: Path) -> SignatureRunner:
    """Load the SavedModel at ``path``."""
    return SignatureRunner(path)
