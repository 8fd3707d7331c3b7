"""The outbox's periodic jobs (in the API process, one worker of ``serve --workers N``): the sender, and the
retention that removes delivered and dead messages after ``webhook_retention_days``.

The sender is one :class:`alerts.sender.Sender` for the life of the job: each pass starts what fits its
free threads and returns, so a hanging receiver never holds up the next pass; cancelling the job closes it
(requests in flight finish within their timeout)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from functools import partial

from alerts.sender import Sender
from alerts.service import purge_deliveries
from core.config import Settings
from core.database import Database
from core.runtime import Runtime
from core.scheduling import every

log = logging.getLogger("driftwarden.alerts")


def start_sender(runtime: Runtime) -> asyncio.Task[None] | None:
    """Send due webhook deliveries every ``webhook_send_interval_s``; None when the sender is off."""
    settings = runtime.settings
    if not settings.webhook_sender_enabled:
        log.info("webhook sender off (DRIFTWARDEN_WEBHOOK_SENDER_ENABLED=false)")
        return None

    sender = Sender(db=runtime.db, settings=settings)
    task = every(
        settings.webhook_send_interval_s, sender.send, name="webhook sender", leader_lock=runtime.leader_lock
    )
    if task is None:
        sender.close()
        return None
    task.add_done_callback(lambda _: sender.close())
    return task


def purge_outbox(*, db: Database, settings: Settings, now: datetime | None = None) -> int:
    """Delete delivered and dead messages past ``webhook_retention_days`` (in chunks); returns the count."""
    before = (now or datetime.now(UTC)) - timedelta(days=settings.webhook_retention_days)
    total = 0
    while True:
        with db.session() as session:
            n = purge_deliveries(session=session, before=before)
        total += n
        if n == 0:
            break
    if total:
        log.info("webhook outbox: removed %d delivered or dead messages older than %s", total, before)
    return total


def start_outbox_retention(runtime: Runtime) -> asyncio.Task[None] | None:
    """Run :func:`purge_outbox` every hour, the first time a minute after start."""
    return every(
        3600.0,
        partial(purge_outbox, db=runtime.db, settings=runtime.settings),
        name="webhook outbox retention",
        initial_delay_s=60.0,
        leader_lock=runtime.leader_lock,
    )
