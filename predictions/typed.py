"""The typed copy of a log row's inputs, written beside the JSON document at insert time (PostgreSQL).

A row's numeric features are packed as little-endian float64 (``numbers``, bytea) and its categorical
features as one small JSON object of their texts (``categories``), both in the order of a *layout*: the
numeric and categorical feature names of the model version's contract, in contract order. A layout is
identified by ``layout`` (a 63-bit hash of its names, stored in every typed row); its names are stored once
in ``prediction_log_layouts``, so a reader knows what each position means. The window reader ships one
binary value per id range instead of one JSON document per row and turns it into numpy with
:func:`numpy.frombuffer` (no per-row work in the client, ~10 ns a value in the server instead of ~150 for
``(inputs->>'f')::float8``).

Exactness: the typed values equal what the generic reader computes from ``inputs`` (``inputs->>'f'``
converted to a float; missing -> NaN), because a row is typed only when every value is one whose JSON text
round-trips: a numeric value that is an ``int`` or ``float`` (not a bool; NaN and infinities are written as
JSON ``null`` by the log, so NaN here; ``-0.0`` as ``0``: PostgreSQL's ``numeric`` has no negative zero),
or ``None``/absent; a categorical value that is a ``str`` or ``None``/absent. A row holding anything else
(text in a numeric feature, a number in a categorical one: a row that bypassed the contract) is written
without the typed copy and read from its JSON document, like every row logged before the typed columns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

_NUMBER = frozenset({int, float, type(None)})
_TEXT = frozenset({str, type(None)})


@dataclass(frozen=True)
class Layout:
    """The numeric and categorical feature names of typed rows, in storage order, and their id."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    id: int

    def names_json(self) -> tuple[str, str]:
        """The numeric and categorical names as JSON arrays (how ``prediction_log_layouts`` stores them)."""
        return orjson.dumps(self.numeric).decode(), orjson.dumps(self.categorical).decode()


def make_layout(numeric: Sequence[str], categorical: Sequence[str]) -> Layout:
    """The layout of these names (its id: the first 63 bits of a BLAKE2b hash of both lists)."""
    key = orjson.dumps([list(numeric), list(categorical)])
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return Layout(tuple(numeric), tuple(categorical), int.from_bytes(digest, "little") >> 1)


KNOWN: dict[int, Layout] = {}
"""Layouts seen by this process, by id (the writer records each new one before the rows using it)."""


def encode_rows(layout: Layout, rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]] | None:
    """Each row's typed copy: (numbers as hex of little-endian float64, categories as JSON text).

    None when a value is of a type whose JSON text does not round-trip exactly (see the module docstring):
    those rows are logged without a typed copy.
    """
    KNOWN.setdefault(layout.id, layout)
    width = len(layout.numeric)
    hexed = ""
    if width:
        values = [[row.get(name) for name in layout.numeric] for row in rows]
        if not all(_NUMBER.issuperset(map(type, vals)) for vals in values):
            return None
        try:
            matrix = np.array(values, dtype=np.float64)  # None -> NaN
        except OverflowError:  # an integer beyond a float's range
            return None
        matrix[~np.isfinite(matrix)] = np.nan  # the JSON document holds null for NaN and infinities
        matrix += 0.0  # -0.0 -> 0.0, as the document's numeric reads back
        hexed = matrix.astype("<f8", copy=False).tobytes().hex()
    step = 16 * width
    out: list[tuple[str, str]] = []
    for i, row in enumerate(rows):
        cats = {name: row.get(name) for name in layout.categorical}
        if not _TEXT.issuperset(map(type, cats.values())):
            return None
        out.append((hexed[i * step : (i + 1) * step], orjson.dumps(cats).decode()))
    return out


def numbers_matrix(blob: bytes, rows: int, width: int) -> np.ndarray:
    """A range's concatenated ``numbers`` as a (rows, width) float64 matrix (no copy)."""
    return np.frombuffer(blob, dtype="<f8").reshape(rows, width)
