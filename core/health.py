"""Health checks: each package that owns a dependency checks it; the API process runs them and reports.

A :class:`HealthCheck` is a name and a function returning a :class:`Status` (ok, a one-line detail and an
optional measured value). :class:`HealthMonitor` runs every check in parallel, each in its own thread with a
timeout (a check that hangs fails with "timed out" and is not started again until it returns), keeps the
latest results for ``/readyz`` and exports them through :class:`HealthCollector`:
``driftwarden_health_check_up{check}``, ``driftwarden_health_check_duration_seconds{check}``, plus the
gauges a check declares (``driftwarden_database_up``, ``driftwarden_database_rtt_seconds``,
``driftwarden_disk_free_bytes{path}``).

The checks of ``core`` live here: the database (reachable, round-trip time) and the free disk space under
the data folders.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import text

from core.config import Settings
from core.database import Database, is_sqlite

log = logging.getLogger("driftwarden.health")


@dataclass(frozen=True)
class Status:
    """What one check found: ``ok``, a one-line ``detail`` and optionally the number it measured."""

    ok: bool
    detail: str
    value: float | None = None


@dataclass(frozen=True)
class Gauge:
    """A gauge a check feeds with its :attr:`Status.value` (``up``: with 1/0 from :attr:`Status.ok`)."""

    name: str
    doc: str
    labels: dict[str, str] = field(default_factory=dict)
    up: bool = False


@dataclass(frozen=True)
class HealthCheck:
    """A named check; ``gauges`` are exported from its result beside the generic up/duration series.

    ``ready``: a failure makes ``/readyz`` answer 503 (otherwise it is reported, exported and alerted on).
    """

    name: str
    fn: Callable[[], Status]
    gauges: tuple[Gauge, ...] = ()
    ready: bool = True


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one run of a check."""

    name: str
    ok: bool
    detail: str
    duration_s: float
    value: float | None
    checked_at: float  # time.monotonic()
    ready: bool = True  # counts for /readyz

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "detail": self.detail, "duration_s": round(self.duration_s, 6)}


class _Run:
    """One check running in its own thread."""

    def __init__(self, check: HealthCheck) -> None:
        self.check = check
        self.started = time.monotonic()
        self.done = threading.Event()
        self.status: Status | None = None
        self.duration_s = 0.0
        thread = threading.Thread(target=self._run, name=f"health {check.name}", daemon=True)
        thread.start()

    def _run(self) -> None:
        try:
            self.status = self.check.fn()
        except Exception as exc:  # a check that raises has failed; its message is the detail
            self.status = Status(False, f"{type(exc).__name__}: {exc}"[:300])
        finally:
            self.duration_s = time.monotonic() - self.started
            self.done.set()


class HealthMonitor:
    """Runs the checks ``sources`` return (re-read on every run) and keeps the latest results."""

    def __init__(self, sources: Sequence[Callable[[], Sequence[HealthCheck]]], *, timeout_s: float) -> None:
        self.sources = list(sources)
        self.timeout_s = timeout_s
        self._results: dict[str, CheckResult] = {}
        self._checks: dict[str, HealthCheck] = {}
        self._running: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._last_run: float | None = None

    def checks(self) -> list[HealthCheck]:
        """The current checks (a source that fails is logged and skipped)."""
        out: list[HealthCheck] = []
        for source in self.sources:
            try:
                out.extend(source())
            except Exception as exc:
                log.warning("health check source %s failed: %s", getattr(source, "__name__", source), exc)
        return out

    def run(self) -> dict[str, CheckResult]:
        """Run every check now, in parallel, each for at most ``timeout_s``; returns the results."""
        with self._run_lock:
            checks = self.checks()
            runs: list[_Run] = []
            for check in checks:
                previous = self._running.get(check.name)
                if previous is not None and not previous.done.is_set():
                    runs.append(previous)  # still hanging from an earlier run: never pile threads up
                else:
                    runs.append(_Run(check))
                    self._running[check.name] = runs[-1]
            deadline = time.monotonic() + self.timeout_s
            results: dict[str, CheckResult] = {}
            for check, r in zip(checks, runs, strict=True):
                finished = r.done.wait(max(deadline - time.monotonic(), 0.0))
                now = time.monotonic()
                if finished and r.status is not None:
                    s = r.status
                    results[check.name] = CheckResult(
                        check.name, s.ok, s.detail, r.duration_s, s.value, now, check.ready
                    )
                else:
                    waited = now - r.started
                    detail = f"timed out: no answer after {waited:.1f}s (limit {self.timeout_s:g}s)"
                    results[check.name] = CheckResult(
                        check.name, False, detail, waited, None, now, check.ready
                    )
            for name in set(self._running) - set(results):
                self._running.pop(name, None)
            for res in results.values():
                if not res.ok and (old := self._results.get(res.name)) is not None and old.ok:
                    log.warning("health check %s failed: %s", res.name, res.detail)
                elif res.ok and (old := self._results.get(res.name)) is not None and not old.ok:
                    log.info("health check %s ok again: %s", res.name, res.detail)
            with self._lock:
                self._results = results
                self._checks = {c.name: c for c in checks}
                self._last_run = time.monotonic()
            return dict(results)

    def results(self, *, max_age_s: float | None = None) -> dict[str, CheckResult]:
        """The latest results; run the checks first when none exist or they are older than ``max_age_s``."""
        with self._lock:
            last = self._last_run
            results = dict(self._results)
        if last is None or (max_age_s is not None and time.monotonic() - last > max_age_s):
            return self.run()
        return results

    def snapshot(self) -> tuple[dict[str, HealthCheck], dict[str, CheckResult]]:
        """The checks and results of the last run (for the collector; never runs a check)."""
        with self._lock:
            return dict(self._checks), dict(self._results)


def readiness(results: dict[str, CheckResult]) -> tuple[bool, dict[str, Any]]:
    """``/readyz``: ready when every check that counts for readiness passed; the body names the failing
    checks (those that do not count are listed, never failing the answer)."""
    failing = sorted(name for name, r in results.items() if not r.ok and r.ready)
    body: dict[str, Any] = {
        "ready": not failing,
        "checks": {n: r.as_dict() for n, r in sorted(results.items())},
    }
    if failing:
        body["error"] = "not ready: failing checks: " + ", ".join(
            f"{n} ({results[n].detail})" for n in failing
        )
    return not failing, body


class HealthCollector(Collector):
    """Exports the last results of a :class:`HealthMonitor` (a scrape never runs a check)."""

    def __init__(self, monitor: HealthMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[GaugeMetricFamily]:
        checks, results = self.monitor.snapshot()
        up = GaugeMetricFamily(
            "driftwarden_health_check_up", "1 if the health check passed on its last run.", labels=["check"]
        )
        duration = GaugeMetricFamily(
            "driftwarden_health_check_duration_seconds",
            "Duration of the last run of the check.",
            labels=["check"],
        )
        extra: dict[str, GaugeMetricFamily] = {}
        for name, r in sorted(results.items()):
            up.add_metric([name], float(r.ok))
            duration.add_metric([name], r.duration_s)
            check = checks.get(name)
            for g in check.gauges if check is not None else ():
                value = float(r.ok) if g.up else r.value
                if value is None:
                    continue
                family = extra.get(g.name)
                if family is None:
                    family = extra[g.name] = GaugeMetricFamily(g.name, g.doc, labels=list(g.labels))
                family.add_metric(list(g.labels.values()), value)
        yield up
        yield duration
        yield from extra.values()


# --- the checks of core -----------------------------------------------------------------------------------


def database_check(db: Database) -> HealthCheck:
    """The database answers ``SELECT 1``; the value is the round-trip time of that query."""

    def check() -> Status:
        with db.engine.connect() as conn:
            started = time.perf_counter()
            conn.execute(text("SELECT 1")).scalar_one()
            rtt = time.perf_counter() - started
        return Status(True, f"SELECT 1 answered in {rtt * 1000:.1f} ms", rtt)

    return HealthCheck(
        "database",
        check,
        gauges=(
            Gauge("driftwarden_database_up", "1 if the database answered the last health check.", up=True),
            Gauge(
                "driftwarden_database_rtt_seconds", "Round-trip time of SELECT 1 in the last health check."
            ),
        ),
    )


def data_folders(settings: Settings) -> dict[str, Path]:
    """The folders driftwarden writes to, by label: registry, spool, checkpoints, and an SQLite file's."""
    folders = {
        "registry": settings.registry_path,
        "spool": settings.spool_path,
        "checkpoints": settings.checkpoint_path,
    }
    url = settings.database_url.get_secret_value()
    if is_sqlite(url):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            folders["database"] = Path(path).parent
    return folders


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (a folder not created yet lives on its parent's disk)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_check(label: str, path: Path, *, min_free_bytes: float) -> HealthCheck:
    """The disk holding ``path`` has at least ``min_free_bytes`` free; the value is the free bytes."""

    def check() -> Status:
        free = shutil.disk_usage(_existing(path)).free
        ok = free >= min_free_bytes
        detail = f"{free / 2**20:.0f} MiB free under {path}" + (
            "" if ok else f", below the minimum of {min_free_bytes / 2**20:.0f} MiB"
        )
        return Status(ok, detail, float(free))

    gauge = Gauge("driftwarden_disk_free_bytes", "Free bytes on the disk of a data folder.", {"path": label})
    return HealthCheck(f"disk:{label}", check, gauges=(gauge,))


def core_checks(*, settings: Settings, db: Database) -> list[HealthCheck]:
    """The database and one disk check per data folder."""
    min_free = settings.health_disk_min_free_mb * 2**20
    disks = [disk_check(label, p, min_free_bytes=min_free) for label, p in data_folders(settings).items()]
    return [database_check(db), *disks]
