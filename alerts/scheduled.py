"""The outbox sender's periodic job (in the API process, one worker of ``serve --workers N``)."""

from __future__ import annotations

import asyncio
import logging

from alerts.sender import send_due
from core.runtime import Runtime
from core.scheduling import every

log = logging.getLogger("driftwarden.alerts")


def start_sender(runtime: Runtime) -> asyncio.Task[None] | None:
    """Send due webhook deliveries every ``webhook_send_interval_s``; None when the sender is off."""
    settings = runtime.settings
    if not settings.webhook_sender_enabled:
        log.info("webhook sender off (DRIFTWARDEN_WEBHOOK_SENDER_ENABLED=false)")
        return None

    def run() -> int:
        return send_due(db=runtime.db, settings=settings)

    return every(
        settings.webhook_send_interval_s, run, name="webhook sender", leader_lock=runtime.leader_lock
    )
