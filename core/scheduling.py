"""``every(interval, fn)``: the one periodic-job loop that every domain's ``scheduled.py`` uses."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("driftwarden.scheduling")


def every(
    interval_s: float,
    fn: Callable[[], object] | Callable[[], Awaitable[object]],
    *,
    name: str,
    initial_delay_s: float | None = None,
) -> asyncio.Task[None] | None:
    """Run ``fn`` every ``interval_s`` seconds on the running loop; None when ``interval_s <= 0``.

    The first run starts after ``initial_delay_s`` (default: one interval). A plain function runs in a
    worker thread, a coroutine function on the loop. Runs start at a fixed rate (a slow run delays the next
    only by its overrun); an exception is logged with ``name`` and never stops the loop. Cancel the task to
    stop it.
    """
    if interval_s <= 0:
        return None
    return asyncio.get_running_loop().create_task(_loop(interval_s, fn, name, initial_delay_s), name=name)


async def _loop(
    interval_s: float,
    fn: Callable[[], object] | Callable[[], Awaitable[object]],
    name: str,
    initial_delay_s: float | None,
) -> None:
    await asyncio.sleep(interval_s if initial_delay_s is None else initial_delay_s)
    is_async = inspect.iscoroutinefunction(fn)
    while True:
        started = time.monotonic()
        try:
            if is_async:
                await fn()  # type: ignore[misc]
            else:
                await asyncio.to_thread(fn)
        except Exception as exc:  # e.g. the database is down: try again next interval
            log.warning("%s failed: %s", name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        await asyncio.sleep(max(interval_s - (time.monotonic() - started), 0.0))
