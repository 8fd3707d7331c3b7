"""The start contract of the API process's components (database, log writer, model manager, periodic jobs, the
embedded retraining worker, ...): each is an async context manager.

Entering a component starts it and gives its handle (None when the settings switch it off); leaving stops it.
The app's lifespan enters every component on one ``contextlib.AsyncExitStack``, so components stop in the
reverse order of their start, and a component that fails to start stops the ones started before it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeAlias, TypeVar

T = TypeVar("T")
R = TypeVar("R")

Component: TypeAlias = AbstractAsyncContextManager[T]
"""A component giving a handle of type ``T``: ``handle = await stack.enter_async_context(component)``."""


@asynccontextmanager
async def periodic(
    start: Callable[[R], asyncio.Task[None] | None], runtime: R
) -> AsyncIterator[asyncio.Task[None] | None]:
    """A periodic job: ``start(runtime)`` on entry (a domain's ``scheduled.py`` starting it with
    :func:`core.scheduling.every`; None: switched off), the task cancelled on exit."""
    task = start(runtime)
    try:
        yield task
    finally:
        if task is not None:
            task.cancel()


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
