"""The background log writer: a bounded queue in front of batched database writes, with a disk spool.

Requests hand their predictions to :meth:`LogWriter.submit`; the writer thread builds one log batch row per
request (:mod:`predictions.batch`) and drains the queue in writes of many requests (one statement and one
transaction each: the write as one JSON array that the database unpacks, see
:func:`predictions.service.write_log_rows`). Every count here (queue, written, spooled, lost, refused) is of
predictions; a refused row is one request's batch. If a write fails, or the queue is
full because the database is slow, rows go to the :class:`~predictions.spool.Spool` on disk; while
the spool holds rows every new row is appended behind them, and the writer replays the spool in order as
soon as the database answers again. Nothing is dropped: ``rows_dropped`` only moves if the local disk
itself refuses a write or the spool holds its cap (``spool_max_bytes``) while the database is down; a full
spool with the database up sends new rows straight to the database (out of order with the spooled ones,
which carry their own ``logged_at``). The loss is counted, logged and fails the ``prediction_log`` health
check (:mod:`predictions.health`).

A batch the database refuses for a row's *value* (a NUL character inside an ``inputs`` string, a number out
of range: :func:`~predictions.service.classify_write_error`) is not an outage: retrying it would fail
forever and hold every later row behind it. The writer splits such a batch in halves until each refused row
is alone, writes every other row, and appends the refused ones, with the database's error, to the
dead-letter file ``<spool slot>/rejected.jsonl`` (:mod:`predictions.rejected`; never replayed
automatically). The same holds for rows replayed from the spool. Refused rows are counted
(``rows_rejected``), logged (one critical line per 10 s) and fail the ``prediction_log`` health check like
lost rows. The writer also replays the rows other processes left in their spool slots
(``serve --workers N`` restarted with fewer workers): see :meth:`~predictions.spool.Spool.adopt`.

Durability (setting ``log_durability``):
- ``durable``: a request is answered only once its rows are committed to the database or fsynced to the
  spool. Concurrent requests share one commit (group commit), so the cost is one commit's latency per
  request, not per row.
- ``fast``: a request is answered as soon as its rows are queued; the writer flushes every
  ``flush_interval``. A crash of the process (not a database outage) can lose the rows still queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from sqlalchemy import Engine

from core.database import make_engine
from predictions.batch import LogBatch, predictions_in
from predictions.lake.sink import LakeSink
from predictions.pending import RequestRows, build
from predictions.rejected import DeadLetter
from predictions.service import classify_write_error, write_log_rows
from predictions.spool import Spool, encode_row

log = logging.getLogger("driftwarden.predictions.writer")

Durability = Literal["durable", "fast"]

# Buckets of the batch write duration histogram (``driftwarden_prediction_log_flush_duration_seconds``).
FLUSH_BUCKETS_S: tuple[float, ...] = (
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


def writer_engine(url: str) -> Engine:
    """The engine a serving process's writer uses: two pooled connections, TCP keepalives (a dead server is
    noticed within ~25 s of silence, not the OS's hours) and no ping before each batch.

    The ping was a round trip (and, in the writer thread, a wait for the GIL) in front of every commit on the
    ``durable`` path; a pooled connection the server closed meanwhile now fails its batch instead, which
    :meth:`LogWriter._write` sends once more on a fresh connection."""
    kwargs: dict[str, Any] = {
        "json_serializer": lambda o: orjson.dumps(o).decode(),
        "pool_pre_ping": False,
    }
    if not url.startswith("sqlite"):
        kwargs["pool_size"] = 2
        kwargs["connect_args"] = {
            "connect_timeout": 5,
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
    return make_engine(url, **kwargs)


class LogUnavailable(RuntimeError):
    """Rows could be written neither to the database nor to the spool."""


Rows = list[LogBatch] | RequestRows
"""What a request hands over: built batches, or a request's predictions that the writer thread builds into
batches (:mod:`predictions.pending`)."""


def _size(rows: Rows) -> int:
    """The predictions ``rows`` hold."""
    return len(rows) if isinstance(rows, RequestRows) else predictions_in(rows)


@dataclass
class _Entry:
    rows: Rows
    future: asyncio.Future[bool] | None = None
    loop: asyncio.AbstractEventLoop | None = None


@dataclass
class WriterStats:
    """Counters of the write path (exported as Prometheus metrics and at ``/status``)."""

    rows_written: int = 0  # rows committed by the direct path
    rows_replayed: int = 0  # rows committed from the spool
    rows_spooled: int = 0  # rows that went to the spool (write failure, slow database, overflow)
    rows_dropped: int = 0  # rows lost: only if the spool's disk fails or is full; must stay 0
    last_drop_at: float | None = None  # time.time() of the last loss
    rows_rejected: int = 0  # rows the database refused for their values: in the dead-letter file; must stay 0
    last_reject_at: float | None = None  # time.time() of the last refused row
    write_errors: int = 0
    batches: int = 0
    last_error: str | None = None
    database_ok: bool = True
    # batch write durations: a count per FLUSH_BUCKETS_S bucket, then +Inf, then the sum of seconds
    flush_seconds: list[float] = field(default_factory=lambda: [0.0] * (len(FLUSH_BUCKETS_S) + 2))
    extra: dict[str, Any] = field(default_factory=dict)

    def observe_flush(self, seconds: float) -> None:
        """Count one batch write (writer thread only)."""
        self.flush_seconds[bisect_left(FLUSH_BUCKETS_S, seconds)] += 1
        self.flush_seconds[-1] += seconds


class LogWriter:
    """Bounded queue + writer thread + spool; see the module docstring."""

    def __init__(
        self,
        *,
        engine: Engine,
        spool: Spool,
        durability: Durability = "durable",
        queue_max_rows: int = 100_000,
        batch_max_rows: int = 2000,
        flush_interval_s: float = 0.05,
        commit_timeout_s: float = 2.0,
        retry_interval_s: float = 1.0,
        adopt_interval_s: float = 30.0,
        dead_letter: DeadLetter | None = None,
        lake: LakeSink | None = None,
        database: bool = True,
    ) -> None:
        self.engine = engine
        self.lake = lake  # the lake sink (lake_mode also/only), see predictions.lake.sink
        self.database = database  # False: lake_mode=only, the rows go to the lake alone
        self.spool = spool
        self.dead_letter = dead_letter or DeadLetter(spool.directory)
        self.durability = durability
        self.queue_max_rows = queue_max_rows
        self.batch_max_rows = batch_max_rows
        self.flush_interval_s = flush_interval_s
        self.commit_timeout_s = commit_timeout_s
        self.retry_interval_s = retry_interval_s
        self.adopt_interval_s = adopt_interval_s
        self.stats = WriterStats()
        self._queue: deque[_Entry] = deque()
        self._queued_rows = 0
        self._busy = False
        self._cond = threading.Condition()
        self._stopping = False
        self._next_retry = 0.0
        self._thread: threading.Thread | None = None
        self._seq_in = 0  # entries queued so far
        self._seq_out = 0  # entries handled (committed or spooled) so far, in queue order
        self._drop_logged_at = 0.0  # time.time() of the last "rows LOST" log line
        self._reject_logged_at = 0.0  # time.time() of the last "rows REFUSED" log line
        self._next_adopt = 0.0  # when to look again for spool slots left with rows by a process that is gone

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the writer thread (it first replays whatever a previous process left in the spool)."""
        self._thread = threading.Thread(target=self._run, name="driftwarden-log-writer", daemon=True)
        self._thread.start()
        if self.lake is not None:
            self.lake.start()

    def close(self, timeout_s: float = 30.0) -> None:
        """Write everything queued, replay the spool while the database answers, stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("log writer did not stop within %.0fs; queued rows go to the spool", timeout_s)
        with self._cond:
            rest = [r for rows in _materialize(self._queue) for r in rows]
            self._queue.clear()
            self._queued_rows = 0
        if rest:
            self._spill(self._also_to_lake(rest), sync=True)
        self.spool.close()
        if self.lake is not None:
            self.lake.close(timeout_s)

    # -- producer side ---------------------------------------------------------------------------
    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    def offer(self, rows: Rows) -> bool:
        """``fast`` mode's hot path: queue the rows if there is room (True); otherwise use :meth:`submit`."""
        if self.durability != "fast":
            return False
        with self._cond:
            if self._queued_rows + _size(rows) > self.queue_max_rows or self._stopping:
                return False
            self._queue.append(_Entry(rows))
            self._queued_rows += _size(rows)
            self._seq_in += 1
            if self._queued_rows >= self.batch_max_rows:
                self._cond.notify()
        return True

    async def submit(self, rows: Rows) -> None:
        """Hand rows to the writer; in ``durable`` mode return once they are committed or spooled."""
        durable = self.durability == "durable"
        entry = _Entry(rows)
        if durable:
            entry.loop = asyncio.get_running_loop()
            entry.future = entry.loop.create_future()
        with self._cond:
            if self._queued_rows + _size(rows) <= self.queue_max_rows and not self._stopping:
                self._queue.append(entry)
                self._queued_rows += _size(rows)
                self._seq_in += 1
                if durable or self._queued_rows >= self.batch_max_rows:
                    self._cond.notify()
                queued = True
            else:
                queued = False
        if not queued:  # the database is too slow to keep up: straight to disk
            error = await asyncio.to_thread(self._spill_new, _built(rows), durable)
            if error is not None and durable:  # no durable answer for rows neither committed nor spooled
                raise LogUnavailable(str(error))
            return
        if entry.future is None or entry.loop is None:
            return
        timer = entry.loop.call_later(self.commit_timeout_s, _time_out, entry.future)
        try:
            timed_out = await entry.future
        finally:
            timer.cancel()
        if timed_out:
            # The database is slow: make the rows durable on disk now; if the pending commit also lands,
            # the replay skips the prediction ids the database already has.
            error = await asyncio.to_thread(self._spill, _built(rows), sync=True)
            if error is not None:
                raise LogUnavailable(str(error))

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every row submitted before the call is handled and the spool is replayed."""
        with self._cond:
            target = self._seq_in
            self._cond.notify()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._seq_out >= target and self.spool.pending_rows == 0:
                return True
            with self._cond:
                self._cond.notify()
            time.sleep(0.005)
        return False

    def settle(self, timeout_s: float = 5.0) -> bool:
        """:meth:`flush` before a lookup that may do without it (the ingest's look-up of named runs, which the
        insert's conflict key backs up), except while the writer knows the database is down: then False at
        once (the rows are spooled, and waiting would only hold the request ``timeout_s`` longer). A read that
        needs its own rows in the table first (labels of predictions just logged) flushes."""
        return self.stats.database_ok and self.flush(timeout_s)

    # -- writer thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._adopt()
            entries = self._take()
            if entries:
                try:
                    self._handle(entries)
                finally:
                    with self._cond:
                        self._busy = False
                        self._seq_out += len(entries)
            self._replay(max_batches=4 if not self._stopping else 1_000_000)
            with self._cond:
                if self._stopping and not self._queue:
                    return
            if self._stopping and self.spool.pending_rows and not self.stats.database_ok:
                return  # database down at shutdown: the rows stay in the spool for the next start

    def _take(self) -> list[_Entry]:
        with self._cond:
            if self.durability == "durable":
                if not self._queue and not self._stopping:
                    self._cond.wait(timeout=self._idle_wait())
            elif not self._stopping and self._queued_rows < self.batch_max_rows:
                self._cond.wait(timeout=self.flush_interval_s)
            entries: list[_Entry] = []
            n = 0
            while self._queue and (n < self.batch_max_rows or not entries):
                entry = self._queue.popleft()
                entries.append(entry)
                n += _size(entry.rows)
            self._queued_rows -= n
            self._busy = bool(entries)
            return entries

    def _adopt(self) -> None:
        """Every ``adopt_interval_s``: take over the spool slots of processes that are gone (their rows are
        then replayed here, in each slot's order, before this process's own spooled rows)."""
        now = time.monotonic()
        if self._stopping or now < self._next_adopt:
            return
        self._next_adopt = now + self.adopt_interval_s
        try:
            self.spool.adopt()
        except Exception as exc:  # never stops the writer: the rows stay on disk for the next try
            log.error("prediction log: looking for spool slots to adopt failed: %s", exc)

    def _idle_wait(self) -> float:
        if self.spool.pending_rows:
            return max(0.01, min(self.retry_interval_s, self._next_retry - time.monotonic()))
        return 1.0

    def _handle(self, entries: list[_Entry]) -> None:
        built = _materialize(entries)
        rows = self._also_to_lake([r for b in built for r in b])
        error: BaseException | None = None
        durable = self.durability == "durable"
        if self.spool.pending_rows and (not self._database_due() or not self._spool_full(rows)):
            # keep the order: new rows queue up behind the spooled ones (a full spool: to the database)
            error = self._spill(rows, sync=durable)
        else:
            try:
                written, refused = self._write_sorting(rows, idempotent=False)
            except Exception as exc:
                self._mark_failed(exc)
                error = self._spill(rows, sync=durable)
            else:
                self.stats.rows_written += written
                self.stats.batches += 1
                self._mark_ok()
                lost = self.reject(refused, source="direct")
                if lost is not None:  # only the requests whose refused rows are lost get the error
                    gone = {id(row) for row, _ in refused}
                    hits = [any(id(r) in gone for r in b) for b in built]
                    self._resolve([e for e, h in zip(entries, hits, strict=True) if not h], None)
                    hit = [e for e, h in zip(entries, hits, strict=True) if h]
                    entries, error = hit, lost
        self._resolve(entries, error)

    def _replay(self, *, max_batches: int) -> None:
        if not self.spool.pending_rows or (
            not self.stats.database_ok and time.monotonic() < self._next_retry
        ):
            return
        for _ in range(max_batches):
            batch = self.spool.peek(self.batch_max_rows)
            if batch is None:
                return
            try:
                written, refused = self._write_sorting(batch.rows, idempotent=True)
            except Exception as exc:
                self._mark_failed(exc)
                return
            self.reject(refused, source="spool")  # on disk (or counted lost): the replay moves past them
            self.spool.commit(batch)
            self.stats.rows_replayed += written
            self._mark_ok()
            with self._cond:
                if self._queue and not self._stopping:
                    return  # let queued requests be spooled (durable callers wait for that) first

    def _write(self, rows: list[LogBatch], *, idempotent: bool) -> None:
        t0 = time.perf_counter()
        if not self.database and self.lake is not None:  # lake_mode=only: the lake's write-ahead spool
            try:
                self.lake.append(rows, sync=self.durability == "durable")
            finally:
                self.stats.observe_flush(time.perf_counter() - t0)
            return
        try:
            try:
                write_log_rows(engine=self.engine, rows=rows, idempotent=idempotent)
            except Exception as exc:
                # the first failure after the database answered is tried once more on a fresh connection
                # (the failed one left the pool): writer_engine does not ping a pooled connection before a
                # batch, so one the server closed meanwhile (a restart, an idle timeout) fails here first
                if not self.stats.database_ok or classify_write_error(exc) != "unavailable":
                    raise
                write_log_rows(engine=self.engine, rows=rows, idempotent=idempotent)
        finally:
            self.stats.observe_flush(time.perf_counter() - t0)

    def _write_sorting(
        self, rows: list[LogBatch], *, idempotent: bool
    ) -> tuple[int, list[tuple[LogBatch, str]]]:
        """Write ``rows``; a batch refused for a value is split in halves until each refused row is alone.

        Returns the rows committed and the refused rows with the database's error. Raises the error of a
        database that is unavailable (the caller spools or keeps the whole batch: the halves already
        committed are skipped by the idempotent replay, and the refused rows are found again then).
        """
        try:
            self._write(rows, idempotent=idempotent)
            return predictions_in(rows), []
        except Exception as exc:
            kind = classify_write_error(exc)
            if kind == "duplicate" and not idempotent:  # a row the table has (a spooled commit landed)
                return self._write_sorting(rows, idempotent=True)
            if kind == "unavailable":
                raise
            reason = f"{type(exc).__name__}: {exc}"[:2000]
        self.stats.last_error = reason[:500]
        if len(rows) == 1:
            return 0, [(rows[0], reason)]
        half = len(rows) // 2
        written_a, refused_a = self._write_sorting(rows[:half], idempotent=True)
        written_b, refused_b = self._write_sorting(rows[half:], idempotent=True)
        return written_a + written_b, refused_a + refused_b

    def reject(self, refused: list[tuple[LogBatch, str]], *, source: str) -> BaseException | None:
        """Put rows the database refused for their values into the dead-letter file (fsynced), counted in
        ``rows_rejected``; the error of a dead letter that failed too (the rows then count as lost). Also
        called by the CloudEvents pairing (``source="cloudevents"``) for a pair's refused rows."""
        if not refused:
            return None
        try:
            self.dead_letter.append(refused, source=source)
        except Exception as exc:  # the local disk failed too: the rows are lost
            self.count_lost(
                predictions_in([r for r, _ in refused]),
                f"dead-letter append to {self.dead_letter.path} failed",
                exc,
            )
            return exc
        now = time.time()
        self.stats.rows_rejected += predictions_in([r for r, _ in refused])
        self.stats.last_reject_at = now
        if now - self._reject_logged_at > 10.0:  # one line per 10 s, not one per batch
            self._reject_logged_at = now
            log.critical(
                "prediction log: rows REFUSED by the database for their values (%d so far), moved to %s: %s",
                self.stats.rows_rejected,
                self.dead_letter.path,
                refused[-1][1].splitlines()[0] if refused[-1][1] else "",
            )
        return None

    def _spool_full(self, rows: list[LogBatch]) -> bool:
        """The spool has no room for ``rows`` under its cap."""
        cap = self.spool.max_bytes
        return cap is not None and self.spool.pending_bytes + sum(len(encode_row(r)) for r in rows) > cap

    def _database_due(self) -> bool:
        """The database answered the last write, or its retry is due."""
        return self.stats.database_ok or time.monotonic() >= self._next_retry

    def _also_to_lake(self, rows: list[LogBatch]) -> list[LogBatch]:
        """lake_mode=also: rows leaving the queue go to the lake's write-ahead spool, once (a later database
        replay of them does not repeat it); returns ``rows``. The local disk refusing them counts them lost
        to the lake (``lake_rows_lost``; the ``lake`` health check fails), not to the database."""
        if self.lake is None or not self.database or not rows:
            return rows
        try:
            self.lake.append(rows, sync=self.durability == "durable")
        except Exception as exc:
            n = predictions_in(rows)
            self.stats.extra["lake_rows_lost"] = self.stats.extra.get("lake_rows_lost", 0) + n
            self.stats.extra["lake_lost_at"] = time.time()
            log.critical("prediction log: %d rows LOST to the lake, its spool append failed: %s", n, exc)
        return rows

    def _spill_new(self, rows: list[LogBatch], sync: bool) -> BaseException | None:
        """Rows that skip the queue (it is full): to the lake (also mode), then to the spool."""
        return self._spill(self._also_to_lake(rows), sync=sync)

    def _spill(self, rows: list[LogBatch], *, sync: bool) -> BaseException | None:
        try:
            self.spool.append(rows, sync=sync)
        except Exception as exc:  # the local disk failed too (or is full): this is the only way to lose rows
            self.count_lost(predictions_in(rows), "spool append failed", exc)
            return exc
        self.stats.rows_spooled += predictions_in(rows)
        return None

    def count_lost(self, n: int, what: str, exc: BaseException) -> None:
        """Count ``n`` predictions lost (``rows_dropped``; one critical line per 10 s): also called by the
        CloudEvents route for a half its full spool could not keep."""
        now = time.time()
        if now - self._drop_logged_at > 10.0:  # one line per 10 s, not one per batch
            self._drop_logged_at = now
            log.critical(
                "prediction log: rows LOST (%d so far), %s: %s", self.stats.rows_dropped + n, what, exc
            )
        self.stats.rows_dropped += n
        self.stats.last_drop_at = now

    def _mark_ok(self) -> None:
        if not self.stats.database_ok:
            log.warning("prediction log: database reachable again, replaying the spool")
        self.stats.database_ok = True

    def _mark_failed(self, exc: BaseException) -> None:
        self.stats.write_errors += 1
        self.stats.last_error = f"{type(exc).__name__}: {exc}"[:500]
        if self.stats.database_ok:
            log.warning(
                "prediction log: database write failed (%s); spooling to %s", exc, self.spool.directory
            )
        self.stats.database_ok = False
        self._next_retry = time.monotonic() + self.retry_interval_s

    @staticmethod
    def _resolve(entries: list[_Entry], error: BaseException | None) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[bool]]] = {}
        for e in entries:
            if e.future is not None and e.loop is not None:
                by_loop.setdefault(e.loop, []).append(e.future)
        for loop, futures in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_settle, futures, error)


def _materialize(entries: Iterable[_Entry]) -> list[list[LogBatch]]:
    """Each entry's rows; those handed over unbuilt are built here (the writer thread), a batch at once."""
    listed = list(entries)
    waiting = [(i, e.rows) for i, e in enumerate(listed) if isinstance(e.rows, RequestRows)]
    out = [e.rows if isinstance(e.rows, list) else [] for e in listed]
    for (i, _), rows in zip(waiting, build([r for _, r in waiting]), strict=True):
        listed[i].rows = out[i] = rows
    return out


def _built(rows: Rows) -> list[LogBatch]:
    """``rows`` as log rows."""
    return build([rows])[0] if isinstance(rows, RequestRows) else rows


def _settle(futures: list[asyncio.Future[bool]], error: BaseException | None) -> None:
    for fut in futures:
        if fut.done():
            continue
        if error is None:
            fut.set_result(False)
        else:
            fut.set_exception(LogUnavailable(str(error)))


def _time_out(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(True)
