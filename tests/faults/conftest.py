"""Fixtures and helpers of the fault tests: a PostgreSQL of their own, a load generator that keeps every
answered prediction id, readers of the prediction ids in the log table and in the spool files."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from predictions.batch import LogBatch, ids_from, pack_floats
from predictions.service import new_prediction_ids
from predictions.spool import SUFFIX, decode_row
from tests.support import OwnPostgres, postgres_schema


@pytest.fixture(scope="module")
def own_pg() -> Iterator[OwnPostgres]:
    """A PostgreSQL instance this module starts (initdb + pg_ctl) and may stop; removed afterwards."""
    pg = OwnPostgres()
    try:
        pg.init()
        pg.start()
        yield pg
    finally:
        pg.destroy()


@pytest.fixture
def pg_url(own_pg: OwnPostgres) -> Iterator[str]:
    """A fresh migrated schema on :func:`own_pg`; the server runs again at the end even if the test failed."""
    with postgres_schema(own_pg.url) as url:
        try:
            yield url
        finally:
            if not own_pg.running():
                own_pg.start()


class Load:
    """``threads`` clients posting 1-2 rows per request to ``:predict`` until stopped.

    Keeps the prediction ids of every 200 answer, the other answers (status and body, or the transport
    error) and the latency of every 200 answer.
    """

    def __init__(
        self, base_url: str, rows: list[dict[str, Any]], *, threads: int = 3, tag: str = "load"
    ) -> None:
        self.base_url = base_url
        self.rows = rows
        self.tag = tag
        self.ids: list[str] = []
        self.failures: list[str] = []
        self.latencies: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(threads)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _run(self, k: int) -> None:
        i = k
        with httpx.Client(base_url=self.base_url, timeout=30) as c:
            while not self._stop.is_set():
                batch = [self.rows[(i + j) % len(self.rows)] for j in range(1 + i % 2)]
                i += len(self._threads)
                t0 = time.perf_counter()
                try:
                    r = c.post(
                        "/v1/models/credit:predict",
                        json={"instances": batch},
                        headers={"X-Request-Id": self.tag},
                    )
                except httpx.TransportError as exc:
                    with self._lock:
                        self.failures.append(f"{type(exc).__name__}: {exc}")
                    if self._stop.wait(0.05):
                        return
                    continue
                took = time.perf_counter() - t0
                with self._lock:
                    if r.status_code == 200:
                        self.ids.extend(r.json()["prediction_ids"])
                        self.latencies.append(took)
                    else:
                        self.failures.append(f"{r.status_code} {r.text[:300]}")

    def answered(self) -> int:
        with self._lock:
            return len(self.ids)

    def wait_answered(self, n: int, timeout_s: float = 60.0) -> None:
        """Until at least ``n`` more rows than now are answered."""
        target = self.answered() + n
        deadline = time.monotonic() + timeout_s
        while self.answered() < target:
            assert time.monotonic() < deadline, f"{self.tag}: {n} rows not answered in {timeout_s}s"
            assert not self._stop.is_set()
            time.sleep(0.02)

    def p50_s(self) -> float:
        with self._lock:
            return statistics.median(self.latencies)


def log_row(i: int, size: int = 1) -> LogBatch:
    """The log batch of a request of ``size`` predictions with fresh prediction ids (about 400 bytes in the
    spool for one prediction, 250 more for each other), as a request without a typed copy logs it."""
    first = new_prediction_ids(size)[0]  # the ids of one call count up: one batch holds them
    return LogBatch(
        id_prefix=first[:-3],
        id_low=int(first[-3:], 16),
        size=size,
        request_id=f"r{i}",
        model_name="credit",
        model_version=1,
        logged_at=datetime.now(UTC),
        latency_ms=1.0,
        status="ok",
        protocol="v1",
        source="serve",
        layout=None,
        numbers=None,
        categories=None,
        outputs=pack_floats([0.5] * size),
        vectors=None,
        flags=None,
        inputs=[{"income": 1000.0 + i + k, "note": "x" * 200} for k in range(size)],
    )


def logged_ids(url: str) -> list[str]:
    """Every prediction id in the log table (a batch's ids in position order; duplicates kept)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text("select first_id, size from prediction_batches order by id"))
            return [pid for first, size in found for pid in ids_from(str(first), size)]
    finally:
        engine.dispose()


def spooled_ids(spool_root: Path) -> list[str]:
    """The prediction ids of every whole line of every segment under ``spool_root`` (replayed or not)."""
    ids: list[str] = []
    for seg in sorted(spool_root.rglob(f"*{SUFFIX}")):
        for line in seg.read_bytes().splitlines(keepends=True):
            if line.endswith(b"\n"):
                ids += decode_row(line).ids()
    return ids


def wait_until(what: str, fn: Any, timeout_s: float, every_s: float = 0.05) -> float:
    """Seconds until ``fn()`` is true; fails naming ``what`` after ``timeout_s``."""
    t0 = time.monotonic()
    while not fn():
        if time.monotonic() - t0 > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s}s")
        time.sleep(every_s)
    return time.monotonic() - t0
