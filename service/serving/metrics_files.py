"""Per-process metric snapshot files for ``serve --workers N`` (one folder shared by the workers).

Each process writes its snapshot (plain JSON) to ``<dir>/<pid>-<start ns>.json``, atomically, from one
daemon thread: once a second, at once when a scrape asks for it, and a last time when the process stops.
A scrape in any process asks every other live process for a fresh snapshot (it replaces ``<dir>/scrape``,
which holds the request's generation, a time in nanoseconds) and waits until each has answered that
generation (at most ``wait_s``, 3 s, well inside Prometheus' scrape timeout; a process that does not answer
in time contributes its previous snapshot). So one scrape sums every request answered before it, in every
process, without any file or lock on the request path. Snapshots of processes that have exited stay: their
counters remain in the sums (counters never go backwards when a worker is replaced); their gauges are left
out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from core.lifecycle import process_alive

log = logging.getLogger("driftwarden.serving.metrics")

SCRAPE = "scrape"


class SnapshotFiles:
    """This process's snapshot file and the reading of every other process's; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        snapshot: Callable[[], dict[str, Any]],
        *,
        poll_s: float = 0.02,
        every_s: float = 1.0,
        wait_s: float = 3.0,
    ) -> None:
        self.directory = directory
        self.snapshot = snapshot
        self.poll_s = poll_s
        self.every_s = every_s
        self.wait_s = wait_s
        self.pid = os.getpid()
        self.path = directory / f"{self.pid}-{time.time_ns()}.json"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._answered = 0  # the last scrape generation this process wrote a snapshot for

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.write(generation=self._generation(), live=True)
        self._thread = threading.Thread(target=self._run, name="driftwarden-metrics-snapshot", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is None:
            return  # never started: this process has no snapshot to finish
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(OSError):
            self.write(generation=self._generation(), live=False)

    def write(self, *, generation: int, live: bool) -> None:
        body = {**self.snapshot(), "pid": self.pid, "generation": generation, "live": live}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(body))
        os.replace(tmp, self.path)
        self._answered = generation

    def _generation(self) -> int:
        try:
            return int((self.directory / SCRAPE).read_bytes() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.poll_s):
            try:
                generation = self._generation()
                if generation != self._answered or time.monotonic() - last >= self.every_s:
                    last = time.monotonic()
                    self.write(generation=generation, live=True)
            except Exception as exc:  # a full or vanished folder: keep serving, say it once a second
                log.warning("metrics: could not write the snapshot %s: %s", self.path, exc)
                time.sleep(self.every_s)

    # -- scrape side -----------------------------------------------------------------------------
    def others(self) -> list[dict[str, Any]]:
        """Every other process's snapshot, fresh for the live ones; ``live`` false for those gone.

        A folder that cannot be written or read (a full disk) gives what is readable, or nothing: the scrape
        still answers with this process's own values and every other collector's (disk free among them).
        """
        try:
            return self._fresh()
        except OSError as exc:
            log.warning("metrics: the snapshots of the other workers are unavailable: %s", exc)
            with contextlib.suppress(OSError):
                return self._read()
            return []

    def _fresh(self) -> list[dict[str, Any]]:
        generation = self._ask()
        deadline = time.monotonic() + self.wait_s
        while True:
            snaps = self._read()
            waiting = [s for s in snaps if s["live"] and s["generation"] < generation]
            if not waiting or time.monotonic() >= deadline:
                return snaps
            time.sleep(0.005)

    def _ask(self) -> int:
        generation = max(time.time_ns(), self._generation() + 1)
        tmp = self.directory / f"{SCRAPE}.{self.pid}.tmp"
        tmp.write_bytes(str(generation).encode())
        os.replace(tmp, self.directory / SCRAPE)
        return generation

    def _read(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in self.directory.glob("*.json"):
            if path == self.path:
                continue
            try:
                snap = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue  # replaced while read: the next poll sees the new one
            snap["live"] = bool(snap.get("live")) and process_alive(int(snap.get("pid", 0)))
            out.append(snap)
        return out
