"""A local append-only spool of log rows for when the database is slow or down.

Rows are JSON lines in numbered segment files (``<dir>/000000000001.jsonl``...). Appends go to the newest
segment; replay reads from the oldest, in order, and a segment is deleted once every row of it is in the
database. The read position is kept in ``<dir>/cursor`` (a crash between a committed replay and the cursor
update replays a few rows twice; the database ignores prediction ids it already has). A process that
restarts begins a new segment, so a torn last line of a crashed process is skipped, never appended to.

A spool folder belongs to one process: :meth:`Spool.claim` holds an exclusive lock on ``<dir>/lock`` for
the process's lifetime, and a second process on the same database (``serve --workers N``) takes the next
free slot, ``<dir>/worker-1``, ``<dir>/worker-2``, ... A slot's leftover rows are replayed by the next
process that claims it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

import orjson

from predictions.service import LogRow

log = logging.getLogger("driftwarden.predictions.spool")

SUFFIX = ".jsonl"


def encode_row(row: LogRow) -> bytes:
    """One spool line."""
    return orjson.dumps([*row[:4], row.logged_at.isoformat(), *row[5:]]) + b"\n"


def decode_row(line: bytes) -> LogRow:
    """Parse one spool line."""
    values = orjson.loads(line)
    values[4] = datetime.fromisoformat(values[4])
    return LogRow(*values)


@dataclass(frozen=True)
class SpoolBatch:
    """Rows read from the spool, and where the read ended."""

    rows: list[LogRow]
    segment: int
    end: int


class Spool:
    """Append-only segment files with a persistent read cursor; thread-safe."""

    def __init__(self, directory: Path, *, segment_bytes: int = 16 * 1024 * 1024) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._segments = sorted(int(p.stem) for p in directory.glob(f"*{SUFFIX}") if p.stem.isdigit())
        self._read_seg, self._read_off = self._load_cursor()
        self._head: IO[bytes] | None = None
        self._head_seg = 0
        self._head_size = 0
        self.corrupt_lines = 0
        self.pending_rows = self._count_pending()
        self._lock_file: IO[bytes] | None = None
        self._oldest: tuple[int, int, float] | None = None  # segment, offset, logged_at of the oldest row

    @classmethod
    def claim(cls, directory: Path, *, max_slots: int = 256) -> Spool:
        """The spool of ``directory``, or of its first ``worker-<k>`` slot that no live process holds."""
        for k in range(max_slots):
            slot = directory if k == 0 else directory / f"worker-{k}"
            slot.mkdir(parents=True, exist_ok=True)
            fh = open(slot / "lock", "ab")  # noqa: SIM115 (held until close)
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            spool = cls(slot)
            spool._lock_file = fh
            return spool
        raise RuntimeError(f"every spool slot under {directory} is taken ({max_slots} processes)")

    # -- paths and cursor -------------------------------------------------------------------------
    def _path(self, seg: int) -> Path:
        return self.directory / f"{seg:012d}{SUFFIX}"

    def _load_cursor(self) -> tuple[int, int]:
        try:
            seg_txt, off_txt = (self.directory / "cursor").read_text().split()
            seg, off = int(seg_txt), int(off_txt)
        except (OSError, ValueError):
            seg, off = 0, 0
        if not self._segments:
            return 0, 0
        if seg not in self._segments:
            return self._segments[0], 0
        self._segments = [s for s in self._segments if s >= seg]
        return seg, off

    def _save_cursor(self) -> None:
        tmp = self.directory / "cursor.tmp"
        tmp.write_text(f"{self._read_seg} {self._read_off}\n")
        os.replace(tmp, self.directory / "cursor")

    def _count_pending(self) -> int:
        total = 0
        for seg in self._segments:
            with open(self._path(seg), "rb") as fh:
                if seg == self._read_seg:
                    fh.seek(self._read_off)
                total += sum(1 for line in fh if line.endswith(b"\n"))
        return total

    # -- append ----------------------------------------------------------------------------------
    def append(self, rows: list[LogRow], *, sync: bool) -> None:
        """Append rows at the end; ``sync`` fsyncs before returning (durable on disk)."""
        if not rows:
            return
        data = b"".join(encode_row(r) for r in rows)
        with self._lock:
            if self._head is None or self._head_size >= self.segment_bytes:
                self._open_head()
            assert self._head is not None
            self._head.write(data)
            self._head.flush()
            if sync:
                os.fsync(self._head.fileno())
            self._head_size += len(data)
            self.pending_rows += len(rows)

    def _open_head(self) -> None:
        if self._head is not None:
            self._head.close()
        seg = (self._segments[-1] if self._segments else 0) + 1
        self._head = open(self._path(seg), "ab")  # noqa: SIM115 (kept open across appends)
        self._head_seg, self._head_size = seg, 0
        self._segments.append(seg)
        if len(self._segments) == 1:
            self._read_seg, self._read_off = seg, 0

    # -- replay ----------------------------------------------------------------------------------
    def peek(self, max_rows: int) -> SpoolBatch | None:
        """The oldest rows not yet replayed (up to ``max_rows``), or None when the spool is empty."""
        with self._lock:
            while self._segments:
                seg = self._segments[0]
                rows: list[LogRow] = []
                end = self._read_off
                with open(self._path(seg), "rb") as fh:
                    fh.seek(self._read_off)
                    for line in fh:
                        if not line.endswith(b"\n"):
                            break  # torn tail of a crashed process
                        end += len(line)
                        try:
                            rows.append(decode_row(line))
                        except (ValueError, TypeError):
                            self.corrupt_lines += 1
                            log.error("spool: skipping an unreadable line in %s", self._path(seg))
                        if len(rows) >= max_rows:
                            break
                if rows or end != self._read_off:
                    return SpoolBatch(rows=rows, segment=seg, end=end)
                if seg == self._head_seg:
                    return None  # everything appended so far has been replayed
                self._drop_first()
            return None

    def commit(self, batch: SpoolBatch) -> None:
        """Mark ``batch`` as stored in the database."""
        with self._lock:
            if not self._segments or batch.segment != self._segments[0]:
                return
            self._read_off = batch.end
            self.pending_rows = max(0, self.pending_rows - len(batch.rows))
            if batch.segment == self._head_seg and self._read_off >= self._head_size:
                if self._head is not None:
                    self._head.close()
                self._head, self._head_seg, self._head_size = None, 0, 0
                self._drop_first()
            elif (
                batch.segment != self._head_seg and self._read_off >= self._path(batch.segment).stat().st_size
            ):
                self._drop_first()
            self._save_cursor()

    def _drop_first(self) -> None:
        seg = self._segments.pop(0)
        self._path(seg).unlink(missing_ok=True)
        self._read_seg, self._read_off = (self._segments[0], 0) if self._segments else (0, 0)
        self._save_cursor()

    # -- state -----------------------------------------------------------------------------------
    @property
    def pending_bytes(self) -> int:
        """Bytes on disk not yet replayed."""
        with self._lock:
            total = 0
            for seg in self._segments:
                size = self._head_size if seg == self._head_seg else self._path(seg).stat().st_size
                total += size - (self._read_off if seg == self._read_seg else 0)
            return total

    def oldest_age_s(self, now: float) -> float:
        """Seconds since the oldest row still in the spool was logged (0 when the spool is empty)."""
        if not self.pending_rows:
            return 0.0
        with self._lock:
            for seg in self._segments:
                off = self._read_off if seg == self._read_seg else 0
                if self._oldest is not None and self._oldest[:2] == (seg, off):
                    return max(0.0, now - self._oldest[2])
                with contextlib.suppress(OSError), open(self._path(seg), "rb") as fh:
                    fh.seek(off)
                    for line in fh:
                        if not line.endswith(b"\n"):
                            break
                        try:
                            logged_at = decode_row(line).logged_at.timestamp()
                        except (ValueError, TypeError):
                            continue
                        self._oldest = (seg, off, logged_at)
                        return max(0.0, now - logged_at)
            return 0.0

    def close(self) -> None:
        """Close the open segment (pending rows stay on disk for the next start) and free the slot."""
        with self._lock:
            if self._head is not None:
                self._head.close()
                self._head = None
                self._head_seg = 0
            if self._lock_file is not None:
                self._lock_file.close()  # releases the flock
                self._lock_file = None
