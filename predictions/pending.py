"""A request's log rows, handed to the writer unbuilt: the writer thread builds them, a batch at a time.

The serving path answers a request as soon as its rows are queued (``fast``), so whatever it does to log them
is paid by every request on the event loop. :class:`RequestRows` holds what the request already has (its row
documents, their values by feature when the request came as columns, the outputs, the prediction ids, its
time) and :func:`build` makes the :class:`~predictions.service.LogRow` tuples in the writer thread. There the
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

from predictions.service import LogRow
from predictions.typed import Layout, encode_columns

log = logging.getLogger("driftwarden.predictions.pending")

Copies = list[tuple[str, str | None]]


@dataclass(slots=True)
class RequestRows:
    """One request's predictions, as the log will hold them (built by :func:`build`)."""

    model_name: str
    model_version: int
    logged_at: datetime
    request_id: str
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

    def __len__(self) -> int:
        return len(self.ids)

    def feature(self, name: str) -> Sequence[Any]:
        """Every row's value of ``name`` (None when absent)."""
        if self.columns is not None:
            return self.columns[name]
        return [row.get(name) for row in self.inputs]

    def log_rows(self, copies: Copies | None) -> list[LogRow]:
        """The rows, with these typed copies (None: without)."""
        layout = None if copies is None or self.layout is None else self.layout.id
        typed = copies if copies is not None else [(None, None)] * len(self.ids)
        vectors = self.outputs if self.outputs is not None else [None] * len(self.ids)
        return [
            LogRow(
                pid,
                self.request_id,
                self.model_name,
                self.model_version,
                self.logged_at,
                row,
                value,
                row_flags,
                self.latency_ms,
                self.status,
                self.protocol,
                layout,
                numbers,
                categories,
                vector,
            )
            for pid, row, value, row_flags, (numbers, categories), vector in zip(
                self.ids, self.inputs, self.values, self.flags, typed, vectors, strict=True
            )
        ]


def build(requests: Sequence[RequestRows]) -> list[list[LogRow]]:
    """Each request's log rows; the typed copies of the requests of one layout are encoded together."""
    copies: list[Copies | None] = [None] * len(requests)
    by_layout: dict[int, tuple[Layout, list[int]]] = {}
    for i, request in enumerate(requests):
        if request.layout is not None:
            by_layout.setdefault(request.layout.id, (request.layout, []))[1].append(i)
    for layout, members in by_layout.values():
        for i, encoded in zip(members, _encode_group(layout, [requests[i] for i in members]), strict=True):
            copies[i] = encoded
    return [request.log_rows(c) for request, c in zip(requests, copies, strict=True)]


def _encode_group(layout: Layout, requests: list[RequestRows]) -> list[Copies | None]:
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
            out: list[Copies | None] = []
            start = 0
            for r in requests:
                out.append(encoded[start : start + len(r)])
                start += len(r)
            return out
    return [_encode_one(layout, r) for r in requests]


def _encode_one(layout: Layout, request: RequestRows) -> Copies | None:
    """One request's typed copies; None (its rows are logged without) when encoding fails."""
    names = (*layout.numeric, *layout.categorical)
    try:
        return encode_columns(layout, {name: request.feature(name) for name in names}, len(request))
    except Exception:  # never lose the rows over their copy: the JSON documents hold the values
        log.exception(
            "prediction log: typed copy of request %s failed; logged without it", request.request_id
        )
        return None
