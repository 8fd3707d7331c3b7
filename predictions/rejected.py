"""The dead-letter file of the prediction log: rows the database refused for their values.

A row PostgreSQL (or SQLite) cannot store (a NUL character inside an ``inputs`` string, a number out of
range, ...) fails every write of its batch, whatever the database's health; the writer splits such a batch
until each refused row is alone (:mod:`predictions.writer`) and appends the row here, with the error, so
the rows around it are written and the log keeps flowing. The file is ``<spool slot>/rejected.jsonl``
(beside the spool's segments, which it is never mixed with): one JSON object per line, ``rejected_at``
(RFC 3339), ``error`` (the database's message), ``source`` (``direct`` or ``spool``: the row came from a
request or from a spool replay) and ``row`` (the row as a spool line holds it). Nothing replays it
automatically: the same row would be refused again. An operator reads it, fixes or drops the rows, and
re-imports them (docs/operations.md, "Faults").
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from predictions.service import LogRow

FILE_NAME = "rejected.jsonl"


@dataclass(frozen=True)
class Rejected:
    """One row of the dead-letter file."""

    row: LogRow
    error: str
    source: str
    rejected_at: datetime


def _row_values(row: LogRow) -> list[Any]:
    return [*row[:4], row.logged_at.isoformat(), *row[5:]]


def encode(row: LogRow, *, error: str, source: str, now: datetime) -> bytes:
    """One dead-letter line (a value orjson cannot encode is written as its ``repr``: the line must exist)."""
    record = {"rejected_at": now.isoformat(), "error": error, "source": source, "row": _row_values(row)}
    return orjson.dumps(record, default=repr, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def decode(line: bytes) -> Rejected:
    """Parse one dead-letter line."""
    record = orjson.loads(line)
    values = record["row"]
    values[4] = datetime.fromisoformat(values[4])
    return Rejected(
        row=LogRow(*values),
        error=str(record["error"]),
        source=str(record["source"]),
        rejected_at=datetime.fromisoformat(record["rejected_at"]),
    )


class DeadLetter:
    """Append-only, fsynced ``rejected.jsonl`` in ``directory``; thread-safe."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self._lock = threading.Lock()

    def append(self, rejected: Sequence[tuple[LogRow, str]], *, source: str) -> None:
        """Append ``(row, error)`` pairs and fsync; raises the disk's ``OSError`` (the file is then cut back
        to its previous size, so a torn line never glues onto the next append)."""
        if not rejected:
            return
        now = datetime.now(UTC)
        data = b"".join(encode(row, error=error, source=source, now=now) for row, error in rejected)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab", buffering=0) as fh:  # unbuffered: nothing left to flush at close
                size = fh.seek(0, os.SEEK_END)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[fh.write(view) or 0 :]
                    os.fsync(fh.fileno())
                except OSError:
                    with contextlib.suppress(OSError):
                        fh.truncate(size)
                    raise

    def read(self) -> Iterator[Rejected]:
        """Every row of the file, oldest first (a torn last line is skipped)."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as fh:
            for line in fh:
                if line.endswith(b"\n"):
                    yield decode(line)
