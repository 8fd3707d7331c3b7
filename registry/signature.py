"""An imported SavedModel's own serving signature, as recorded at import (pure, no TensorFlow).

An imported version is served through driftwarden's wrapper (one 1-D input per feature, the task's output),
so that the monitors and the gate read every version alike. Its TF Serving clients, however, speak the
source's signature: its input names and shapes (``[batch]``, ``[batch, 1]`` or one dense ``[batch, D]``),
its output names, dtypes and shapes. This record (the version's ``signature.json`` document) lets the
serving edge translate between the two; a version without it (trained here, or imported before the record
existed) keeps driftwarden's own API.

The wrapper returns every source output beside the task's, under the key :func:`output_key` of its
position, so the source's answer is served as it is, with no second model call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCE_OUTPUT_PREFIX = "source_"

TF_DTYPES = {  # TensorFlow dtype name -> (TF Serving's DataType, OIP v2 datatype)
    "float16": ("DT_HALF", "FP16"),
    "bfloat16": ("DT_BFLOAT16", "BF16"),
    "float32": ("DT_FLOAT", "FP32"),
    "float64": ("DT_DOUBLE", "FP64"),
    "int8": ("DT_INT8", "INT8"),
    "int16": ("DT_INT16", "INT16"),
    "int32": ("DT_INT32", "INT32"),
    "int64": ("DT_INT64", "INT64"),
    "uint8": ("DT_UINT8", "UINT8"),
    "uint16": ("DT_UINT16", "UINT16"),
    "uint32": ("DT_UINT32", "UINT32"),
    "uint64": ("DT_UINT64", "UINT64"),
    "bool": ("DT_BOOL", "BOOL"),
    "string": ("DT_STRING", "BYTES"),
}


def output_key(position: int) -> str:
    """The wrapper's output key of the source output at ``position`` (in the record's order)."""
    return f"{SOURCE_OUTPUT_PREFIX}{position}"


@dataclass(frozen=True)
class Tensor:
    """One input or output of the source signature: its name, TensorFlow dtype and shape (None: any)."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]

    @property
    def column(self) -> bool:
        """A ``[batch, 1]`` tensor: each row's value is a one-element list."""
        return len(self.shape) == 2 and self.shape[1] == 1

    @property
    def tf_dtype(self) -> str:
        return TF_DTYPES.get(self.dtype, ("DT_INVALID", ""))[0]

    @property
    def v2_datatype(self) -> str:
        return TF_DTYPES.get(self.dtype, ("", "BYTES"))[1]

    def v2_shape(self) -> list[int]:
        """The shape as OIP v2 metadata states it (-1 for a variable dimension)."""
        return [-1 if d is None else int(d) for d in self.shape]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tensor:
        shape = tuple(None if d is None else int(d) for d in data["shape"])
        return cls(name=str(data["name"]), dtype=str(data["dtype"]), shape=shape)


@dataclass(frozen=True)
class SourceSignature:
    """The source's signature: its name, inputs and outputs; ``features``: the contract's features a dense
    ``[batch, D]`` input holds, in order (empty: one input per feature, named as the feature)."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    features: tuple[str, ...] = ()

    @property
    def dense(self) -> bool:
        return bool(self.features)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [{**t.to_dict(), "key": output_key(i)} for i, t in enumerate(self.outputs)],
            "features": list(self.features),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceSignature:
        return cls(
            name=str(data["name"]),
            inputs=tuple(Tensor.from_dict(t) for t in data["inputs"]),
            outputs=tuple(Tensor.from_dict(t) for t in data["outputs"]),
            features=tuple(str(f) for f in data.get("features") or ()),
        )
