"""Batches of the log decoded into a chunk's columns: the typed copy where a range is typed in one layout, the
JSON documents otherwise."""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from sqlalchemy import Engine

from predictions import typed
from predictions.service import load_layouts
from predictions.windows.spec import Chunk


@dataclass
class Batches:
    """A range's batches in id order, column by column (binary columns as bytes); or, ``joined``, the
    range's columns concatenated (every batch typed in one layout: its id, the numbers, the texts)."""

    ids: np.ndarray  # int64
    sizes: np.ndarray  # int64
    layouts: list[int | None]
    numbers: list[bytes | None]
    categories: list[str | None]
    outputs: list[bytes]
    inputs: list[Any]  # the documents (a list, or JSON text on SQLite), None where typed
    joined: tuple[int, bytes, str | None] | None = None
    sources: list[str] = field(default_factory=list)  # each batch's source, in id order

    @property
    def total(self) -> int:
        return int(self.sizes.sum())

    def by_source(self, skip: int) -> Counter[str]:
        """The predictions by their batch's source (``skip``: the first batch's oldest ones left out)."""
        return count_sources(self.sources, self.sizes, skip)


def count_sources(sources: Sequence[str], sizes: np.ndarray, skip: int = 0) -> Counter[str]:
    """Predictions by source from each batch's source and size (``skip``: the first batch's oldest ones left
    out); sources without predictions are absent. One source (the usual range) is one sum."""
    if len(sources) != sizes.size:
        raise ValueError(f"{len(sources)} sources for {sizes.size} batches")
    distinct = set(sources)
    if len(distinct) <= 1:
        counts = Counter({s: int(sizes.sum()) for s in distinct})
    else:
        names = sorted(distinct)
        at = {name: i for i, name in enumerate(names)}
        codes = np.fromiter(map(at.__getitem__, sources), dtype=np.int64, count=sizes.size)
        totals = np.bincount(codes, weights=sizes, minlength=len(names))
        counts = Counter({name: int(n) for name, n in zip(names, totals.tolist(), strict=True)})
    if skip:
        counts[sources[0]] -= skip
    return +counts


def documents_of(value: Any, size: int) -> list[Any]:
    if isinstance(value, str | bytes):
        value = orjson.loads(value)
    return value if isinstance(value, list) and len(value) == size else [{}] * size


def numbers_of(docs: Sequence[Any], name: str) -> np.ndarray:
    out = np.full(len(docs), np.nan)
    for i, doc in enumerate(docs):
        value = doc.get(name) if isinstance(doc, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[i] = float(value)
        elif isinstance(value, str):  # a number sent as text reads as that number, as a JSON reader's cast
            with contextlib.suppress(ValueError):
                out[i] = float(value)
    return out


def _text_values(docs: Sequence[Any], name: str) -> Counter[str | None]:
    counts: Counter[str | None] = Counter()
    for doc in docs:
        value = doc.get(name) if isinstance(doc, dict) else None
        counts[
            None if value is None else value if isinstance(value, str) else orjson.dumps(value).decode()
        ] += 1
    return counts


class _Part:
    """The columns of a run of batches, appended in order and then trimmed of the window's skip."""

    def __init__(self, numeric: Sequence[str], categorical: Sequence[str]) -> None:
        self.numeric = numeric
        self.categorical = categorical
        self.columns: dict[str, list[np.ndarray]] = {name: [] for name in numeric}
        self.counts: dict[str, Counter[str | None]] = {name: Counter() for name in categorical}

    def typed(self, layout: typed.Layout, blob: bytes, texts: list[str], rows: int, skip: int) -> None:
        """Rows of one layout (``skip``: leave out the first rows, and their category texts)."""
        matrix = typed.numbers_matrix(blob, rows, layout.width)
        first = len(layout.numeric)
        if skip:
            dropped = int((matrix[:skip, first:] == typed.OTHER).any(axis=1).sum())
            matrix, texts = matrix[skip:], texts[dropped:]
        at = {name: i for i, name in enumerate(layout.numeric)}
        for name in self.numeric:
            j = at.get(name)
            self.columns[name].append(
                np.ascontiguousarray(matrix[:, j]) if j is not None else np.full(matrix.shape[0], np.nan)
            )
        held = [name for name in self.categorical if name in layout.categorical]
        if held:
            joined = "\n".join(texts).encode()
            for name, counts in typed.count_categories(layout, matrix, joined, held).items():
                self.counts[name].update(counts)
        for name in self.categorical:
            if name not in layout.categorical:
                self.counts[name][None] += matrix.shape[0]

    def documents(self, docs: Sequence[Any]) -> None:
        """Rows held as documents."""
        for name in self.numeric:
            self.columns[name].append(numbers_of(docs, name))
        for name in self.categorical:
            self.counts[name].update(_text_values(docs, name))

    def chunk(self, rows: int, predictions: np.ndarray, labels: np.ndarray, sources: Counter[str]) -> Chunk:
        columns = {
            name: np.concatenate(parts) if parts else np.empty(0) for name, parts in self.columns.items()
        }
        counts = {name: c for name, c in self.counts.items()}
        return Chunk(
            rows=rows,
            columns=columns,
            predictions=predictions,
            labels=labels,
            category_counts=counts,
            sources=sources,
        )


def decode_batches(
    got: Batches,
    layouts: dict[int, typed.Layout],
    *,
    numeric: Sequence[str],
    categorical: Sequence[str],
    skip: int,
    labels: np.ndarray | None,
) -> Chunk:
    """One chunk from a range's batches (``skip``: predictions of the first batch left out)."""
    total = got.total
    part = _Part(numeric, categorical)
    if got.joined is not None:
        layout_id, blob, joined_texts = got.joined
        texts = joined_texts.split("\n") if joined_texts else []
        part.typed(layouts[layout_id], blob, texts, total, skip)
    else:
        asked = (*numeric, *categorical)
        runs = itertools.groupby(range(len(got.layouts)), key=lambda i: batch_kind(got, layouts, i, asked))
        for kind, run in runs:
            members = list(run)
            trim = skip if members[0] == 0 else 0
            rows = int(got.sizes[members].sum())
            layout = layouts.get(kind) if isinstance(kind, int) else None
            if layout is not None:
                blob = b"".join(got.numbers[m] or b"" for m in members)
                texts = [
                    line
                    for m in members
                    if got.categories[m]
                    for line in (got.categories[m] or "").split("\n")
                ]
                part.typed(layout, blob, texts, rows, trim)
            else:
                docs = [doc for m in members for doc in documents_of(got.inputs[m], int(got.sizes[m]))]
                part.documents(docs[trim:])
    predictions = np.frombuffer(b"".join(got.outputs), dtype="<f8").astype(np.float64)
    if predictions.size != total:
        raise ValueError(f"{predictions.size} outputs for {total} predictions")
    found = labels if labels is not None else np.full(total, np.nan)
    return part.chunk(total - skip, predictions[skip:], found[skip:], got.by_source(skip))


def batch_kind(got: Batches, layouts: dict[int, typed.Layout], i: int, asked: Sequence[str]) -> int | str:
    """How batch ``i`` is decoded: its layout id, or ``"documents"`` (no typed copy, or a layout lacking an
    asked feature that the batch's documents may hold)."""
    layout_id = got.layouts[i]
    layout = layouts.get(layout_id) if layout_id is not None else None
    if layout is None or got.numbers[i] is None:
        return "documents"
    if got.inputs[i] is not None and not holds_all(layout, asked):
        return "documents"
    return layout.id


def holds_all(layout: typed.Layout, asked: Sequence[str]) -> bool:
    """The layout holds every asked feature."""
    return set(asked) <= {*layout.numeric, *layout.categorical}


def known_layouts(engine: Engine) -> dict[int, typed.Layout]:
    with engine.connect() as conn:
        return load_layouts(conn)
