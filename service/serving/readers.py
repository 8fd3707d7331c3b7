"""How a version's contract reads what arrives beside the inputs: each task's labels, and the typed layout
of its rows in the prediction log (shared by the serving, feedback, ingest and import paths)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.numbers import finite_float
from predictions.typed import Layout, make_layout
from registry.schema import FeatureKind, ModelSchema, Task

_LAYOUTS: dict[int, tuple[ModelSchema, Layout]] = {}


def log_layout(schema: ModelSchema) -> Layout:
    """The typed log layout of a version's contract: its numeric, then categorical features in order, and
    the categories the contract knows."""
    known = _LAYOUTS.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    numeric = [f.name for f in schema.features if f.kind is FeatureKind.NUMERIC]
    categorical = [f for f in schema.features if f.kind is not FeatureKind.NUMERIC]
    layout = make_layout(numeric, [f.name for f in categorical], [f.categories for f in categorical])
    _LAYOUTS[id(schema)] = (schema, layout)  # the schema is kept alive, so its id is not reused
    return layout


@dataclass(frozen=True)
class LabelReader:
    """How one task's labels are read: the value stored for a label, or None when it is not one."""

    read: Callable[[Any], float | None]
    allowed: str  # what the error message says a label must be
    hint: str  # the label in the body's shape

    def __call__(self, value: Any) -> float | None:
        return self.read(value)


def label_reader(schema: ModelSchema | None, *, booleans: bool = False) -> LabelReader:
    """How ``schema``'s task reads a label: a number or a class name (the ingest route, file imports); with
    ``booleans`` a binary label may also be true or false (the feedback route documents it: 1 and 0)."""
    task = schema.kind if schema is not None else Task.BINARY
    if task is Task.REGRESSION:
        return LabelReader(finite_float, "a finite number (regression)", "a number")
    if task is Task.MULTICLASS and schema is not None:
        classes = schema.classes
        index = {name: float(i) for i, name in enumerate(classes)}
        shown = ", ".join(map(repr, classes[:10])) + (", ..." if len(classes) > 10 else "")

        def read_class(value: Any) -> float | None:
            if isinstance(value, str):
                return index.get(value)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(classes):
                return float(value)
            return None

        allowed = f"a class name ({shown}) or its index 0 to {len(classes) - 1} (multi-class)"
        return LabelReader(read_class, allowed, "a class name or index")
    if booleans:
        return LabelReader(_binary_or_boolean, "0 or 1 (binary classification)", "0 or 1")
    return LabelReader(_binary, "0 or 1 (binary classification; a number, not true or false)", "0 or 1")


def _binary(value: Any) -> float | None:
    """0 or 1; a boolean is not a label here (a label is a number or a class name)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value in (0, 1) else None


def _binary_or_boolean(value: Any) -> float | None:
    return _binary(int(value) if isinstance(value, bool) else value)
