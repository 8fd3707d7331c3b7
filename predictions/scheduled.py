"""The prediction log's periodic job: retention (delete rows older than ``retention_days``)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from core.runtime import Runtime
from core.scheduling import every
from predictions.service import purge_all_before, utcnow

log = logging.getLogger("driftwarden.predictions")


def purge_expired(runtime: Runtime) -> int:
    """One retention pass: delete what is older than the retention window; the number deleted."""
    days = runtime.settings.retention_days
    deleted = purge_all_before(db=runtime.db, before=utcnow() - timedelta(days=days))
    if deleted:
        log.info("retention: deleted %d predictions older than %.1f days", deleted, days)
    return deleted


def start_retention(runtime: Runtime) -> asyncio.Task[None] | None:
    """Run a retention pass now and every ``retention_interval_s``; None when the interval is 0."""
    return every(
        runtime.settings.retention_interval_s,
        lambda: purge_expired(runtime),
        name="prediction retention",
        initial_delay_s=0.0,
        leader_lock=runtime.leader_lock,
    )
