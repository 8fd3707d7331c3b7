"""A Prometheus collector that answers scrapes from a cache a periodic job refreshes from the database.

A scrape must never wait on the database: :meth:`CachedCollector.refresh` (run by ``core.scheduling.every``)
reads a snapshot, :meth:`CachedCollector.collect` (a scrape) only turns the cached snapshot into metric
families. When the database cannot be read, the last snapshot stays and the failure is logged once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Generic, TypeVar

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from core.config import Settings

S = TypeVar("S")
log = logging.getLogger("driftwarden.metrics")


class CachedCollector(Collector, Generic[S]):
    """Subclasses give :meth:`read` (database -> snapshot) and :meth:`families` (snapshot -> metrics)."""

    MIN_REFRESH_S = 0.5
    what = "metrics"  # named in the log line when the database cannot be read

    def __init__(self, *, settings: Settings, empty: S) -> None:
        self.settings = settings
        self._snapshot = empty
        self.read_at: float | None = None  # monotonic time of the last successful read
        self.refreshes = 0  # reads attempted and finished (successful or not)
        self._failing = False
        self._lock = threading.Lock()

    def read(self) -> S:
        """A fresh snapshot from the database (raises when it cannot be read)."""
        raise NotImplementedError

    def families(self, snapshot: S, *, now: float) -> list[Metric]:
        """The metric families of ``snapshot``; ``now`` (Unix time) dates ages."""
        raise NotImplementedError

    def accepted(self, old: S, new: S) -> None:
        """Called with the previous and the new snapshot after a successful read (e.g. to log a change)."""

    def refresh_interval_s(self) -> float:
        """Seconds between two reads of the database by the refresh job."""
        return max(self.settings.drift_metrics_cache_s, self.MIN_REFRESH_S)

    def refresh(self) -> None:
        """Read a snapshot into the cache; when the database cannot be read, keep the last values."""
        try:
            snapshot = self.read()
        except Exception as exc:  # the database is down: keep the last values, say so once
            if not self._failing:
                log.warning("%s: cannot read the database, keeping the last values: %s", self.what, exc)
            self._failing = True
        else:
            self._failing = False
            self.accepted(self.snapshot(), snapshot)
            with self._lock:
                self._snapshot = snapshot
                self.read_at = time.monotonic()
        finally:
            with self._lock:
                self.refreshes += 1

    def snapshot(self) -> S:
        """The cached snapshot (never reads the database)."""
        with self._lock:
            return self._snapshot

    def collect(self) -> Iterator[Metric]:
        yield from self.families(self.snapshot(), now=time.time())
