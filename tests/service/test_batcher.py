"""The micro-batcher: a lone request goes straight to the model; under load requests share calls."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from service.serving.batcher import MicroBatcher, Traffic

Observed = list[tuple[list[float], float, int]]  # the observer's calls: waits, seconds, rows


class Model:
    """Doubles ``x``; records every call's rows; can be held inside a call until released."""

    def __init__(self) -> None:
        self.calls: list[list[float]] = []
        self.threads: list[int] = []  # the thread of each call
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.fail = False

    def __call__(self, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(columns["x"].tolist())
        self.threads.append(threading.get_ident())
        self.entered.set()
        self.hold.wait(10)
        if self.fail:
            raise RuntimeError("model failed")
        return {"y": columns["x"] * 2}


def _cols(*values: float) -> dict[str, np.ndarray]:
    return {"x": np.array(values, dtype=np.float32)}


async def _started(model: Model, batcher: MicroBatcher) -> None:
    batcher.start()
    await asyncio.sleep(0)


def _batcher(
    model: Model,
    observed: Observed,
    *,
    inline_rows: int = 0,
    traffic: Traffic | None = None,
) -> MicroBatcher:
    return MicroBatcher(
        model,
        max_rows=64,
        max_wait_s=0.0,
        executor=ThreadPoolExecutor(1),
        observer=lambda waits, seconds, rows: observed.append((waits, seconds, rows)),
        inline_rows=inline_rows,
        traffic=traffic,
    )


def test_a_lone_request_runs_at_once_with_its_own_columns() -> None:
    async def scenario() -> None:
        model, observed = Model(), Observed()
        batcher = _batcher(model, observed)
        await _started(model, batcher)
        out = await batcher.submit(_cols(1.0, 2.0), 2)
        assert out["y"].tolist() == [2.0, 4.0]
        assert model.calls == [[1.0, 2.0]]
        assert batcher.calls == 1 and batcher.rows == 2
        assert observed[0][0] == [0.0] and observed[0][2] == 2  # no wait in a queue
        await batcher.close()

    asyncio.run(scenario())


def test_requests_arriving_during_a_call_share_the_next_call_and_get_their_own_slices() -> None:
    async def scenario() -> None:
        model, observed = Model(), Observed()
        batcher = _batcher(model, observed)
        await _started(model, batcher)
        model.hold.clear()
        first = asyncio.create_task(batcher.submit(_cols(1.0), 1))
        await asyncio.to_thread(model.entered.wait, 10)  # the first call is running
        rest = [asyncio.create_task(batcher.submit(_cols(float(v), float(v) + 0.5), 2)) for v in (10, 20, 30)]
        await asyncio.sleep(0.05)
        assert batcher.pending == 3  # queued behind the running call, not sent on their own
        model.hold.set()
        assert (await first)["y"].tolist() == [2.0]
        results = [(await t)["y"].tolist() for t in rest]
        assert results == [[20.0, 21.0], [40.0, 41.0], [60.0, 61.0]]
        assert model.calls == [[1.0], [10.0, 10.5, 20.0, 20.5, 30.0, 30.5]]  # one shared call
        assert batcher.calls == 2 and batcher.rows == 7
        assert len(observed[1][0]) == 3 and observed[1][2] == 6
        await batcher.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("alone", [True, False])
def test_a_failing_model_call_fails_each_of_its_callers(alone: bool) -> None:
    async def scenario() -> None:
        model, observed = Model(), Observed()
        batcher = _batcher(model, observed)
        await _started(model, batcher)
        if alone:
            model.fail = True
            with pytest.raises(RuntimeError, match="model failed"):
                await batcher.submit(_cols(1.0), 1)
        else:
            model.hold.clear()
            first = asyncio.create_task(batcher.submit(_cols(1.0), 1))
            await asyncio.to_thread(model.entered.wait, 10)
            queued = [asyncio.create_task(batcher.submit(_cols(2.0), 1)) for _ in range(2)]
            await asyncio.sleep(0.05)
            model.fail = True
            model.hold.set()
            for task in [first, *queued]:
                with pytest.raises(RuntimeError, match="model failed"):
                    await task
        assert batcher.calls == 0
        model.fail = False
        assert (await batcher.submit(_cols(3.0), 1))["y"].tolist() == [6.0]  # and serves on afterwards
        await batcher.close()

    asyncio.run(scenario())


def test_a_lone_small_request_runs_on_the_loops_thread_and_a_larger_one_on_the_model_thread() -> None:
    async def scenario() -> None:
        model, observed = Model(), Observed()
        batcher = _batcher(model, observed, inline_rows=2)
        await _started(model, batcher)
        loop_thread = threading.get_ident()
        assert (await batcher.submit(_cols(1.0, 2.0), 2))["y"].tolist() == [2.0, 4.0]
        assert (await batcher.submit(_cols(1.0, 2.0, 3.0), 3))["y"].tolist() == [2.0, 4.0, 6.0]
        assert model.threads[0] == loop_thread and model.threads[1] != loop_thread
        assert batcher.calls == 2 and batcher.rows == 5
        assert [o[0] for o in observed] == [[0.0], [0.0]]
        await batcher.close()

    asyncio.run(scenario())


def test_requests_received_together_share_a_call_on_the_model_thread_not_the_loops() -> None:
    """The first claims the model and yields once: the others queue behind it, and it joins them."""

    async def scenario() -> None:
        model, observed = Model(), Observed()
        batcher = _batcher(model, observed, inline_rows=64)
        await _started(model, batcher)
        outs = await asyncio.gather(*(batcher.submit(_cols(float(v)), 1) for v in range(5)))
        assert [o["y"].tolist() for o in outs] == [[0.0], [2.0], [4.0], [6.0], [8.0]]
        assert model.calls == [[0.0, 1.0, 2.0, 3.0, 4.0]]  # one call, the claimer first
        assert model.threads[0] != threading.get_ident()
        await batcher.close()

    asyncio.run(scenario())


def test_a_request_cancelled_while_claiming_the_model_leaves_it_free() -> None:
    async def scenario() -> None:
        model, observed = Model(), Observed()
        batcher = _batcher(model, observed, inline_rows=64)
        await _started(model, batcher)
        claimer = asyncio.create_task(batcher.submit(_cols(1.0), 1))
        await asyncio.sleep(0)  # it has claimed the model and yields
        claimer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await claimer
        out = await asyncio.wait_for(batcher.submit(_cols(2.0), 1), 5)
        assert out["y"].tolist() == [4.0] and model.calls == [[2.0]]
        await batcher.close()

    asyncio.run(scenario())


def test_a_failing_inline_call_fails_its_caller_and_the_next_request_is_served() -> None:
    async def scenario() -> None:
        model, observed = Model(), Observed()
        batcher = _batcher(model, observed, inline_rows=64)
        await _started(model, batcher)
        model.fail = True
        with pytest.raises(RuntimeError, match="model failed"):
            await batcher.submit(_cols(1.0), 1)
        model.fail = False
        assert (await batcher.submit(_cols(3.0), 1))["y"].tolist() == [6.0]
        assert batcher.calls == 1
        await batcher.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("others", [0, 1])
def test_a_small_request_runs_on_the_loop_only_when_no_other_request_is_being_answered(others: int) -> None:
    """``Traffic`` counts the requests the route is answering (this one included)."""

    async def scenario() -> None:
        model, observed, traffic = Model(), Observed(), Traffic()
        batcher = _batcher(model, observed, inline_rows=64, traffic=traffic)
        await _started(model, batcher)
        traffic.in_flight = 1 + others
        assert (await batcher.submit(_cols(1.0), 1))["y"].tolist() == [2.0]
        on_loop = model.threads[0] == threading.get_ident()
        assert on_loop is (others == 0)
        await batcher.close()

    asyncio.run(scenario())
