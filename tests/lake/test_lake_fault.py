"""The lake sink's faults with ``driftwarden serve`` as a real subprocess (``lake_mode=only``, ``durable``):

- the lake folder made unwritable under load: the answers go on, the rows wait in the sink's spool, the
  ``lake`` status says so, and once the folder is writable again they are committed;
- SIGKILL under load: every answered prediction is in a committed file or in the spool on disk; the next
  start commits the spool, and after its SIGTERM the lake holds each answered prediction exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from core.network import free_port
from predictions.lake.files import open_lake
from tests.faults.conftest import Load, spooled_ids, wait_until
from tests.lake.sinkdata import read_lake, unwritable
from tests.support import TrainedModels, count_rows, postgres_schema, seed_registry, wait_http_ready

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "driftwarden")


class LakeServe:
    """``driftwarden serve --workers 1`` logging to a lake alone, on a free port."""

    def __init__(self, url: str, spool: Path, lake: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {
            **os.environ,
            "DRIFTWARDEN_DATABASE_URL": url,
            "DRIFTWARDEN_SPOOL_PATH": str(spool),
            "DRIFTWARDEN_LOG_DURABILITY": "durable",
            "DRIFTWARDEN_LAKE_URL": lake,
            "DRIFTWARDEN_LAKE_MODE": "only",
            "DRIFTWARDEN_LAKE_ROLL_S": "0.5",  # files commit while the load runs
            "DRIFTWARDEN_MONITOR_ENABLED": "false",
            "DRIFTWARDEN_RETENTION_INTERVAL_S": "0",
            "DRIFTWARDEN_WEBHOOK_SENDER_ENABLED": "false",
            "DRIFTWARDEN_LOG_LEVEL": "WARNING",
        }
        argv = [CLI, "serve", "--workers", "1", "--port", str(self.port)]
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        wait_http_ready(f"{self.url}/readyz", log=log, deadline=time.monotonic() + 120, proc=self.proc)

    def lake_status(self) -> dict[str, object]:
        return dict(httpx.get(f"{self.url}/status", timeout=10).json()["prediction_log"]["lake"])

    def stop(self, sig: signal.Signals) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            pytest.fail(f"serve did not exit within 60s of {sig.name}: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def test_unwritable_lake_and_sigkill_lose_no_answered_prediction(
    postgres_url: str, trained: TrainedModels, tmp_path: Path
) -> None:
    lake_dir = tmp_path / "lake"
    lake_dir.mkdir()
    spool = tmp_path / "spool"
    target = open_lake(str(lake_dir))
    with postgres_schema(postgres_url) as url:
        seed_registry(url, trained, serving=1)
        first = LakeServe(url, spool, str(lake_dir), tmp_path / "serve-1.log")
        try:
            with Load(first.url, trained.rows, threads=4, tag="lake") as load:
                load.wait_answered(100, timeout_s=90)
                wait_until("a file committed", lambda: read_lake(target).num_rows > 0, 30)
                with unwritable(lake_dir):
                    wait_until("the lake reported down", lambda: first.lake_status()["ok"] is False, 30)
                    load.wait_answered(100, timeout_s=90)  # answers go on, rows wait in the spool
                    waiting = first.lake_status()["spool_rows"]
                    assert isinstance(waiting, int) and waiting > 0
                wait_until("the lake back", lambda: first.lake_status()["ok"] is True, 30)
                load.wait_answered(100, timeout_s=90)
                assert first.stop(signal.SIGKILL) == -signal.SIGKILL
        finally:
            first.kill()
        killed = set(load.ids)
        committed = set(read_lake(target)["prediction_id"].to_pylist())
        missing = killed - committed - set(spooled_ids(spool))
        assert missing == set(), (
            f"{len(missing)} of {len(killed)} answered rows neither committed nor spooled"
        )

        second = LakeServe(url, spool, str(lake_dir), tmp_path / "serve-2.log")  # commits the spool
        try:
            with Load(second.url, trained.rows, threads=2, tag="again") as again:
                again.wait_answered(50, timeout_s=90)
            assert second.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
        finally:
            second.kill()
        ids = read_lake(target)["prediction_id"].to_pylist()
        assert [i for i, n in Counter(ids).items() if n > 1] == []  # each prediction once
        answered = killed | set(again.ids)
        assert answered <= set(ids), f"{len(answered - set(ids))} answered rows missing from the lake"
        assert len(set(ids) - answered) <= 8  # accepted requests whose answer the kill or the stop cut off
        assert count_rows(url) == 0  # lake_mode=only: nothing in the database's log
        assert not any(p.name.startswith("_") for p in lake_dir.rglob("*"))  # no half-written file
        assert "Traceback" not in (tmp_path / "serve-2.log").read_text()
