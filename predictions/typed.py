"""The typed copy of a log row's inputs, written beside the JSON document at insert time (PostgreSQL).

A row's numeric features are packed as little-endian float64 (``numbers``, bytea) and its categorical
features as one small JSON object, ``{"v": [their texts]}`` (``categories``), both in the order of a
*layout*: the numeric and categorical feature names of the model version's contract, in contract order.
A layout is identified by ``layout`` (a 63-bit hash of its names, stored in every typed row); its names
are stored once in ``prediction_log_layouts``, so a reader knows what each position means. The window
reader ships one binary value per id range instead of one JSON document per row and turns it into numpy
with :func:`numpy.frombuffer` (no per-row work in the client; no ``(inputs->>'f')::float8`` in the
server, ~150 ns a value).

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
from collections.abc import Mapping, Sequence
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


def encode_rows(layout: Layout, rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]] | None:
    """Each row's typed copy (see :func:`encode_columns`), from the row documents."""
    names = (*layout.numeric, *layout.categorical)
    return encode_columns(layout, {name: [row.get(name) for row in rows] for name in names}, len(rows))


def encode_columns(
    layout: Layout, columns: Mapping[str, Sequence[Any]], n: int
) -> list[tuple[str, str]] | None:
    """Each row's typed copy from the values of its documents by feature (``columns[name][i]``: row ``i``'s
    value, None when absent): (numbers as hex of little-endian float64, categories as JSON text
    ``{"v":[...]}``, the values in layout order).

    None when a value is of a type whose JSON text does not round-trip exactly (see the module docstring):
    those rows are logged without a typed copy.
    """
    KNOWN.setdefault(layout.id, layout)
    width = len(layout.numeric)
    hexed = ""
    if width:
        values = [columns[name] for name in layout.numeric]
        if not all(_NUMBER.issuperset(map(type, vals)) for vals in values):
            return None
        try:
            matrix = np.array(values, dtype=np.float64).T  # None -> NaN; row i is row i's numbers
        except OverflowError:  # an integer beyond a float's range
            return None
        matrix[~np.isfinite(matrix)] = np.nan  # the JSON document holds null for NaN and infinities
        matrix += 0.0  # -0.0 -> 0.0, as the document's numeric reads back
        hexed = np.ascontiguousarray(matrix, dtype="<f8").tobytes().hex()
    texts = [columns[name] for name in layout.categorical]
    if not all(_TEXT.issuperset(map(type, vals)) for vals in texts):
        return None
    dumps = orjson.dumps
    cats = (
        [(b'{"v":' + dumps(t) + b"}").decode() for t in zip(*texts, strict=True)]
        if texts
        else ['{"v":[]}'] * n
    )
    step = 16 * width
    return [(hexed[i * step : (i + 1) * step], cats[i]) for i in range(n)]


def category_columns(blob: bytes, width: int) -> list[Any]:
    """A range's categories (newline-separated ``{"v":[...]}``) as one Arrow string array per position."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pajson

    schema = pa.schema([("v", pa.list_(pa.string()))])
    table = pajson.read_json(pa.py_buffer(blob), parse_options=pajson.ParseOptions(explicit_schema=schema))
    flat = pc.list_flatten(table.column("v"))
    rows = table.num_rows
    if len(flat) != rows * width:
        raise ValueError(f"{len(flat)} category values for {rows} rows of {width}")
    return [pc.take(flat, pa.array(np.arange(j, rows * width, width))) for j in range(width)]


def numbers_matrix(blob: bytes, rows: int, width: int) -> np.ndarray:
    """A range's concatenated ``numbers`` as a (rows, width) float64 matrix (no copy)."""
    return np.frombuffer(blob, dtype="<f8").reshape(rows, width)
