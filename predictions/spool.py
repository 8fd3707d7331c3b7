"""A local append-only spool of log rows for when the database is slow or down.

Rows are JSON lines in numbered segment files (``<dir>/000000000001.jsonl``...), one log batch (a request's
predictions, :class:`~predictions.batch.LogBatch`) per line; a line an older version wrote (one prediction)
is read as a batch of one. Row counts (``pending_rows``, ``peek``'s ``max_rows``) count predictions.
Appends go to the newest segment; replay reads from the oldest, in order, and a segment is deleted once
every row of it is in the database. The read position is kept in ``<dir>/cursor`` (a crash between a
committed replay and the cursor update replays a few rows twice; the database ignores batches it already
has). A process that
restarts begins a new segment, so a torn last line of a crashed process is skipped, never appended to.

A spool folder belongs to one process: :meth:`Spool.claim` holds an exclusive lock on ``<dir>/lock`` for
the process's lifetime, and a second process on the same database (``serve --workers N``) takes the next
free slot, ``<dir>/worker-1``, ``<dir>/worker-2``, ... A slot's leftover rows are replayed by the next
process that claims it, or adopted: a process also takes (non-blocking) the lock of every other slot no live
process holds that still has rows (:meth:`Spool.adopt`; at the claim, and again whenever its writer asks),
replays those rows in the slot's order before its own, and frees the slot once it is empty. So rows left in
``worker-2`` by a server that ran three workers reach the database after a restart with one worker, and
the pending counts of the adopting process include them until they do.

A full disk: ``max_bytes`` caps the bytes of this slot not yet replayed (setting ``spool_max_bytes``); an
append past it raises :class:`SpoolFull` and writes nothing. An append the disk refuses (``ENOSPC``, or
any other ``OSError``) is cut back to the segment's previous size and the next append starts a new
segment, so a half-written line never glues onto the next row. Either way the caller counts the rows as
lost (see :class:`~predictions.writer.LogWriter`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import orjson

from predictions.batch import LogBatch, from_line, predictions_in, to_line

log = logging.getLogger("driftwarden.predictions.spool")

SUFFIX = ".jsonl"


def _slot_number(path: Path) -> int:
    """``worker-<k>`` -> k (anything else sorts last)."""
    tail = path.name.removeprefix("worker-")
    return int(tail) if tail.isdigit() else 1 << 30


def encode_row(row: LogBatch) -> bytes:
    """One spool line (one batch)."""
    return orjson.dumps(to_line(row)) + b"\n"


def decode_row(line: bytes) -> LogBatch:
    """Parse one spool line (an older version's line of one prediction too)."""
    return from_line(orjson.loads(line))


class SpoolFull(OSError):
    """The spool holds ``max_bytes`` not yet replayed: the rows were not appended."""


def spool_dir(root: Path, url: str) -> Path:
    """The spool folder of one database under ``root`` (setting ``spool_path``), so that replays never
    cross databases: every process writing to that database (servers, imports) shares its slots."""
    return root / hashlib.sha256(url.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class SpoolBatch:
    """Rows read from the spool, and where the read ended."""

    rows: list[LogBatch]
    segment: int
    end: int
    source: Spool | None = None  # the adopted slot the rows come from (None: the spool's own slot)


class Spool:
    """Append-only segment files with a persistent read cursor; thread-safe."""

    def __init__(
        self, directory: Path, *, segment_bytes: int = 16 * 1024 * 1024, max_bytes: int | None = None
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes  # cap on this slot's bytes not yet replayed (None: the disk's size)
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._segments = sorted(int(p.stem) for p in directory.glob(f"*{SUFFIX}") if p.stem.isdigit())
        self._read_seg, self._read_off = self._load_cursor()
        self._head: IO[bytes] | None = None
        self._head_seg = 0
        self._head_size = 0
        self.corrupt_lines = 0
        self._pending = self._count_pending()  # rows of this slot not yet replayed
        self._lock_file: IO[bytes] | None = None
        self._oldest: tuple[int, int, float] | None = None  # segment, offset, logged_at of the oldest row
        self._root: Path | None = None  # the folder of every slot (set by claim): where to look for orphans
        self._adopted: list[Spool] = []  # other slots' spools this process holds until they are replayed
        self._adopted_lock = threading.Lock()

    @classmethod
    def claim(cls, directory: Path, *, max_slots: int = 256, max_bytes: int | None = None) -> Spool:
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
            spool = cls(slot, max_bytes=max_bytes)
            spool._lock_file = fh
            spool._root = directory
            spool.adopt()
            return spool
        raise RuntimeError(f"every spool slot under {directory} is taken ({max_slots} processes)")

    def adopt(self) -> int:
        """Take over every other slot under the claimed folder that no live process holds and that has rows.

        Each such slot's lock is taken without waiting (a slot held by a live process is left alone); a slot
        with no row left is freed at once. Returns the rows adopted by this call.
        """
        if self._root is None or self._lock_file is None:
            return 0  # not a claimed spool: there are no sibling slots
        with self._adopted_lock:
            held = {self.directory.resolve(), *(a.directory.resolve() for a in self._adopted)}
        slots = [self._root, *sorted(self._root.glob("worker-*"), key=_slot_number)]
        added = 0
        for slot in slots:
            if slot.resolve() in held or not slot.is_dir() or not any(slot.glob(f"*{SUFFIX}")):
                continue
            fh = open(slot / "lock", "ab")  # noqa: SIM115 (held until the slot is replayed or closed)
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue  # a live process owns it and replays it itself
            try:
                orphan = Spool(slot, segment_bytes=self.segment_bytes)
            except OSError as exc:  # an unreadable slot must not stop this process: try again next time
                fh.close()
                log.error("spool: cannot read the slot %s to adopt it: %s", slot, exc)
                continue
            orphan._lock_file = fh
            if not orphan._pending:
                orphan.close()
                continue
            log.warning("spool: adopting %d rows left in %s by a process that is gone", orphan._pending, slot)
            with self._adopted_lock:
                self._adopted.append(orphan)
            added += orphan._pending
        return added

    def _adopted_spools(self) -> list[Spool]:
        with self._adopted_lock:
            return list(self._adopted)

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
                for line in fh:
                    if line.endswith(b"\n"):
                        try:
                            total += decode_row(line).size
                        except (ValueError, TypeError):
                            total += 1  # skipped (and counted) when replayed
        return total

    # -- append ----------------------------------------------------------------------------------
    def append(self, rows: list[LogBatch], *, sync: bool) -> None:
        """Append rows at the end; ``sync`` fsyncs before returning (durable on disk).

        Raises :class:`SpoolFull` past ``max_bytes`` and the disk's ``OSError`` (``ENOSPC``...); either way
        none of the rows is in the spool.
        """
        if not rows:
            return
        data = b"".join(encode_row(r) for r in rows)
        with self._lock:
            if self.max_bytes is not None and self._own_pending_bytes() + len(data) > self.max_bytes:
                raise SpoolFull(f"the spool {self.directory} holds its cap of {self.max_bytes} bytes")
            if self._head is None or self._head_size >= self.segment_bytes:
                self._open_head()
            assert self._head is not None
            try:
                self._head.write(data)
                self._head.flush()
                if sync:
                    os.fsync(self._head.fileno())
            except OSError:
                self._abandon_head()
                raise
            self._head_size += len(data)
            self._pending += predictions_in(rows)

    def _abandon_head(self) -> None:
        """After a failed append: cut the head segment back to its last whole row; the next append opens a
        new segment."""
        assert self._head is not None
        with contextlib.suppress(OSError):  # closing flushes what is buffered: the disk may refuse it again
            self._head.close()
        with contextlib.suppress(OSError):
            os.truncate(self._path(self._head_seg), self._head_size)
        self._head, self._head_seg, self._head_size = None, 0, 0

    def _own_pending_bytes(self) -> int:
        total = 0
        for seg in self._segments:
            size = self._head_size if seg == self._head_seg else self._path(seg).stat().st_size
            total += size - (self._read_off if seg == self._read_seg else 0)
        return total

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
        """The oldest rows not yet replayed (up to ``max_rows``), or None when the spool is empty.

        Adopted slots come first, one after the other, each in its own order; then this slot's rows.
        """
        return self.peek_adopted(max_rows) or self._peek_own(max_rows)

    def peek_adopted(self, max_rows: int) -> SpoolBatch | None:
        """The oldest rows of the adopted slots (see :meth:`peek`), or None when they hold none."""
        for orphan in self._adopted_spools():
            batch = orphan._peek_own(max_rows)
            if batch is not None:
                return SpoolBatch(rows=batch.rows, segment=batch.segment, end=batch.end, source=orphan)
            self._release(orphan)  # nothing left (only torn or already-replayed lines): free the slot
        return None

    def _peek_own(self, max_rows: int) -> SpoolBatch | None:
        with self._lock:
            while self._segments:
                seg = self._segments[0]
                rows: list[LogBatch] = []
                count = 0  # the predictions in rows
                end = self._read_off
                with open(self._path(seg), "rb") as fh:
                    fh.seek(self._read_off)
                    for line in fh:
                        if not line.endswith(b"\n"):
                            break  # torn tail of a crashed process
                        end += len(line)
                        try:
                            rows.append(decode_row(line))
                            count += rows[-1].size
                        except (ValueError, TypeError):
                            self.corrupt_lines += 1
                            log.error("spool: skipping an unreadable line in %s", self._path(seg))
                        if count >= max_rows:
                            break
                if rows or end != self._read_off:
                    return SpoolBatch(rows=rows, segment=seg, end=end)
                if seg == self._head_seg:
                    return None  # everything appended so far has been replayed
                self._drop_first()
            return None

    def scan(self, max_rows: int) -> list[SpoolBatch]:
        """This slot's rows not yet replayed, from the cursor on across segments (one batch per segment), up
        to about ``max_rows``, without moving the cursor: :meth:`commit` each batch in order once stored (the
        lake's write-ahead use, :mod:`predictions.lake.sink`, stores many batches as one file)."""
        out: list[SpoolBatch] = []
        count = 0
        with self._lock:
            for seg in list(self._segments):
                start = self._read_off if seg == self._read_seg else 0
                rows: list[LogBatch] = []
                end = start
                with open(self._path(seg), "rb") as fh:
                    fh.seek(start)
                    for line in fh:
                        if not line.endswith(b"\n") or count >= max_rows:
                            break  # a torn tail, or enough
                        end += len(line)
                        try:
                            rows.append(decode_row(line))
                            count += rows[-1].size
                        except (ValueError, TypeError):
                            self.corrupt_lines += 1
                            log.error("spool: skipping an unreadable line in %s", self._path(seg))
                if end != start:
                    out.append(SpoolBatch(rows=rows, segment=seg, end=end))
                if count >= max_rows:
                    break
        return out

    @property
    def cursor(self) -> tuple[int, int]:
        """The read position (segment, offset): where the rows not yet replayed begin."""
        with self._lock:
            return self._read_seg, self._read_off

    def commit(self, batch: SpoolBatch) -> None:
        """Mark ``batch`` as stored in the database."""
        if batch.source is not None:
            batch.source.commit(replace(batch, source=None))
            if not batch.source._pending:
                self._release(batch.source)
            return
        with self._lock:
            if not self._segments or batch.segment != self._segments[0]:
                return
            self._read_off = batch.end
            self._pending = max(0, self._pending - predictions_in(batch.rows))
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

    def _release(self, orphan: Spool) -> None:
        """Free an adopted slot (its lock; whatever is left on disk stays for the next claim)."""
        with self._adopted_lock:
            if orphan not in self._adopted:
                return
            self._adopted.remove(orphan)
        orphan.close()
        log.info("spool: replayed and freed the adopted slot %s", orphan.directory)

    # -- state -----------------------------------------------------------------------------------
    @property
    def pending_rows(self) -> int:
        """Rows not yet replayed: this slot's and those of the slots it adopted."""
        return self._pending + sum(a._pending for a in self._adopted_spools())

    @property
    def pending_bytes(self) -> int:
        """Bytes on disk not yet replayed (adopted slots included)."""
        with self._lock:
            total = self._own_pending_bytes()
        return total + sum(a.pending_bytes for a in self._adopted_spools())

    def oldest_age_s(self, now: float) -> float:
        """Seconds since the oldest row still in the spool was logged (0 when the spool is empty)."""
        return max([self._oldest_age_own(now), *(a._oldest_age_own(now) for a in self._adopted_spools())])

    def _oldest_age_own(self, now: float) -> float:
        if not self._pending:
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
        """Close the open segment (pending rows stay on disk for the next start) and free the slot.

        Adopted slots are freed too; their rows not yet replayed stay on disk for the next claim or adoption.
        """
        with self._adopted_lock:
            adopted, self._adopted = self._adopted, []
        for orphan in adopted:
            orphan.close()
        with self._lock:
            if self._head is not None:
                self._head.close()
                self._head = None
                self._head_seg = 0
            if self._lock_file is not None:
                self._lock_file.close()  # releases the flock
                self._lock_file = None
