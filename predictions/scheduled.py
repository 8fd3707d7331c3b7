"""The prediction log's periodic job: retention, and on PostgreSQL the log's time partitions.

Each pass (at start-up, then every ``retention_interval_s``) creates the partitions of the coming week, so a
fresh database has them before its first prediction; drops every partition whose whole range is older than
``retention_days`` (log and feedback together); then deletes, in chunks, the older rows left in the DEFAULT
partition (rows no partition covered) and, on SQLite, in the one table. The job keeps the partition that holds
the cutoff whole until all of it has expired (a row stays at most ``log_partition_days`` longer than
``retention_days``): deleting its older rows every hour would bring back the row-by-row DELETE that
partitions exist to avoid. ``driftwarden predictions purge`` cuts at the exact time instead.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from core.database import utcnow
from core.errors import Unavailable
from core.runtime import Runtime
from core.scheduling import every
from predictions.service import Retention, apply_retention

log = logging.getLogger("driftwarden.predictions")


def purge_expired(runtime: Runtime) -> int:
    """One retention pass (see the module docstring); the number of predictions removed."""
    days = runtime.settings.retention_days
    now = utcnow()
    try:
        done = apply_retention(
            db=runtime.db,
            before=now - timedelta(days=days),
            partition_days=runtime.settings.log_partition_days,
            now=now,
            whole_partitions=True,
        )
    except Unavailable as exc:  # a table lock not granted in time: the next pass tries again
        log.warning("retention: %s", exc)
        return 0
    _report(done, days)
    return done.removed


def _report(done: Retention, days: float) -> None:
    if done.created:
        log.info("retention: created partitions %s", ", ".join(done.created))
    for name, rows in done.dropped:
        log.info("retention: dropped partition %s with its feedback (%d predictions)", name, rows)
    if done.removed:
        log.info("retention: removed %d predictions older than %.1f days", done.removed, days)


def start_retention(runtime: Runtime) -> asyncio.Task[None] | None:
    """Run a retention pass now and every ``retention_interval_s``; None when the interval is 0."""
    return every(
        runtime.settings.retention_interval_s,
        lambda: purge_expired(runtime),
        name="prediction retention",
        initial_delay_s=0.0,
        leader_lock=runtime.leader_lock,
    )
