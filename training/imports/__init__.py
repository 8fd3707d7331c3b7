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
reference, and the class order is checked (:func:`check_order`, :mod:`training.imports.class_order`): a
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


The package by subject: ``spec.py`` (what an import is asked for and yields), ``reference.py`` (the
reference rows), ``source.py`` (the source signature read), ``wrapper.py`` (the serving signature around
it), ``task.py`` (the task, labels and class order), ``publish.py`` (the version recorded),
``saved_model.py`` and ``served_elsewhere.py`` (the two imports end to end), ``class_order.py`` (whether
a classifier's outputs fit the labels in the given order), ``cli.py`` (the ``models import`` command).

The face imports its names on first use: ``cli.py`` sits in this package, and every ``driftwarden models
...`` command imports it, so loading the import's code (numpy, pyarrow, the database) at that point would
slow every registry command down.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from training.imports.publish import content_hash
    from training.imports.reference import check_reference_rows, read_prediction_column, read_reference
    from training.imports.saved_model import import_saved_model
    from training.imports.served_elsewhere import import_reference
    from training.imports.spec import SIGNATURE, Imported, ImportSpec, Layout, SourceInput
    from training.imports.task import check_order

# each name of the face -> the module that defines it
_HOMES = {
    "content_hash": "publish",
    "check_reference_rows": "reference",
    "read_prediction_column": "reference",
    "read_reference": "reference",
    "import_saved_model": "saved_model",
    "import_reference": "served_elsewhere",
    "SIGNATURE": "spec",
    "Imported": "spec",
    "ImportSpec": "spec",
    "Layout": "spec",
    "SourceInput": "spec",
    "check_order": "task",
}

__all__ = [
    "SIGNATURE",
    "ImportSpec",
    "Imported",
    "Layout",
    "SourceInput",
    "check_order",
    "check_reference_rows",
    "content_hash",
    "import_reference",
    "import_saved_model",
    "read_prediction_column",
    "read_reference",
]


def __getattr__(name: str) -> Any:
    """A name of the face, imported from its module the first time it is asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
