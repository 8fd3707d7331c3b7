"""``driftwarden serve --workers 1`` as a real subprocess on a free port, for the fault tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from core.network import free_port
from tests.support import wait_http_ready

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "driftwarden")
QUIET = {
    "DRIFTWARDEN_MONITOR_ENABLED": "false",
    "DRIFTWARDEN_RETENTION_INTERVAL_S": "0",
    "DRIFTWARDEN_WEBHOOK_SENDER_ENABLED": "false",
    "DRIFTWARDEN_LOG_LEVEL": "WARNING",
}


class ServeProcess:
    """The API process on the given database and spool, other settings from ``env``, output to ``log``."""

    def __init__(self, *, url: str, spool: Path, log: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        full = {
            **os.environ,
            **QUIET,
            **env,
            "DRIFTWARDEN_DATABASE_URL": url,
            "DRIFTWARDEN_SPOOL_PATH": str(spool),
        }
        argv = [CLI, "serve", "--workers", "1", "--port", str(self.port)]
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, env=full, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        wait_http_ready(f"{self.url}/readyz", log=log, deadline=time.monotonic() + 120, proc=self.proc)

    def tail(self) -> str:
        """The last 3,000 characters of the process's output."""
        return self.log.read_text(errors="replace")[-3000:]

    def status(self) -> dict[str, object]:
        """``GET /status`` as a dict."""
        return dict(httpx.get(f"{self.url}/status", timeout=10).json())

    def signal(self, sig: signal.Signals, timeout_s: float = 60) -> int:
        """Send ``sig`` and return the exit code; fail the test when the process outlives ``timeout_s``."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"serve did not exit within {timeout_s}s of {sig.name}: {self.tail()}")

    def kill(self) -> None:
        """SIGKILL the process when it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
