"""Helpers for tests that run the real ``driftwarden`` CLI with real TensorFlow cluster processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def pid_alive(pid: int) -> bool:
    """True for a live process (a zombie counts as dead: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Workspace:
    """A folder with its own var/ (SQLite, registry, checkpoints) and a baseline data file."""

    root: Path
    data: Path

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTWARDEN_")}
        env.update(
            DRIFTWARDEN_DATABASE_URL=f"sqlite:///{self.root / 'var' / 'driftwarden.db'}",
            DRIFTWARDEN_REGISTRY_PATH=str(self.root / "var" / "models"),
            DRIFTWARDEN_CHECKPOINT_PATH=str(self.root / "var" / "checkpoints"),
            DRIFTWARDEN_WORKER_RESTART_DELAY_S="1",
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self, *args: str, log_name: str) -> tuple[subprocess.Popen[bytes], Path]:
        """Start ``driftwarden ARGS`` with its output (stdout+stderr) going to a log file."""
        log = self.root / log_name
        fh = open(log, "wb")  # noqa: SIM115 (owned by the child)
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", *args],
            cwd=self.root,
            env=self.env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        fh.close()
        return proc, log

    def run(self, *args: str, log_name: str, timeout: float = 300) -> tuple[int, str]:
        proc, log = self.start(*args, log_name=log_name)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(
                f"driftwarden {' '.join(args)} timed out; log:\n{log.read_text()[-4000:]}"
            ) from None
        return rc, log.read_text()

    def pids(self) -> dict[str, list[int]]:
        """Every PID any launcher in this workspace started, by node (from each run's pids.json)."""
        out: dict[str, list[int]] = {}
        for path in (self.root / "var" / "checkpoints").glob("*/nodes/pids.json"):
            for node, pids in json.loads(path.read_text()).items():
                if node != "launcher":
                    out.setdefault(node, []).extend(pids)
        return out

    def assert_no_cluster_process(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            alive = {node: [p for p in pids if pid_alive(p)] for node, pids in self.pids().items()}
            alive = {n: p for n, p in alive.items() if p}
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert self.pids(), "no pids.json found: the launcher did not record its processes"
        assert not alive, f"cluster processes survived: {alive}"


def wait_for(
    log: Path, pattern: str, *, proc: subprocess.Popen[bytes], timeout: float = 180
) -> re.Match[str]:
    """Block until ``pattern`` appears in ``log`` (fail if the process ends first)."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        m = rx.search(text)
        if m:
            return m
        if proc.poll() is not None:
            raise AssertionError(
                f"process exited ({proc.returncode}) before {pattern!r}; log:\n{text[-4000:]}"
            )
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} not seen in {timeout}s; log:\n{log.read_text()[-4000:]}")


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def run_cli(*args: str | Path) -> Any:
    """``driftwarden ARGS`` through typer's runner (stderr kept apart)."""
    from typer.testing import CliRunner

    from service.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def refused(result: Any, *parts: str) -> None:
    """``result`` is one ``error:`` line naming each of ``parts``, with exit code 2 and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in result.output, err
    for part in parts:
        assert part in err, (part, err)
