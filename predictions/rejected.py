"""The dead-letter file of the prediction log: rows the database refused for their values.

A row (a log batch: one request's predictions) PostgreSQL (or SQLite) cannot store (a NUL character inside a
text, a number out of range, ...) fails every write it is part of, whatever the database's health; the
writer splits such a write until each refused row is alone (:mod:`predictions.writer`) and appends the row
here, with the error, so the rows around it are written and the log keeps flowing. The file is ``<spool
slot>/rejected.jsonl`` (beside the spool's segments, which it is never mixed with): one JSON object per
line, ``rejected_at`` (RFC 3339), ``error`` (the database's message), ``source`` (``direct``, ``spool`` or
``cloudevents``: the row came from a request, from a spool replay or from a KServe pair the pairing
settled) and ``row`` (the row as a spool line holds it). Nothing replays it automatically: the same row
would be refused again. An operator reads it, fixes or drops the rows, and re-imports them (``driftwarden
predictions rejected PATH --import``: :meth:`DeadLetter.reimport`; see docs/operations.md, "Faults").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
from sqlalchemy import Engine

from predictions.batch import LogBatch, from_line, to_line
from predictions.service import classify_write_error, write_log_rows

FILE_NAME = "rejected.jsonl"


@dataclass(frozen=True)
class Rejected:
    """One row of the dead-letter file."""

    row: LogBatch
    error: str
    source: str
    rejected_at: datetime


def encode(row: LogBatch, *, error: str, source: str, now: datetime) -> bytes:
    """One dead-letter line (a value orjson cannot encode is written as its ``repr``: the line must exist)."""
    record = {"rejected_at": now.isoformat(), "error": error, "source": source, "row": to_line(row)}
    return orjson.dumps(record, default=repr, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def decode(line: bytes) -> Rejected:
    """Parse one dead-letter line."""
    record = orjson.loads(line)
    return Rejected(
        row=from_line(record["row"]),
        error=str(record["error"]),
        source=str(record["source"]),
        rejected_at=datetime.fromisoformat(record["rejected_at"]),
    )


class DeadLetter:
    """Append-only, fsynced ``rejected.jsonl`` in ``directory`` (or the file ``name`` there); thread-safe."""

    def __init__(self, directory: Path, *, name: str = FILE_NAME) -> None:
        self.path = directory / name
        self._lock = threading.Lock()

    def append(self, rejected: Sequence[tuple[LogBatch, str]], *, source: str) -> None:
        """Append ``(row, error)`` pairs and fsync; raises the disk's ``OSError`` (the file is then cut back
        to its previous size, so a torn line never glues onto the next append)."""
        if not rejected:
            return
        now = datetime.now(UTC)
        data = b"".join(encode(row, error=error, source=source, now=now) for row, error in rejected)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab", buffering=0) as fh:  # unbuffered: nothing left to flush at close
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # `predictions rejected --import` may be rewriting it
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

    def reimport(self, *, engine: Engine) -> tuple[int, int]:
        """Write the file's rows to the database, one by one; returns (predictions written, predictions
        refused again).

        A written row leaves the file (a prediction id the log already has counts as written: it is skipped);
        a row refused again stays, with the new error. The file is rewritten in place under its lock (the
        writer's appends wait). A database that is unavailable raises and leaves the file as it was; so does a
        line that does not parse (``ValueError`` naming its line number).
        """
        with open(self.path, "r+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            entries: list[Rejected] = []
            for number, line in enumerate(fh.read().splitlines(keepends=True), start=1):
                if not line.strip() or not line.endswith(b"\n"):
                    continue  # a blank or torn line
                try:
                    entries.append(decode(line))
                except (ValueError, TypeError, KeyError, IndexError) as exc:
                    raise ValueError(f"{self.path}:{number}: not a dead-letter row ({exc})") from exc
            now = datetime.now(UTC)
            kept: list[bytes] = []
            refused_again: list[tuple[Rejected, str]] = []
            for entry in entries:
                try:
                    write_log_rows(engine=engine, rows=[entry.row], idempotent=True)
                except Exception as exc:
                    if classify_write_error(exc) != "data":
                        raise
                    error = f"{type(exc).__name__}: {exc}"[:2000]
                    kept.append(encode(entry.row, error=error, source=entry.source, now=now))
                    refused_again.append((entry, error))
            fh.seek(0)
            fh.truncate()
            fh.write(b"".join(kept))
            fh.flush()
            os.fsync(fh.fileno())
        total = sum(entry.row.size for entry in entries)
        again = sum(entry.row.size for entry, _ in refused_again)
        return total - again, again

    def read(self) -> Iterator[Rejected]:
        """Every row of the file, oldest first (a torn last line is skipped)."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as fh:
            for line in fh:
                if line.endswith(b"\n"):
                    yield decode(line)
