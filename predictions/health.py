"""The prediction log's health checks. ``prediction_log``: no log row lost lately (the spool's disk refused
rows, or it held its cap while the database was down), and none refused by the database for its values
(those rows are in the dead-letter file ``rejected.jsonl``, waiting for an operator:
:mod:`predictions.rejected`).

The check ``prediction_log`` fails for :data:`LOSS_WINDOW_S` after the last lost or refused row, naming how
many rows were lost and refused since the process started; the default alert rule ``prediction_log_loss``
fires on it. Its value is the rows lost plus the rows refused. It does not count for ``/readyz``: a replica
that cannot log still answers (by the ``log_durability`` policy), and taking every replica out of the load
balancer because the database is down would turn a logging fault into an outage.

``lake`` (with a lake sink, ``lake_mode`` also/only, :func:`lake_check`) fails while the lake cannot be
written (its rows wait in the sink's spool) and after rows were lost to it.
"""

from __future__ import annotations

import time

from core.health import HealthCheck, Status
from predictions.writer import LogWriter

LOSS_WINDOW_S = 600.0  # the check fails this long after the last lost or refused row


def _recent(at: float | None, now: float) -> bool:
    return at is not None and now - at < LOSS_WINDOW_S


def log_check(writer: LogWriter | None) -> list[HealthCheck]:
    """``prediction_log`` when the log is on (none when it is off); the value is the rows lost or refused."""
    if writer is None:
        return []

    def check() -> Status:
        s = writer.stats
        now = time.time()
        cap = writer.spool.max_bytes
        spool = f"spool {writer.spool.pending_rows} rows, {writer.spool.pending_bytes} bytes" + (
            f" of a {cap}-byte cap" if cap is not None else ""
        )
        value = float(s.rows_dropped + s.rows_rejected)
        problems: list[str] = []
        if _recent(s.last_drop_at, now):
            assert s.last_drop_at is not None
            problems.append(
                f"{s.rows_dropped} log rows lost since start, the last {now - s.last_drop_at:.0f}s ago"
            )
        if _recent(s.last_reject_at, now):
            assert s.last_reject_at is not None
            problems.append(
                f"{s.rows_rejected} log rows refused by the database for their values since start, the last "
                f"{now - s.last_reject_at:.0f}s ago, kept in {writer.dead_letter.path}"
            )
        if problems:
            db = "up" if s.database_ok else "down"
            return Status(False, f"{'; '.join(problems)} ({spool}; database {db})", value)
        ok = f"no log row lost or refused in the last {LOSS_WINDOW_S:.0f}s ({spool})"
        return Status(True, ok, value)

    return [HealthCheck("prediction_log", check, ready=False), *lake_check(writer)]


def lake_check(writer: LogWriter) -> list[HealthCheck]:
    """``lake`` when the writer has a lake sink: fails while the lake cannot be written (the rows wait in the
    sink's spool, counted in the value) or after rows were lost to it; not for ``/readyz``, like the log's."""
    sink = writer.lake
    if sink is None:
        return []

    def check() -> Status:
        s = sink.stats
        now = time.time()
        waiting = sink.wal.pending_rows
        lost = int(writer.stats.extra.get("lake_rows_lost", 0))
        where = f"lake {sink.target.url}: {s.rows_committed} rows committed, {waiting} waiting in the spool"
        if not s.lake_ok:
            return Status(False, f"{where}; cannot be written: {s.last_error}", float(waiting))
        if lost and _recent(writer.stats.extra.get("lake_lost_at"), now):
            return Status(
                False, f"{where}; {lost} rows lost to the lake since start (spool append failed)", 0.0
            )
        return Status(True, where, float(waiting))

    return [HealthCheck("lake", check, ready=False)]
