"""The lake sink: a process's prediction log appended to the lake as Parquet files, as safe as the spool.

How a row travels (``lake_mode`` also or only; the writer is :class:`~predictions.writer.LogWriter`):

1. The writer thread takes a request's rows off its queue and appends them to the sink's **write-ahead
   spool** (:meth:`LakeSink.append`: a :class:`~predictions.spool.Spool` slot of its own, under
   ``spool_path/lake/<hash of lake_url>``; fsynced under ``log_durability=durable``, so a ``durable`` request
   is answered only once its rows are on the local disk, as for the database). Under ``fast`` the rows
   still queued in memory are what a crash can lose, exactly as for the database.
2. The sink's roller thread commits the rows of the write-ahead spool as files (:meth:`LakeSink.roll`): one
   file per (table, model, hour) partition and feature layout, when the rows not yet committed hold
   ``lake_roll_bytes`` (counted as the spool's bytes), when the oldest of them waited ``lake_roll_s``, when
   the hour they fall in has ended, and at shutdown. Each file is written whole or not at all
   (:func:`~predictions.lake.files.write_file`: a temporary name and a rename, or one S3 PUT).
3. Only then does the sink move the spool's cursor past those rows. So a row is, at every moment, in the
   writer's queue (``fast`` only), in the write-ahead spool, or in a committed file: a crash (``kill -9``)
   loses no row that reached the spool, and the next process claiming the slot (or adopting it,
   :meth:`~predictions.spool.Spool.adopt`) commits them.
4. A lake that cannot be written (a folder gone or read-only, an S3 endpoint refusing) fails the roll: the
   rows stay in the spool, the ``lake`` health check fails naming the lake and the error, and the roll is
   tried again every ``retry_s`` until the lake answers. Nothing is written half.

File names are deterministic: ``<host>-<first id>-<part>.parquet``, the id (hex) of the roll's first
prediction (ids are unique: so are the names) and the part (the partition's feature layout). A crash after
a file's commit and before the cursor moved makes the next process roll the same rows from the same cursor,
so under the same names: the files are replaced, not doubled.

Labels (:meth:`LakeSink.write_labels`) are written at once, one file per call and partition, before the
call returns (a label is sent by a caller that waits for its answer and can resend it).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from predictions import typed
from predictions.batch import LogBatch, predictions_in
from predictions.lake import layout as lake
from predictions.lake.arrow import PartitionTable, UnknownLayout, label_tables, prediction_tables
from predictions.lake.files import Lake, write_file
from predictions.spool import Spool

log = logging.getLogger("driftwarden.predictions.lake")

MAX_ROLL_ROWS = 100_000  # most predictions per roll step and file: bounds the memory a roll takes (~100 MB)


@dataclass
class SinkStats:
    """Counters of the lake sink (at ``/status`` and in the ``lake`` health check)."""

    rows_committed: int = 0  # predictions in committed files
    labels_committed: int = 0
    files_committed: int = 0
    roll_errors: int = 0
    lake_ok: bool = True
    last_error: str | None = None
    last_error_at: float | None = None  # time.time()
    last_commit_at: float | None = None


class LakeSink:
    """Write-ahead spool + roller thread committing Parquet files; see the module docstring."""

    def __init__(
        self,
        *,
        target: Lake,
        wal: Spool,
        roll_bytes: int,
        roll_s: float,
        layout_of: Callable[[int], typed.Layout | None] = typed.KNOWN.get,
        retry_s: float = 2.0,
        tick_s: float = 0.2,
    ) -> None:
        self.target = target
        self.wal = wal
        self.roll_bytes = roll_bytes
        self.roll_s = roll_s
        self.layout_of = layout_of
        self.retry_s = retry_s
        self.tick_s = tick_s
        self.stats = SinkStats()
        self._host = socket.gethostname().replace("/", "_").replace("=", "_").replace("-", "_") or "host"
        self._first_at: float | None = 0.0 if wal.pending_rows else None  # monotonic: oldest uncommitted row
        self._first_hour: datetime | None = None
        self._next_try = 0.0
        self._roll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- writer side -------------------------------------------------------------------------------
    def append(self, rows: list[LogBatch], *, sync: bool) -> None:
        """Put rows in the write-ahead spool (``sync``: fsynced); they reach a file at the next roll. Raises
        the local disk's error (none of the rows is then in the spool)."""
        self.wal.append(rows, sync=sync)
        if self._first_at is None:
            self._first_at = time.monotonic()
            self._first_hour = lake.hour_of(datetime.now(UTC))

    def write_labels(self, model: str, labels: Sequence[tuple[str, float, datetime]]) -> int:
        """Commit labels of ``model`` as files now (one per hour partition); raises the lake's error."""
        tables = label_tables(model, labels)
        self._write(tables, f"{self._host}-labels-{time.time_ns():x}")
        self.stats.labels_committed += len(labels)
        return len(labels)

    # -- rolling -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the roller thread (rows a previous process left in the spool are rolled first)."""
        self._thread = threading.Thread(target=self._run, name="driftwarden-lake-roller", daemon=True)
        self._thread.start()

    def due(self, now: float) -> bool:
        """Whether the rows not yet committed should become files now."""
        if self._first_at is None and not self.wal.pending_rows:
            return False
        if now < self._next_try:
            return False
        if self._first_at is None or now - self._first_at >= self.roll_s:
            return True
        if self._first_hour is not None and lake.hour_of(datetime.now(UTC)) != self._first_hour:
            return True  # the hour ended: its partition's file is complete
        return self.wal.pending_bytes >= self.roll_bytes

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            if self.due(time.monotonic()):
                self.roll()

    def roll(self) -> int:
        """Commit every row of the spool as files (in steps of :data:`MAX_ROLL_ROWS`); returns the
        predictions committed. A lake that fails leaves the rest in the spool (see the module docstring)."""
        done = 0
        with self._roll_lock:
            self.wal.adopt()
            while True:
                try:
                    step = self._roll_step()
                except UnknownLayout as exc:  # a model not loaded yet: its rows wait for its layout
                    log.warning("lake: rows wait in the spool: %s", exc)
                    self._next_try = time.monotonic() + self.retry_s
                    return done
                except Exception as exc:  # the lake failed: the rows stay in the spool, tried again later
                    self._failed(exc)
                    return done
                if step == 0:
                    break
                done += step
            self._first_at = None if not self.wal.pending_rows else time.monotonic()
            self._first_hour = None
        return done

    def _roll_step(self) -> int:
        """One roll of up to MAX_ROLL_ROWS rows: an adopted slot's first, else this slot's."""
        adopted = self.wal.peek_adopted(MAX_ROLL_ROWS)
        batches = [adopted] if adopted is not None else self.wal.scan(MAX_ROLL_ROWS)
        if not batches:
            return 0
        rows = [r for b in batches for r in b.rows]
        if rows:
            tables = prediction_tables(rows, self.layout_of)
            # named by the roll's first prediction: the same names when rolled again after a crash
            self._write(tables, f"{self._host}-{rows[0].ids()[0].replace('-', '')}")
        for b in batches:
            self.wal.commit(b)
        n = predictions_in(rows)
        self.stats.rows_committed += n
        return n if n else 1  # a batch of unreadable lines only: moved past, try the next

    def _write(self, tables: list[PartitionTable], stem: str) -> None:
        for t in tables:
            folder = lake.partition(t.table_name, t.model, t.hour)
            write_file(self.target, folder, f"{stem}-{t.part}{lake.SUFFIX}", t.table)
            self.stats.files_committed += 1
        self.stats.last_commit_at = time.time()
        if not self.stats.lake_ok:
            log.warning("lake: %s answers again; committing the spooled rows", self.target.url)
        self.stats.lake_ok = True

    def _failed(self, exc: BaseException) -> None:
        first = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {first[0] if first else ''}"[:500]
        if self.stats.lake_ok:
            log.error(
                "lake: %s cannot be written (%s); rows stay in %s",
                self.target.url,
                reason,
                self.wal.directory,
            )
        self.stats.lake_ok = False
        self.stats.roll_errors += 1
        self.stats.last_error = reason
        self.stats.last_error_at = time.time()
        self._next_try = time.monotonic() + self.retry_s

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the roller, commit what the spool holds (while the lake answers), close the spool."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._next_try = 0.0
        self.roll()
        self.wal.close()

    def flush(self) -> bool:
        """Commit every spooled row now; True when none is left."""
        self._next_try = 0.0
        self.roll()
        return self.wal.pending_rows == 0
