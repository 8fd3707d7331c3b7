"""Log rows as Arrow tables in the lake's schema (:mod:`.layout`): one row per prediction, one row per label.

:func:`prediction_tables` turns :class:`~predictions.batch.LogBatch` rows (as the writer, the spool and the
database carry them) into one table per partition and feature layout: the fixed columns, then ``features``,
a struct of one field per feature of the batches' typed layout (:mod:`predictions.typed`): a numeric feature
as float64 (null: absent, NaN or infinite, as the typed copy stores them), a categorical one as
dictionary<int32, string> (the layout's categories, then any other text the rows hold). A batch without a
typed copy (its values did not fit, or its version has no layout) keeps its documents in ``inputs``; its
``features`` hold what of each document fits the layout of the same version (or, with none, a layout made
from the documents themselves). Numbers are written as float64 (this writer never narrows a numeric
feature to int64; readers accept both, as the layout says). No per-prediction Python work on the typed path
beyond the ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
import orjson
import pyarrow as pa

from predictions import typed
from predictions.batch import LogBatch, as_bytes
from predictions.lake import layout as lake

LayoutOf = Callable[[int], typed.Layout | None]
"""Finds a typed layout by id (None: unknown)."""


class PartitionTable(NamedTuple):
    """The rows of one partition and one feature layout."""

    table_name: str  # layout.PREDICTIONS or layout.LABELS
    model: str
    hour: datetime
    part: int  # 0, 1, ...: the partition's tables of different feature layouts
    table: pa.Table


class UnknownLayout(LookupError):
    """A batch's typed layout is not known to this process (yet): its rows cannot be decoded."""


def base_schema() -> list[pa.Field]:
    """The fixed columns of the predictions table (``features`` comes after them)."""
    return [
        pa.field("prediction_id", pa.string(), nullable=False),
        pa.field("request_id", pa.string()),
        pa.field("model_version", pa.int64(), nullable=False),
        pa.field("logged_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("latency_ms", pa.float64()),
        pa.field("status", pa.string()),
        pa.field("protocol", pa.string()),
        pa.field("source", pa.string()),
        pa.field("output", pa.float64()),
        pa.field("vector", pa.list_(pa.float64())),
        pa.field("flags", pa.list_(pa.string())),
        pa.field("inputs", pa.string()),
    ]


LABEL_SCHEMA = pa.schema(
    [
        pa.field("prediction_id", pa.string(), nullable=False),
        pa.field("label", pa.float64()),
        pa.field("received_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def prediction_tables(batches: Sequence[LogBatch], layout_of: LayoutOf) -> list[PartitionTable]:
    """``batches`` as one table per (model, hour, feature layout); raises :class:`UnknownLayout`."""
    groups: dict[tuple[str, datetime], list[LogBatch]] = {}
    for b in batches:
        groups.setdefault((b.model_name, lake.hour_of(b.logged_at)), []).append(b)
    out: list[PartitionTable] = []
    for (model, hour), members in sorted(groups.items()):
        for part, (feature_layout, rows) in enumerate(_by_layout(members, layout_of)):
            out.append(PartitionTable(lake.PREDICTIONS, model, hour, part, _table(rows, feature_layout)))
    return out


def _by_layout(batches: list[LogBatch], layout_of: LayoutOf) -> list[tuple[typed.Layout, list[LogBatch]]]:
    """Batches grouped by the layout of their ``features``: their typed layout, or (untyped) the layout of
    a typed batch of the same version, or one made from their documents."""
    found: dict[int, typed.Layout] = {}
    by_version: dict[int, int] = {}
    for b in batches:
        if b.layout is not None and b.layout not in found:
            known = layout_of(b.layout)
            if known is None:
                raise UnknownLayout(f"feature layout {b.layout} of model {b.model_name!r} is not known yet")
            found[b.layout] = known
        if b.layout is not None:
            by_version.setdefault(b.model_version, b.layout)
    groups: dict[int, list[LogBatch]] = {}
    for b in batches:
        key = b.layout if b.layout is not None else by_version.get(b.model_version)
        if key is None:
            guessed = _guess_layout(b.inputs or [])
            found.setdefault(guessed.id, guessed)
            key = guessed.id
        groups.setdefault(key, []).append(b)
    return [(found[key], rows) for key, rows in groups.items()]


def _guess_layout(documents: Sequence[Mapping[str, Any]]) -> typed.Layout:
    """A layout from documents: a key whose values are all numbers is numeric, any other categorical."""
    keys: dict[str, bool] = {}
    for doc in documents:
        for k, v in doc.items():
            numeric = v is None or (isinstance(v, int | float) and not isinstance(v, bool))
            keys[k] = keys.get(k, True) and numeric
    return typed.make_layout([k for k, n in keys.items() if n], [k for k, n in keys.items() if not n])


def _repeat(values: list[Any], sizes: np.ndarray, kind: pa.DataType) -> pa.Array:
    """One value per batch, repeated for each of its predictions."""
    return pa.array(values, kind).take(pa.array(np.repeat(np.arange(len(values)), sizes)))


def _table(rows: list[LogBatch], feature_layout: typed.Layout) -> pa.Table:
    sizes = np.fromiter((b.size for b in rows), dtype=np.int64, count=len(rows))
    n = int(sizes.sum())
    ids = [pid for b in rows for pid in b.ids()]
    outputs = np.frombuffer(b"".join(bytes.fromhex(b.outputs) for b in rows), dtype="<f8")
    columns: list[pa.Array] = [
        pa.array(ids, pa.string()),
        _repeat([b.request_id for b in rows], sizes, pa.string()),
        _repeat([b.model_version for b in rows], sizes, pa.int64()),
        _repeat([b.logged_at for b in rows], sizes, pa.timestamp("us", tz="UTC")),
        _repeat([b.latency_ms for b in rows], sizes, pa.float64()),
        _repeat([b.status for b in rows], sizes, pa.string()),
        _repeat([b.protocol for b in rows], sizes, pa.string()),
        _repeat([b.source for b in rows], sizes, pa.string()),
        pa.array(outputs, pa.float64()),
        _vectors(rows),
        pa.array([f for b in rows for f in (b.flags or [None] * b.size)], pa.list_(pa.string())),
        pa.array(_documents(rows), pa.string()),
        _features(rows, feature_layout, n),
    ]
    fields = [*base_schema(), pa.field(lake.FEATURES, columns[-1].type)]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _vectors(rows: list[LogBatch]) -> pa.Array:
    """A multi-class model's probability vectors (null for a batch without them)."""
    if all(b.vectors is None for b in rows):
        return pa.nulls(sum(b.size for b in rows), pa.list_(pa.float64()))
    offsets = [0]
    valid: list[bool] = []
    chunks: list[bytes] = []
    for b in rows:
        blob = as_bytes(b.vectors) or b""
        width = len(blob) // 8 // b.size if b.size else 0
        chunks.append(blob)
        for _ in range(b.size):
            offsets.append(offsets[-1] + width)
            valid.append(b.vectors is not None)
    values = pa.array(np.frombuffer(b"".join(chunks), dtype="<f8"), pa.float64())
    mask = pa.array([not v for v in valid], pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, mask=mask)


def _documents(rows: list[LogBatch]) -> list[str | None]:
    """Each prediction's document as JSON text where its batch keeps documents (None elsewhere)."""
    out: list[str | None] = []
    for b in rows:
        if b.inputs is None:
            out += [None] * b.size
        else:
            out += [orjson.dumps(doc).decode() for doc in b.inputs]
    return out


def _matrix(rows: list[LogBatch], feature_layout: typed.Layout, n: int) -> tuple[np.ndarray, list[Any]]:
    """The typed values of every prediction (n x width; untyped batches: from their documents) and the
    texts of the rows holding a category outside the layout (``-2``), by row."""
    width = feature_layout.width
    if all(b.layout == feature_layout.id and b.numbers is not None for b in rows):
        return _typed_matrix(rows, feature_layout, n)
    parts: list[np.ndarray] = []
    others: list[Any] = []
    for b in rows:
        if b.layout == feature_layout.id and b.numbers is not None:
            parts.append(typed.numbers_matrix(bytes.fromhex(b.numbers), b.size, width))
            texts = iter(b.categories.split("\n")) if b.categories else iter(())
            flagged = (parts[-1][:, len(feature_layout.numeric) :] == typed.OTHER).any(axis=1)
            others += [orjson.loads(next(texts))["v"] if f else None for f in flagged.tolist()]
            continue
        docs = [dict(d) if isinstance(d, Mapping) else {} for d in (b.inputs or [{}] * b.size)]
        encoded = _fit(feature_layout, docs)
        parts.append(typed.numbers_matrix(encoded.data, b.size, width))
        others += [orjson.loads(t)["v"] if t is not None else None for t in encoded.others]
    matrix = np.concatenate(parts) if parts else np.zeros((n, width))
    return matrix, others


def _typed_matrix(rows: list[LogBatch], feature_layout: typed.Layout, n: int) -> tuple[np.ndarray, list[Any]]:
    """:func:`_matrix` of batches that are all typed in ``feature_layout``: one buffer, one pass."""
    hexes = "".join(b.numbers for b in rows if b.numbers is not None)
    matrix = typed.numbers_matrix(bytes.fromhex(hexes), n, feature_layout.width)
    others: list[Any] = [None] * n
    texts = [b.categories for b in rows if b.categories]
    if texts:  # the rows holding a -2, in order, have one line each in their batches' ``categories``
        flagged = np.flatnonzero((matrix[:, len(feature_layout.numeric) :] == typed.OTHER).any(axis=1))
        lines = "\n".join(texts).split("\n")
        for i, line in zip(flagged.tolist(), lines, strict=True):
            others[i] = orjson.loads(line)["v"]
    return matrix, others


def _fit(feature_layout: typed.Layout, docs: list[dict[str, Any]]) -> typed.Encoded:
    """The typed copy of documents, a value that does not fit its feature read as absent."""
    columns: dict[str, list[Any]] = {}
    for name in feature_layout.numeric:
        vals = [d.get(name) for d in docs]
        columns[name] = [v if isinstance(v, int | float) and not isinstance(v, bool) else None for v in vals]
    for name in feature_layout.categorical:
        columns[name] = [v if isinstance(v, str) else None for v in (d.get(name) for d in docs)]
    encoded = typed.encode_columns(feature_layout, columns, len(docs))
    if encoded is None:  # an integer beyond a float's range: absent
        big = {
            k: [None if isinstance(v, int) and abs(v) > 2**1023 else v for v in vs]
            for k, vs in columns.items()
        }
        encoded = typed.encode_columns(feature_layout, big, len(docs))
    assert encoded is not None
    return encoded


def _features(rows: list[LogBatch], feature_layout: typed.Layout, n: int) -> pa.StructArray:
    matrix, others = _matrix(rows, feature_layout, n)
    arrays: list[pa.Array] = []
    names: list[str] = []
    for j, name in enumerate(feature_layout.numeric):
        col = np.ascontiguousarray(matrix[:, j])
        arrays.append(pa.array(col, pa.float64(), mask=np.isnan(col)))
        names.append(name)
    first = len(feature_layout.numeric)
    for j, name in enumerate(feature_layout.categorical):
        codes = matrix[:, first + j].astype(np.int64)
        known = list(feature_layout.categories[j])
        extra: dict[str, int] = {}
        for i in np.flatnonzero(codes == typed.OTHER).tolist():
            text = others[i][j] if others[i] is not None else None
            if text is None:
                codes[i] = typed.MISSING
            else:
                codes[i] = extra.setdefault(text, len(known) + len(extra))
        dictionary = pa.array(known + list(extra), pa.string())
        indices = pa.array(codes.astype(np.int32), pa.int32(), mask=codes == typed.MISSING)
        arrays.append(pa.DictionaryArray.from_arrays(indices, dictionary))
        names.append(name)
    if not arrays:  # a version without features: one null field keeps the struct writable
        arrays, names = [pa.nulls(n, pa.float64())], ["_none"]
    return pa.StructArray.from_arrays(arrays, names=names)


def label_tables(model: str, labels: Sequence[tuple[str, float, datetime]]) -> list[PartitionTable]:
    """``(prediction_id, label, received_at)`` rows of one model as one table per hour partition."""
    hours: dict[datetime, list[tuple[str, float, datetime]]] = {}
    for row in labels:
        hours.setdefault(lake.hour_of(row[2]), []).append(row)
    out: list[PartitionTable] = []
    for hour, rows in sorted(hours.items()):
        table = pa.Table.from_arrays(
            [
                pa.array([r[0] for r in rows], pa.string()),
                pa.array([float(r[1]) for r in rows], pa.float64()),
                pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC")),
            ],
            schema=LABEL_SCHEMA,
        )
        out.append(PartitionTable(lake.LABELS, model, hour, 0, table))
    return out
