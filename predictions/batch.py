"""A log batch: the predictions of one request as one row of ``prediction_batches``, column by column.

Prediction ids are time-ordered UUIDs whose last three hex digits count up within a run of up to 4096
(:func:`predictions.service.new_prediction_ids` hands out runs of up to 2048): a run is carried as its prefix
(the first 33 characters, ``id_prefix``), the tail of its first id (``id_low``) and its length (``size``), so
the id of the prediction at position ``i`` is ``id_prefix + f"{id_low + i:03x}"``. The table stores the
run's first id whole (``first_id``, :func:`first_id`: a 16-byte uuid on PostgreSQL), from which
:func:`ids_from` gives them all back. A request whose ids form several runs (more than 2048 rows, or ids that
do not count up) is stored as one batch per run (:func:`runs`).

The values travel between the request, the writer thread, the spool and the database as :class:`LogBatch`
tuples: binary columns as hex text (one JSON document per insert carries a whole write, and the spool's
lines are JSON), which :func:`as_bytes` turns back into bytes on the SQLite path and the readers. The
request id is the caller's (None when the caller named none: the answer's prediction ids are the link).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from predictions.models import LOG_COLUMNS

PREFIX = 33  # characters of an id before its counted tail
TAIL = 3  # hex digits of the counted tail
_HEX3 = tuple(f"{i:03x}" for i in range(4096))
_STORED = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NAN = float("nan")


class LogBatch(NamedTuple):
    """A batch as the writer and the spool carry it (field order = ``LOG_COLUMNS``)."""

    id_prefix: str
    id_low: int
    size: int
    request_id: str | None  # the caller's request id; None: the caller sent none
    model_name: str
    model_version: int
    logged_at: datetime
    latency_ms: float
    status: str
    protocol: str
    source: str
    layout: int | None  # the typed copy's layout (predictions/typed.py); None: no typed copy
    numbers: str | None  # hex: size x width little-endian float64, row by row
    categories: str | None  # the ``{"v": [...]}`` lines of the rows with a category outside the layout
    outputs: str  # hex: one little-endian float64 per prediction (NaN: none)
    vectors: str | None  # hex: size x K little-endian float64 (a multi-class model's probabilities)
    flags: list[list[str] | None] | None  # one list (or None) per prediction; None: no prediction has one
    inputs: list[dict[str, Any]] | None  # the row documents, where the typed copy cannot hold them exactly

    def ids(self) -> list[str]:
        """Its predictions' ids, in position order."""
        return ids_of(self.id_prefix, self.id_low, self.size)


assert LogBatch._fields == LOG_COLUMNS


def predictions_in(batches: Sequence[LogBatch]) -> int:
    """How many predictions ``batches`` hold."""
    return sum(b.size for b in batches)


def ids_of(prefix: str, low: int, size: int) -> list[str]:
    """The ids of a run."""
    return [prefix + tail for tail in _HEX3[low : low + size]]


def first_id(prefix: str, low: int) -> str:
    """A run's first id (the table's ``first_id``)."""
    return f"{prefix}{low:03x}"


def ids_from(first: str, size: int) -> list[str]:
    """The ids of a stored run: ``size`` ids counting up from ``first`` (as the table returns it)."""
    return ids_of(first[:PREFIX], int(first[PREFIX:], 16), size)


def split_id(prediction_id: str) -> tuple[str, int] | None:
    """An id's prefix and counted tail (None: not of the stored form, a UUID as lowercase canonical text)."""
    if len(prediction_id) != PREFIX + TAIL or _STORED.fullmatch(prediction_id) is None:
        return None
    return prediction_id[:PREFIX], int(prediction_id[PREFIX:], 16)


def runs(ids: Sequence[str]) -> list[tuple[int, int]] | None:
    """The ``[start, end)`` positions of each run of ``ids`` (same prefix, tail counting up by one); None when
    an id is not of the stored form. One run in the common case, checked from the ends."""
    n = len(ids)
    if n == 0:
        return []
    first, last = split_id(ids[0]), split_id(ids[-1])
    if first is not None and last is not None and first[0] == last[0] and last[1] - first[1] == n - 1:
        return [(0, n)]  # a single call of new_prediction_ids: counted in order, no gap possible
    out: list[tuple[int, int]] = []
    start = 0
    previous: tuple[str, int] | None = None
    for i, pid in enumerate(ids):
        parts = split_id(pid)
        if parts is None:
            return None
        if previous is not None and not (parts[0] == previous[0] and parts[1] == previous[1] + 1):
            out.append((start, i))
            start = i
        previous = parts
    out.append((start, n))
    return out


_PACKERS: dict[int, struct.Struct] = {}


def _packer(n: int) -> struct.Struct:
    found = _PACKERS.get(n)
    if found is None:
        found = struct.Struct(f"<{n}d")
        if n <= 4096:
            _PACKERS[n] = found
    return found


def pack_floats(values: Sequence[float | None]) -> str:
    """Floats as hex of little-endian float64 (None: NaN)."""
    pack = _packer(len(values)).pack
    try:
        return pack(*values).hex()
    except struct.error:  # a None among them
        return pack(*[_NAN if v is None else v for v in values]).hex()


def pack_vectors(vectors: Sequence[Sequence[float | None]], width: int) -> str:
    """Equal-width vectors as hex of little-endian float64, row by row (None or a shorter vector: NaN)."""
    flat: list[float] = []
    for row in vectors:
        if len(row) != width:
            flat += [_NAN] * width
        else:
            flat += [_NAN if v is None else v for v in row]
    return _packer(len(flat)).pack(*flat).hex()


def as_bytes(value: str | bytes | memoryview | None) -> bytes | None:
    """A binary column's value as bytes (hex text as the writer carries it, or bytes from a database)."""
    if value is None:
        return None
    if isinstance(value, str):
        return bytes.fromhex(value)
    return bytes(value)


def floats(blob: bytes | None, size: int) -> np.ndarray:
    """``size`` float64 from a binary column (NaN without one)."""
    if blob is None:
        return np.full(size, np.nan)
    return np.frombuffer(blob, dtype="<f8").astype(np.float64)


def to_line(batch: LogBatch) -> list[Any]:
    """A batch as a JSON array (the time as ISO 8601 text): a spool or dead-letter line's values."""
    return [*batch[:6], batch.logged_at.isoformat(), *batch[7:]]


def from_line(values: list[Any]) -> LogBatch:
    """A batch from :func:`to_line`'s values, or from a line an older version wrote (one prediction per line:
    ``[prediction_id, request_id, model_name, model_version, logged_at, inputs, probability, flags,
    latency_ms, status, protocol, layout, numbers, categories, outputs]``)."""
    if len(values) == len(LOG_COLUMNS):
        values[6] = datetime.fromisoformat(values[6])
        return LogBatch(*values)
    if not 11 <= len(values) <= 15:
        raise ValueError(f"a log line of {len(values)} values")
    pid, request_id, model, version, when, inputs, probability, flags, latency, status, protocol = values[:11]
    rest = [*values[11:], None, None, None, None][:4]
    layout, numbers, categories, outputs = rest
    parts = split_id(pid)
    if parts is None:
        raise ValueError(f"prediction id {pid!r} is not of the stored form")
    return LogBatch(
        parts[0],
        parts[1],
        1,
        request_id,
        model,
        version,
        datetime.fromisoformat(when),
        latency,
        status,
        protocol,
        "serve",
        layout if numbers is not None else None,
        numbers if layout is not None else None,
        categories if layout is not None else None,
        pack_floats([probability]),
        pack_vectors([outputs], len(outputs)) if isinstance(outputs, list) and outputs else None,
        None if flags is None else [flags],
        [inputs],
    )
