"""``every(interval, fn)``: the one periodic-job loop that every domain's ``scheduled.py`` uses."""

from __future__ import annotations

import asyncio
import fcntl
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

log = logging.getLogger("driftwarden.scheduling")


def every(
    interval_s: float,
    fn: Callable[[], object] | Callable[[], Awaitable[object]],
    *,
    name: str,
    initial_delay_s: float | None = None,
    leader_lock: Path | None = None,
) -> asyncio.Task[None] | None:
    """Run ``fn`` every ``interval_s`` seconds on the running loop; None when ``interval_s <= 0``.

    The first run starts after ``initial_delay_s`` (default: one interval). A plain function runs in a
    worker thread, a coroutine function on the loop. Runs start at a fixed rate (a slow run delays the next
    only by its overrun); an exception is logged with ``name`` and never stops the loop. Cancel the task to
    stop it.

    ``leader_lock``: several processes of one server (``serve --workers N``) share a folder; a run happens
    only in the process that holds an exclusive lock on this file (taken at the first run, kept for the
    process's life, taken over by another process at its next run once the holder is gone), so a periodic
    job runs once per server, not once per worker.
    """
    if interval_s <= 0:
        return None
    job = fn if leader_lock is None else _led_by(leader_lock, fn)
    return asyncio.get_running_loop().create_task(_loop(interval_s, job, name, initial_delay_s), name=name)


_held: dict[Path, IO[bytes]] = {}
_held_lock = threading.Lock()


def is_leader(lock: Path) -> bool:
    """Whether this process holds (or now takes) the exclusive lock on ``lock``."""
    with _held_lock:
        if lock in _held:
            return True
        lock.parent.mkdir(parents=True, exist_ok=True)
        fh = open(lock, "ab")  # noqa: SIM115 (held for the life of the process)
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        _held[lock] = fh
        return True


def _led_by(
    lock: Path, fn: Callable[[], object] | Callable[[], Awaitable[object]]
) -> Callable[[], object] | Callable[[], Awaitable[object]]:
    if inspect.iscoroutinefunction(fn):

        async def run_async() -> object:
            return await fn() if is_leader(lock) else None

        return run_async

    def run() -> object:
        return fn() if is_leader(lock) else None

    return run


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
        await asyncio.sleep(pause_after(started, interval_s=interval_s, name=name))


def pause_after(started: float, *, interval_s: float, name: str) -> float:
    """Seconds to wait before the next run of a fixed-rate job whose run began at ``started`` (monotonic).

    A run longer than the interval is logged (a warning naming the job and both times): the next starts at
    once, so runs are then further apart than the interval and the log says why.
    """
    took = time.monotonic() - started
    if took > interval_s:
        log.warning(
            "%s took %.1f s, longer than its interval of %.1f s: the next starts now (a longer interval "
            "keeps the schedule)",
            name,
            took,
            interval_s,
        )
    return max(interval_s - took, 0.0)
