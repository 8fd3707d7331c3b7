"""Adaptive micro-batching (TF Serving's batching idea): concurrent requests share one model call.

While a model call runs in the executor thread, new requests queue up; the next call takes all of them
(up to ``max_rows`` rows). Under no load a request runs alone at once: with nothing queued and no call
running it goes straight to the executor from its own coroutine (no hand-over to the batching task), and
under load batches grow by themselves. ``max_wait_s`` > 0 additionally lets a batch wait that long for
company, but only when the previous call was shared by several requests (there is load to wait for).

A request of at most ``inline_rows`` rows that is the only one the process is answering (``Traffic``, counted
by the route) runs the model on the event loop's own thread: handing it to the executor thread and its
result back costs two thread wake-ups and GIL hand-overs, more CPU than a small model's call, and on a busy
machine a wait for whichever core is free. The loop is blocked for that one call, and nothing is waiting
for it: before calling, the request claims the model (later arrivals queue) and yields to the loop once, so
that requests already received start; if any did, it shares the next call with them or calls through the
executor as before (so concurrent requests are never serialized on the loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("driftwarden.serving.batcher")

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
# after each model call: every request's wait in the queue (s), the call's duration (s), its rows
BatchObserver = Callable[[list[float], float, int], None]


@dataclass
class _Item:
    columns: dict[str, np.ndarray]
    n: int
    future: asyncio.Future[dict[str, np.ndarray]]
    queued_at: float


class Traffic:
    """Predict requests the process is answering (counted by the route from the start of the body's read):
    a request runs inline only when it is the only one."""

    __slots__ = ("in_flight",)

    def __init__(self) -> None:
        self.in_flight = 0


class BatcherClosed(RuntimeError):
    """The version this batcher belongs to was unloaded."""


class MicroBatcher:
    """Queue requests for one model version and run them in combined calls."""

    def __init__(
        self,
        runner: Runner,
        *,
        max_rows: int,
        max_wait_s: float,
        executor: ThreadPoolExecutor,
        observer: BatchObserver | None = None,
        inline_rows: int = 0,
        traffic: Traffic | None = None,
    ) -> None:
        self.runner = runner
        self.max_rows = max_rows
        self.max_wait_s = max_wait_s
        self.inline_rows = inline_rows  # a lone request up to this many rows runs on the loop (0: never)
        self.traffic = traffic if traffic is not None else Traffic()  # a bare batcher: no requests counted
        self.executor = executor
        self.observer = observer
        self.calls = 0
        self.rows = 0
        self._pending: deque[_Item] = deque()
        self._wake = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._last_shared = False
        self._busy = False  # a model call is running (direct or batched): arrivals queue for the next batch

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="micro-batcher")

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def submit(self, columns: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        """Queue one request's columns; resolves to its slice of the outputs."""
        if self._closed:
            raise BatcherClosed("model version unloaded")
        loop = asyncio.get_running_loop()
        if not self._pending and not self._busy:  # alone: no company to wait for, no task to hand over to
            if n <= self.inline_rows and self.traffic.in_flight <= 1:
                return await self._inline(loop, columns, n)
            return await self._direct(loop, columns, n)
        return await self._queue(loop, columns, n)

    async def _queue(
        self, loop: asyncio.AbstractEventLoop, columns: dict[str, np.ndarray], n: int, *, first: bool = False
    ) -> dict[str, np.ndarray]:
        """Wait for a share of the next batched call (``first``: at the head of the queue)."""
        fut: asyncio.Future[dict[str, np.ndarray]] = loop.create_future()
        item = _Item(columns, n, fut, time.perf_counter())
        if first:
            self._pending.appendleft(item)
        else:
            self._pending.append(item)
        self._wake.set()
        return await fut

    async def _inline(
        self, loop: asyncio.AbstractEventLoop, columns: dict[str, np.ndarray], n: int
    ) -> dict[str, np.ndarray]:
        """A lone small request's model call on the loop's thread, unless company arrives first."""
        self._busy = True  # claimed: requests arriving meanwhile queue for the next batch
        self._last_shared = False
        try:
            await asyncio.sleep(0)  # requests already received run up to this batcher and queue
        except BaseException:  # cancelled while looking: release the claim for the queue behind it
            self._release()
            raise
        if self._pending:  # company: share the next call with it, through the executor
            self._release()
            return await self._queue(loop, columns, n, first=True)
        if self.traffic.in_flight > 1:  # another request is on its way here: the model thread, as before
            self._busy = False
            return await self._direct(loop, columns, n)
        try:
            outputs, seconds = self._run([columns])
        except Exception:
            log.exception("model call failed for a request of %d rows", n)
            raise
        finally:
            self._release()
        self._count([0.0], seconds, n)
        return outputs

    def _release(self) -> None:
        self._busy = False
        if self._pending:
            self._wake.set()

    def _count(self, waits: list[float], seconds: float, rows: int) -> None:
        self.calls += 1
        self.rows += rows
        if self.observer is not None:
            self.observer(waits, seconds, rows)

    async def _direct(
        self, loop: asyncio.AbstractEventLoop, columns: dict[str, np.ndarray], n: int
    ) -> dict[str, np.ndarray]:
        """One request's own model call; requests arriving meanwhile queue for the next batch."""
        self._busy = True
        self._last_shared = False
        try:
            outputs, seconds = await loop.run_in_executor(self.executor, self._run, [columns])
        except Exception:
            log.exception("model call failed for a request of %d rows", n)
            raise
        finally:
            self._release()
        self._count([0.0], seconds, n)
        return outputs

    async def close(self) -> None:
        """Finish what is queued, then stop."""
        self._closed = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending or self._busy:
                if self._closed and not self._pending:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.max_wait_s > 0 and self._last_shared and self._rows_pending() < self.max_rows:
                await asyncio.sleep(self.max_wait_s)
            batch: list[_Item] = []
            rows = 0
            while self._pending and (not batch or rows + self._pending[0].n <= self.max_rows):
                item = self._pending.popleft()
                if item.future.cancelled():
                    continue
                batch.append(item)
                rows += item.n
            if not batch:
                continue
            taken = time.perf_counter()
            self._last_shared = len(batch) > 1
            self._busy = True
            try:
                outputs, seconds = await loop.run_in_executor(
                    self.executor, self._run, [item.columns for item in batch]
                )
            except Exception as exc:  # the model failed: every caller of this batch gets the error
                log.exception("model call failed for a batch of %d rows", rows)
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                continue
            finally:
                self._busy = False
            self._count([taken - item.queued_at for item in batch], seconds, rows)
            start = 0
            for item in batch:
                part = {k: v[start : start + item.n] for k, v in outputs.items()}
                start += item.n
                if not item.future.done():
                    item.future.set_result(part)

    def _rows_pending(self) -> int:
        return sum(i.n for i in self._pending)

    def _run(self, parts: list[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], float]:
        """The model call on the requests' columns, joined (executor thread), and its duration in seconds."""
        if len(parts) == 1:
            columns = parts[0]
        else:
            columns = {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}
        t0 = time.perf_counter()
        outputs = self.runner(columns)
        return outputs, time.perf_counter() - t0
