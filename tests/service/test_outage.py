"""PostgreSQL connection cut mid-load: every request is answered and no log row is lost once it is back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from predictions.batch import ids_from
from tests.service.tcpproxy import TcpProxy
from tests.support import Server, TrainedModels, count_rows, seed_registry, serve_settings


@pytest.fixture
def proxied_pg(postgres_url: str) -> Iterator[tuple[str, str, TcpProxy]]:
    """A schema on the real PostgreSQL, reachable directly and through a proxy that can be cut."""
    schema = f"o_{uuid.uuid4().hex[:10]}"
    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = engine.url
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.start()
    direct = f"{postgres_url}?options=-csearch_path%3D{schema}"
    via_proxy = direct.replace(f"{url.host}:{url.port or 5432}", f"127.0.0.1:{proxy.port}")
    assert via_proxy != direct
    yield direct, via_proxy, proxy
    proxy.cut()
    with engine.connect() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    engine.dispose()


@pytest.mark.parametrize("durability", ["fast", "durable"])
def test_connection_cut_mid_load_loses_no_row(
    proxied_pg: tuple[str, str, TcpProxy], trained: TrainedModels, tmp_path: Path, durability: str
) -> None:
    direct, via_proxy, proxy = proxied_pg
    seed_registry(direct, trained, serving=1)
    answered = 0
    answered_ids: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()
    phase = {"name": "before"}

    def load(k: int, stop: threading.Event) -> None:
        nonlocal answered
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            i = k
            while not stop.is_set():
                rows = [trained.rows[(i + j) % 300] for j in range(1 + i % 2)]
                i += 3
                r = c.post(
                    "/v1/models/credit:predict",
                    json={"instances": rows},
                    headers={"X-Request-Id": f"outage-{phase['name']}"},
                )
                with lock:
                    if r.status_code == 200:
                        answered += len(rows)
                        answered_ids.extend(r.json()["prediction_ids"])
                    else:
                        failures.append(f"{r.status_code} {r.text[:200]}")

    with Server(
        serve_settings(via_proxy, tmp_path / "spool", log_retry_interval_s=0.2, log_durability=durability)
    ) as srv:
        stop = threading.Event()
        threads = [threading.Thread(target=load, args=(k, stop)) for k in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        phase["name"] = "down"
        proxy.cut()  # every connection to PostgreSQL dies mid-load
        time.sleep(2.0)
        writer = srv.state.writer
        spooled_while_down = writer.spool.pending_rows
        db_ok_while_down = writer.stats.database_ok
        phase["name"] = "after"
        proxy.start()
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join()
        assert writer.flush(timeout_s=30)
        stats = writer.stats
    assert failures == []
    assert spooled_while_down > 0 and not db_ok_while_down
    assert stats.rows_dropped == 0 and stats.rows_replayed >= spooled_while_down
    assert count_rows(direct, "request_id like 'outage-%'") == answered
    assert count_rows(direct, "request_id = 'outage-down'") > 0
    engine = create_engine(direct)
    with engine.connect() as conn:
        batches = conn.execute(text("select first_id, size from prediction_batches")).all()
    engine.dispose()
    logged = [pid for first, size in batches for pid in ids_from(str(first), size)]
    assert len(logged) == len(set(logged)) == answered  # no prediction written twice by the replay
    assert set(logged) == set(answered_ids)
