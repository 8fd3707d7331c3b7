"""The typed copy of a batch's inputs (``prediction_batches.numbers`` and ``categories``).

A *layout* is the numeric and categorical feature names of a model version's contract (in contract order)
and each categorical's known categories (the contract's). A typed batch holds, in ``numbers``, for each of
its predictions in order one little-endian float64 per numeric feature and then one per categorical
feature: the index of its value in the layout's categories, ``-1`` for null/absent, ``-2`` for any other
text (an unseen category, ``""``); the texts of the predictions with a ``-2`` are in ``categories`` (one
``{"v": [every categorical value of the row]}`` JSON line per such prediction, in order; NULL when there is
none). ``layout`` (a 63-bit hash of the layout) is stored in every typed batch and the layout itself once in
``prediction_log_layouts``, so a reader knows what each position means.

A window reader concatenates the batches' ``numbers``, turns them into numpy with :func:`numpy.frombuffer`
and counts categories with :func:`numpy.bincount` (no per-prediction work in Python or in SQL).

Exactness: the typed values equal what a reader of the request's JSON documents computes (a number as a
float; missing -> NaN; a categorical's text), because a batch is typed only when every value is one whose
JSON text round-trips: a numeric value that is an ``int`` or ``float`` (not a bool; NaN and infinities are
NaN; ``-0.0`` as ``0``), or ``None``/absent; a categorical value that is a ``str`` or ``None``/absent. A batch
holding anything else (text in a numeric feature, a number in a categorical one: a request that bypassed the
contract) is written with its documents instead (``prediction_batches.inputs``).
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import orjson

_NUMBER = frozenset({int, float, type(None)})
_TEXT = frozenset({str, type(None)})
MISSING = -1  # the code of a null or absent categorical value
_NAN = float("nan")
OTHER = -2  # the code of a text outside the layout's categories (its text is in the row's ``categories``)


@dataclass(frozen=True)
class Layout:
    """Feature names in storage order, each categorical's known categories, and the layout's id."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    categories: tuple[tuple[str, ...], ...]
    id: int
    codes: tuple[dict[str, int], ...] = field(default=(), compare=False, repr=False)

    @property
    def width(self) -> int:
        """Float64 values per row."""
        return len(self.numeric) + len(self.categorical)

    def as_json(self) -> tuple[str, str, str]:
        """Numeric names, categorical names, categories: JSON arrays (``prediction_log_layouts``' columns)."""
        dumps = orjson.dumps
        return dumps(self.numeric).decode(), dumps(self.categorical).decode(), dumps(self.categories).decode()


def make_layout(
    numeric: Sequence[str], categorical: Sequence[str], categories: Sequence[Sequence[str]] | None = None
) -> Layout:
    """The layout of these names and categories (none known: every text is stored as text); its id is the
    first 63 bits of a BLAKE2b hash of the three lists."""
    known = tuple(tuple(c) for c in categories) if categories is not None else tuple(() for _ in categorical)
    if len(known) != len(categorical):
        raise ValueError(f"{len(known)} category lists for {len(categorical)} categorical features")
    key = orjson.dumps([list(numeric), list(categorical), known])
    digest = hashlib.blake2b(key, digest_size=8).digest()
    codes = tuple({text: i for i, text in enumerate(cats)} for cats in known)
    return Layout(tuple(numeric), tuple(categorical), known, int.from_bytes(digest, "little") >> 1, codes)


def layout_from_json(layout_id: int, numeric: str, categorical: str, categories: str) -> Layout:
    """A layout as ``prediction_log_layouts`` stores it."""
    layout = make_layout(orjson.loads(numeric), orjson.loads(categorical), orjson.loads(categories))
    return layout if layout.id == layout_id else Layout((), (), (), layout_id)  # not ours: reads nothing


KNOWN: dict[int, Layout] = {}
"""Layouts seen by this process, by id (the writer records each new one before the rows using it)."""


class Encoded(NamedTuple):
    """The typed copy of ``n`` rows: ``data`` is n x width little-endian float64, row by row;
    ``others[i]`` the ``{"v": [...]}`` text of row ``i`` when it holds a category outside the layout."""

    data: bytes
    others: list[str | None]

    def categories(self, start: int, end: int) -> str | None:
        """The texts of rows ``start..end-1`` that have one, newline-separated (None: no row has one)."""
        lines = [t for t in self.others[start:end] if t is not None]
        return "\n".join(lines) if lines else None


def encode_rows(layout: Layout, rows: Sequence[Mapping[str, Any]]) -> Encoded | None:
    """The typed copy of row documents (see :func:`encode_columns`)."""
    names = (*layout.numeric, *layout.categorical)
    return encode_columns(layout, {name: [row.get(name) for row in rows] for name in names}, len(rows))


def encode_columns(layout: Layout, columns: Mapping[str, Sequence[Any]], n: int) -> Encoded | None:
    """The typed copy of ``n`` rows from their values by feature (``columns[name][i]``: row ``i``'s value,
    None when absent).

    None when a value is of a type whose JSON text does not round-trip exactly (see the module docstring):
    those rows are logged with their documents instead.
    """
    KNOWN.setdefault(layout.id, layout)
    numbers = [columns[name] for name in layout.numeric]
    if not all(_NUMBER.issuperset(map(type, vals)) for vals in numbers):
        return None
    texts = [columns[name] for name in layout.categorical]
    if not all(_TEXT.issuperset(map(type, vals)) for vals in texts):
        return None
    codes = [
        [MISSING if v is None else index.get(v, OTHER) for v in vals]
        for vals, index in zip(texts, layout.codes, strict=True)
    ]
    if n < SMALL:
        return _encode_small(numbers, codes, texts, n)
    try:
        matrix = np.array([*numbers, *codes], dtype=np.float64).reshape(layout.width, n).T  # None -> NaN
    except OverflowError:  # an integer beyond a float's range
        return None
    matrix[~np.isfinite(matrix)] = np.nan  # the JSON document holds null for NaN and infinities
    matrix += 0.0  # -0.0 -> 0.0, as the document's numeric reads back
    other: list[str | None] = [None] * n
    if any(OTHER in c for c in codes):  # some text outside the layout's categories: those rows carry theirs
        for i in np.flatnonzero((matrix[:, len(numbers) :] == OTHER).any(axis=1)).tolist():
            other[i] = (b'{"v":' + orjson.dumps([vals[i] for vals in texts]) + b"}").decode()
    return Encoded(np.ascontiguousarray(matrix, dtype="<f8").tobytes(), other)


SMALL = 8
"""Below this many rows a request's copy is packed with :mod:`struct` (numpy's per-call overhead is larger
than the work)."""
_INF = float("inf")


def _encode_small(
    numbers: list[Sequence[Any]], codes: list[list[int]], texts: list[Sequence[Any]], n: int
) -> Encoded | None:
    flat: list[float] = []
    others: list[str | None] = []
    for i in range(n):
        for vals in numbers:
            v = vals[i]
            try:
                f = _NAN if v is None else float(v) + 0.0  # + 0.0: -0.0 -> 0.0
            except OverflowError:  # an integer beyond a float's range
                return None
            flat.append(f if f - f == 0.0 else _NAN)  # NaN (any payload) and infinities: the one NaN
        flat += [float(c[i]) for c in codes]
        other = None
        if any(c[i] == OTHER for c in codes):
            other = (b'{"v":' + orjson.dumps([vals[i] for vals in texts]) + b"}").decode()
        others.append(other)
    return Encoded(struct.pack(f"<{len(flat)}d", *flat), others)


def numbers_matrix(blob: bytes, rows: int, width: int) -> np.ndarray:
    """A range's concatenated ``numbers`` as a (rows, width) float64 matrix (no copy)."""
    return np.frombuffer(blob, dtype="<f8").reshape(rows, width)


def count_categories(
    layout: Layout, matrix: np.ndarray, texts: bytes, names: Sequence[str]
) -> dict[str, Counter[str | None]]:
    """Each named categorical's value counts in a range: codes counted with ``bincount``, the texts of the
    rows holding a ``-2`` (``texts``: their ``categories``, newline-separated, in row order) in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pajson

    if not names:
        return {}
    first = len(layout.numeric)
    block = matrix[:, first:]
    others = block == OTHER
    written = others.any(axis=1)  # the rows whose texts were written
    values: Any = None
    if written.any():
        schema = pa.schema([("v", pa.list_(pa.string()))])
        parse = pajson.ParseOptions(explicit_schema=schema)
        try:
            table = pajson.read_json(pa.py_buffer(texts), parse_options=parse)
        except pa.ArrowInvalid:  # a line longer than a block (1 MiB): one block of all the lines
            read = pajson.ReadOptions(block_size=len(texts) + 1)
            table = pajson.read_json(pa.py_buffer(texts), read_options=read, parse_options=parse)
        if table.num_rows != int(written.sum()):
            raise ValueError(f"{table.num_rows} category texts for {int(written.sum())} rows")
        values = table.column("v").combine_chunks()
    out: dict[str, Counter[str | None]] = {}
    for name in names:
        j = layout.categorical.index(name)
        known = layout.categories[j]
        tally = np.bincount(block[:, j].astype(np.int64) + 2, minlength=len(known) + 2)
        counts: Counter[str | None] = Counter()
        if tally[1]:
            counts[None] = int(tally[1])
        counts.update({known[i]: int(c) for i, c in enumerate(tally[2:].tolist()) if c})
        if tally[0]:
            rows = np.flatnonzero(others[written, j])  # among the written rows, those with a -2 here
            column = pc.list_element(values.take(pa.array(rows)), j)
            for item in pc.value_counts(column).to_pylist():
                counts[item["values"]] += int(item["counts"])
        out[name] = counts
    return out
