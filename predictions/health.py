"""The prediction log's health check: no log row lost lately (the spool's disk refused rows, or it held its
cap while the database was down).

The check ``prediction_log`` fails for :data:`LOSS_WINDOW_S` after the last lost row, naming how many rows
were lost since the process started; the default alert rule ``prediction_log_loss`` fires on it. It does not
count for ``/readyz``: a replica that cannot log still answers (by the ``log_durability`` policy), and taking
every replica out of the load balancer because the database is down would turn a logging fault into an
outage.
"""

from __future__ import annotations

import time

from core.health import HealthCheck, Status
from predictions.writer import LogWriter

LOSS_WINDOW_S = 600.0  # the check fails this long after the last lost row


def log_check(writer: LogWriter | None) -> list[HealthCheck]:
    """``prediction_log`` when the log is on (none when it is off); the value is the rows lost so far."""
    if writer is None:
        return []

    def check() -> Status:
        s = writer.stats
        cap = writer.spool.max_bytes
        spool = f"spool {writer.spool.pending_rows} rows, {writer.spool.pending_bytes} bytes" + (
            f" of a {cap}-byte cap" if cap is not None else ""
        )
        if s.last_drop_at is not None and time.time() - s.last_drop_at < LOSS_WINDOW_S:
            ago = time.time() - s.last_drop_at
            return Status(
                False,
                f"{s.rows_dropped} log rows lost since start, the last {ago:.0f}s ago ({spool}; "
                f"database {'up' if s.database_ok else 'down'})",
                float(s.rows_dropped),
            )
        ok = f"no log row lost in the last {LOSS_WINDOW_S:.0f}s ({spool})"
        return Status(True, ok, float(s.rows_dropped))

    return [HealthCheck("prediction_log", check, ready=False)]
