"""``every``: periodic jobs run again and again, survive a failing run, stop when cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.scheduling import every, pause_after


def test_runs_repeatedly_in_a_thread_and_survives_failures(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def job() -> None:
        calls.append(threading.current_thread().name)
        if len(calls) == 2:
            raise RuntimeError("database down")

    async def main() -> None:
        task = every(0.02, job, name="test job", initial_delay_s=0.0)
        assert task is not None
        for _ in range(200):
            if len(calls) >= 4:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(calls) >= 4, "the loop must go on after the failing second run"
    assert all(name != "MainThread" for name in calls), "a plain function runs off the event loop"
    assert any("test job failed: database down" in r.getMessage() for r in caplog.records)


def test_coroutine_functions_run_on_the_loop_after_the_initial_delay() -> None:
    seen: list[float] = []

    async def job() -> None:
        seen.append(asyncio.get_running_loop().time())

    async def main() -> float:
        start = asyncio.get_running_loop().time()
        task = every(0.01, job, name="async job", initial_delay_s=0.1)
        assert task is not None
        while len(seen) < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        return start

    start = asyncio.run(main())
    assert seen[0] - start >= 0.09


def test_a_run_longer_than_its_interval_is_logged_and_the_next_starts_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="driftwarden.scheduling"):
        assert 0.5 <= pause_after(now - 0.3, interval_s=1.0, name="quick job") <= 0.7
        assert not caplog.records
        assert pause_after(now - 2.5, interval_s=1.0, name="slow job") == 0.0
    (record,) = caplog.records
    assert "slow job took 2.5 s, longer than its interval of 1.0 s" in record.getMessage()


def test_no_task_when_switched_off() -> None:
    async def main() -> None:
        assert every(0, lambda: None, name="off") is None

    asyncio.run(main())


def test_a_leader_lock_runs_a_job_in_one_process_and_passes_on_when_it_dies(tmp_path: Path) -> None:
    lock = tmp_path / "jobs.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from core.scheduling import is_leader; "
            f"assert is_leader(Path({str(lock)!r})); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        runs: list[int] = []

        async def main() -> None:
            task = every(0.02, lambda: runs.append(1), name="led job", initial_delay_s=0.0, leader_lock=lock)
            assert task is not None
            await asyncio.sleep(0.3)
            assert runs == [], "another process holds the lock: this one must not run the job"
            holder.kill()
            holder.wait()
            for _ in range(100):
                if runs:
                    break
                await asyncio.sleep(0.02)
            task.cancel()

        asyncio.run(main())
        assert runs, "once the holder is gone, this process takes the lock and runs the job"
    finally:
        holder.kill()
        holder.wait()
