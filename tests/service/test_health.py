"""Liveness, readiness and the health checks: real servers, a real model, and a PostgreSQL this test owns.

The acceptance test starts its own PostgreSQL (initdb + pg_ctl, as the ``postgres`` user when run as root),
serves from it, stops it: ``/readyz`` answers 503 naming the database and ``driftwarden_database_up`` drops
to 0 within one health interval while ``/healthz`` stays 200 and predictions keep answering (their rows go
to the spool); started again, the server is ready again and the spooled rows reach the database.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from core.config import Settings
from core.database import open_database
from core.health import HealthCheck, HealthMonitor, Status, core_checks, readiness
from core.network import free_port
from registry.service import promote, register_version
from tests.support import (
    OwnPostgres,
    Server,
    TrainedModels,
    copy_version,
    count_rows,
    seed_registry,
    serve_settings,
)
from training.cluster.health import cluster_checks


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def wait_for(what: str, fn: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> float:
    """Seconds until ``fn()`` held; fails naming ``what`` after ``timeout_s``."""
    t0 = time.monotonic()
    while not fn():
        if time.monotonic() - t0 > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s}s")
        time.sleep(every_s)
    return time.monotonic() - t0


# --- all well -------------------------------------------------------------------------------------------


def test_healthz_and_readyz_when_all_is_well(server: Server) -> None:
    sqlite = server.settings.database_url.get_secret_value().startswith("sqlite")
    with server.client() as c:
        alive = c.get("/healthz")
        ready = c.get("/readyz")
        m = scrape(c)
    assert alive.status_code == 200 and alive.json() == {"status": "alive"}
    assert ready.status_code == 200, ready.text
    body = ready.json()
    expected = {"database", "registry", "model:credit", "disk:registry", "disk:spool", "disk:checkpoints"}
    expected.add("prediction_log")  # reported, never counted for readiness (predictions/health.py)
    assert body["ready"] is True and "error" not in body
    assert set(body["checks"]) == expected | ({"disk:database"} if sqlite else set())
    assert all(c["ok"] is True and c["detail"] for c in body["checks"].values()), body
    assert "credit:1 loaded and answered the canary row" in body["checks"]["model:credit"]["detail"]
    for check in body["checks"]:
        assert m[("driftwarden_health_check_up", (("check", check),))] == 1.0
        assert m[("driftwarden_health_check_duration_seconds", (("check", check),))] >= 0.0
    assert m[("driftwarden_database_up", ())] == 1.0
    assert 0.0 < m[("driftwarden_database_rtt_seconds", ())] < 1.0
    assert m[("driftwarden_disk_free_bytes", (("path", "registry"),))] > 2**20
    assert m[("driftwarden_disk_free_bytes", (("path", "spool"),))] > 2**20
    assert m[("process_resident_memory_bytes", ())] > 2**20 and m[("process_open_fds", ())] > 0


def test_a_model_with_only_staged_versions_does_not_make_the_server_unready(
    server: Server, trained: TrainedModels
) -> None:
    db = open_database(server.settings.database_url.get_secret_value())
    try:
        with db.session() as s:  # as `driftwarden train --model fraud` leaves it: staged, nothing promoted
            register_version(
                session=s, model_name="fraud", version=1, path=trained.paths[1], metrics={}, lineage={}
            )
    finally:
        db.dispose()
    with server.client() as c:
        wait_for("the manager sees model fraud", lambda: "fraud" in server.state.manager.models, 10)
        ready = c.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert "model:fraud" not in ready.json()["checks"] and "model:credit" in ready.json()["checks"]


# --- failing checks are named ---------------------------------------------------------------------------


def test_unloadable_model_and_unreachable_cluster_node_fail_readiness(
    trained: TrainedModels, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'broken.db'}"
    broken = copy_version(trained.paths[1], tmp_path / "registry" / "credit" / "1")
    (broken / "saved_model.pb").unlink()  # its contract still reads: the registry is fine, the model is not
    db = open_database(url, upgrade=True)
    with db.session() as s:
        register_version(session=s, model_name="credit", version=1, path=broken, metrics={}, lineage={})
        promote(session=s, model_name="credit", version=1)
    db.dispose()
    with socket.create_server(("127.0.0.1", 0)) as listening:
        up = f"127.0.0.1:{listening.getsockname()[1]}"
        down = f"127.0.0.1:{free_port()}"
        spec = json.dumps({"cluster": {"chief": [up], "worker": [up, down]}, "task": {"type": "chief"}})
        settings = serve_settings(url, tmp_path / "spool", cluster_spec=spec, monitor_enabled=False)
        with Server(settings) as srv, srv.client() as c:
            ready = c.get("/readyz")
            alive = c.get("/healthz")
            m = scrape(c)
    assert alive.status_code == 200
    assert ready.status_code == 503, ready.text
    body = ready.json()
    assert body["ready"] is False
    failing = {name for name, check in body["checks"].items() if not check["ok"]}
    assert failing == {"model:credit", "cluster"}, body
    assert "not ready: failing checks: cluster (" in body["error"] and "model:credit (" in body["error"]
    assert f"1 of 3 nodes unreachable: worker:1 at {down}" in body["checks"]["cluster"]["detail"]
    assert "load failures: v1:" in body["checks"]["model:credit"]["detail"]
    assert body["checks"]["registry"]["ok"] and body["checks"]["database"]["ok"]
    assert m[("driftwarden_health_check_up", (("check", "cluster"),))] == 0.0
    assert m[("driftwarden_health_check_up", (("check", "model:credit"),))] == 0.0
    assert m[("driftwarden_health_check_up", (("check", "database"),))] == 1.0


def test_cluster_check_only_when_configured_and_reread_each_run(tmp_path: Path) -> None:
    assert cluster_checks(None) == [] and cluster_checks("") == []
    spec_file = tmp_path / "cluster.json"
    with socket.create_server(("127.0.0.1", 0)) as listening:
        up = f"127.0.0.1:{listening.getsockname()[1]}"
        down = f"127.0.0.1:{free_port()}"
        spec_file.write_text(json.dumps({"ps": [down], "worker": [up]}))
        monitor = HealthMonitor([lambda: cluster_checks(str(spec_file))], timeout_s=5)
        first = monitor.run()["cluster"]
        spec_file.write_text(json.dumps({"ps": [up], "worker": [up]}))
        second = monitor.run()["cluster"]
    assert not first.ok and first.detail == f"1 of 2 nodes unreachable: ps:0 at {down}"
    assert second.ok and second.detail == "2 nodes reachable"
    spec_file.write_text("not json")
    third = monitor.run()["cluster"]
    assert not third.ok and "cluster spec is neither JSON nor a JSON file" in third.detail


def test_a_hanging_check_times_out_and_never_piles_up_threads() -> None:
    release = threading.Event()
    calls: list[float] = []

    def hangs() -> Status:
        calls.append(time.monotonic())
        release.wait(30)
        return Status(True, "answered at last")

    checks = [HealthCheck("slow", hangs), HealthCheck("fast", lambda: Status(True, "fine"))]
    monitor = HealthMonitor([lambda: checks], timeout_s=0.3)
    t0 = time.monotonic()
    first = monitor.run()
    assert time.monotonic() - t0 < 2.0
    assert not first["slow"].ok and first["slow"].detail.startswith("timed out: no answer after 0.3")
    assert first["fast"].ok
    second = monitor.run()
    assert not second["slow"].ok and len(calls) == 1  # still hanging: not started a second time
    ok, body = readiness(second)
    assert not ok and body["error"].startswith("not ready: failing checks: slow (timed out")
    release.set()
    time.sleep(0.1)
    third = monitor.run()
    assert third["slow"].ok and len(calls) == 2


def test_a_failing_check_is_reported_with_its_error() -> None:
    def boom() -> Status:
        raise OSError("disk on fire")

    results = HealthMonitor([lambda: [HealthCheck("boom", boom)]], timeout_s=1).run()
    assert not results["boom"].ok and results["boom"].detail == "OSError: disk on fire"


def test_disk_check_fails_below_the_minimum_free_space(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'x.db'}"
    petabyte_mb = 10**9
    settings = Settings(
        database_url=SecretStr(url), registry_path=tmp_path / "models", health_disk_min_free_mb=petabyte_mb
    )
    db = open_database(url)
    try:
        checks = {c.name: c for c in core_checks(settings=settings, db=db)}
        assert set(checks) == {"database", "disk:registry", "disk:spool", "disk:checkpoints", "disk:database"}
        low = checks["disk:registry"].fn()  # the folder does not exist yet: its parent's disk counts
        assert not low.ok and "below the minimum of" in low.detail and low.value and low.value > 0
        assert checks["database"].fn().ok
    finally:
        db.dispose()


# --- the acceptance test: a PostgreSQL of our own, stopped and started under a live server -------------


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    pg = OwnPostgres()
    try:
        pg.init()
        pg.start()
        yield pg
    finally:
        pg.destroy()


def _predict(c: httpx.Client, rows: list[dict[str, Any]]) -> httpx.Response:
    return c.post("/v1/models/credit:predict", json={"instances": rows})


def test_stopping_postgres_fails_readiness_and_the_gauge_while_predictions_go_on(
    own_postgres: OwnPostgres, trained: TrainedModels, tmp_path: Path
) -> None:
    url, interval = own_postgres.url, 2.0
    seed_registry(url, trained, serving=1)  # creates the schema on the fresh instance
    settings = serve_settings(
        url, tmp_path / "spool", health_interval_s=interval, health_timeout_s=2.0, monitor_enabled=False
    )
    sent = 0
    with Server(settings) as srv, srv.client() as c:
        assert c.get("/readyz").status_code == 200
        assert scrape(c)[("driftwarden_database_up", ())] == 1.0
        for i in range(5):
            assert _predict(c, trained.rows[i * 3 : i * 3 + 3]).status_code == 200
            sent += 3

        own_postgres.stop()
        took = wait_for(
            "driftwarden_database_up drops to 0",
            lambda: scrape(c)[("driftwarden_database_up", ())] == 0.0,
            timeout_s=interval + 5,
        )
        print(f"\ndatabase_up dropped {took:.2f}s after PostgreSQL stopped (health interval {interval}s)")
        assert took <= interval + 1.0  # one interval, plus the check itself and the polling
        ready = c.get("/readyz")
        assert ready.status_code == 503, ready.text
        body = ready.json()
        assert body["ready"] is False and body["checks"]["database"]["ok"] is False
        assert "failing checks: database (" in body["error"]
        assert body["checks"]["model:credit"]["ok"] is True  # the model itself is fine
        assert scrape(c)[("driftwarden_health_check_up", (("check", "database"),))] == 0.0
        for i in range(10):
            assert c.get("/healthz").status_code == 200
            r = _predict(c, trained.rows[100 + i * 2 : 100 + i * 2 + 2])
            assert r.status_code == 200, r.text
            sent += 2
        writer = srv.state.writer
        wait_for("rows go to the spool", lambda: writer.spool.pending_rows > 0, timeout_s=15)

        own_postgres.start()
        back = wait_for("ready again", lambda: c.get("/readyz").status_code == 200, timeout_s=interval + 15)
        print(f"ready again {back:.2f}s after PostgreSQL started")
        assert scrape(c)[("driftwarden_database_up", ())] == 1.0
        wait_for("the spool drains", lambda: writer.spool.pending_rows == 0, timeout_s=30)
        srv.state.flush_predictions(10.0)
        assert count_rows(url) == sent
        assert writer.stats.rows_dropped == 0
