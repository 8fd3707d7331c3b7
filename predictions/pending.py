"""A request's predictions, handed to the writer unbuilt: the writer thread builds their batch rows.

The serving path answers a request as soon as its rows are queued (``fast``), so whatever it does to log them
is paid by every request on the event loop. :class:`RequestRows` holds what the request already has (its row
documents, their values by feature when the request came as columns, the outputs, the prediction ids, its
time) and :func:`build` makes the :class:`~predictions.batch.LogBatch` tuples in the writer thread. There the
typed copies (:mod:`predictions.typed`) of all the queued requests of one layout are encoded in one numpy
pass instead of one small pass per request; a request whose values have no exact typed copy is encoded
alone, so it never takes the copy from the others (the copies are the same as a request's own pass gives:
``tests/predictions/test_pending.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import Any

from predictions.batch import LogBatch, pack_floats, pack_vectors, runs
from predictions.typed import Encoded, Layout, encode_columns

log = logging.getLogger("driftwarden.predictions.pending")

_NAMES: dict[int, frozenset[str]] = {}


def _names(layout: Layout) -> frozenset[str]:
    """Every feature a layout holds."""
    found = _NAMES.get(layout.id)
    if found is None:
        found = _NAMES[layout.id] = frozenset((*layout.numeric, *layout.categorical))
    return found


@dataclass(slots=True)
class RequestRows:
    """One request's predictions, as the log will hold them (built by :func:`build`)."""

    model_name: str
    model_version: int
    logged_at: datetime
    request_id: str | None  # the caller's request id (None: the caller sent none)
    protocol: str
    latency_ms: float
    status: str
    ids: list[str]
    inputs: list[dict[str, Any]]  # the row documents
    values: Sequence[float | None]  # the output per row
    flags: list[list[str] | None]
    layout: Layout | None  # None: no typed copy
    # the documents' values by feature (``columns[name][i]``: row i's value, None when absent), when the
    # request came as columns; None: taken from ``inputs``
    columns: Mapping[str, Sequence[Any]] | None = None
    # each row's whole answer when it is more than one number (a multi-class vector); None: ``values`` is it
    outputs: Sequence[list[float | None]] | None = None
    source: str = "serve"
    spans: list[tuple[int, int]] | None = None  # the ids' runs (set by the check below)

    def __post_init__(self) -> None:
        # checked here, on the request path: building them in the writer thread can then not fail
        n = len(self.ids)
        if not len(self.inputs) == len(self.values) == len(self.flags) == n:
            raise ValueError(
                f"{n} prediction ids for {len(self.inputs)} rows, {len(self.values)} outputs, "
                f"{len(self.flags)} flag lists"
            )
        if self.outputs is not None and len(self.outputs) != n:
            raise ValueError(f"{n} prediction ids for {len(self.outputs)} output vectors")
        self.spans = runs(self.ids)
        if self.spans is None:
            raise ValueError("prediction ids must be UUIDs ending in three hex digits")

    def __len__(self) -> int:
        return len(self.ids)

    def feature(self, name: str) -> Sequence[Any]:
        """Every row's value of ``name`` (None when absent)."""
        if self.columns is not None:
            return self.columns[name]
        return [row.get(name) for row in self.inputs]

    def _documents_needed(self, encoded: Encoded | None) -> bool:
        """Whether the row documents must be logged: no typed copy, or a key the layout does not hold."""
        if encoded is None or self.layout is None:
            return True
        names = _names(self.layout)
        if self.columns is not None:
            return not names.issuperset(self.columns)
        return not all(names.issuperset(row) for row in self.inputs)

    def log_batches(self, encoded: Encoded | None) -> list[LogBatch]:
        """The batch rows (one per run of ids), with this typed copy (None: the documents instead)."""
        documents = self._documents_needed(encoded)
        layout = self.layout.id if encoded is not None and self.layout is not None else None
        width = 8 * self.layout.width if layout is not None and self.layout is not None else 0
        vectors = self.outputs
        k = max((len(v) for v in vectors), default=0) if vectors is not None else 0
        out: list[LogBatch] = []
        for start, end in self.spans or []:
            first = self.ids[start]
            flags = self.flags[start:end]
            out.append(
                LogBatch(
                    first[:-3],
                    int(first[-3:], 16),
                    end - start,
                    self.request_id,
                    self.model_name,
                    self.model_version,
                    self.logged_at,
                    self.latency_ms,
                    self.status,
                    self.protocol,
                    self.source,
                    layout,
                    encoded.data[start * width : end * width].hex()
                    if encoded is not None and layout is not None
                    else None,
                    encoded.categories(start, end) if encoded is not None and layout is not None else None,
                    pack_floats(self.values[start:end]),
                    pack_vectors(vectors[start:end], k) if vectors is not None and k else None,
                    flags if flags.count(None) != len(flags) else None,
                    self.inputs[start:end] if documents else None,
                )
            )
        return out


def build(requests: Sequence[RequestRows]) -> list[list[LogBatch]]:
    """Each request's batch rows; the typed copies of the requests of one layout are encoded together."""
    copies: list[Encoded | None] = [None] * len(requests)
    by_layout: dict[int, tuple[Layout, list[int]]] = {}
    for i, request in enumerate(requests):
        if request.layout is not None:
            by_layout.setdefault(request.layout.id, (request.layout, []))[1].append(i)
    for layout, members in by_layout.values():
        for i, encoded in zip(members, _encode_group(layout, [requests[i] for i in members]), strict=True):
            copies[i] = encoded
    return [request.log_batches(c) for request, c in zip(requests, copies, strict=True)]


def _encode_group(layout: Layout, requests: list[RequestRows]) -> list[Encoded | None]:
    """The typed copies of requests of one layout: one pass over all of them, or (when some value has no
    exact copy) one pass per request."""
    if len(requests) > 1:
        names = (*layout.numeric, *layout.categorical)
        total = sum(len(r) for r in requests)
        columns = {name: list(chain.from_iterable(r.feature(name) for r in requests)) for name in names}
        try:
            encoded = encode_columns(layout, columns, total)
        except Exception:  # one request's value broke the pass: each is encoded alone below
            encoded = None
        if encoded is not None:
            out: list[Encoded | None] = []
            start = 0
            step = 8 * layout.width
            for r in requests:
                end = start + len(r)
                out.append(Encoded(encoded.data[start * step : end * step], encoded.others[start:end]))
                start = end
            return out
    return [_encode_one(layout, r) for r in requests]


def _encode_one(layout: Layout, request: RequestRows) -> Encoded | None:
    """One request's typed copy; None (its documents are logged instead) when encoding fails."""
    names = (*layout.numeric, *layout.categorical)
    try:
        return encode_columns(layout, {name: request.feature(name) for name in names}, len(request))
    except Exception:  # never lose the rows over their copy: the documents hold the values
        log.exception(  # the request by its caller's id, else by its first prediction id
            "prediction log: typed copy of request %s failed; logged with its documents",
            request.request_id or (request.ids[0] if request.ids else "?"),
        )
        return None
