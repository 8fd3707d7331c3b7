"""The spool's disk full, as the cap ``spool_max_bytes`` (a real small filesystem needs a root mount).

With the database (a PostgreSQL this module owns) stopped, the spool fills up to its cap; then:
- ``fast``: every request is still answered; the rows that found no room are lost, and the loss is counted
  (``driftwarden_prediction_log_rows_dropped_total``), fails the ``prediction_log`` health check (which does
  not make ``/readyz`` fail) and fires the default alert ``prediction_log_loss`` once the database is back.
- ``durable``: no answer without its row: the requests whose rows find no room get 503 naming the log;
  every prediction answered 200 is in the database afterwards.
Once the database is back the spool drains and every row that was not counted as lost is in the log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

from predictions.health import log_check
from predictions.spool import Spool
from predictions.writer import LogUnavailable, LogWriter
from tests.faults.conftest import Load, log_row, logged_ids, wait_until
from tests.support import OwnPostgres, Server, TrainedModels, seed_registry, serve_settings

CAP = 16_000  # bytes: a few dozen rows


def _dropped_metric(c: httpx.Client) -> float:
    for family in text_string_to_metric_families(c.get("/metrics").text):
        for s in family.samples:
            if s.name == "driftwarden_prediction_log_rows_dropped_total":
                return float(s.value)
    raise AssertionError("no driftwarden_prediction_log_rows_dropped_total in /metrics")


def _alerts(c: httpx.Client) -> list[dict[str, object]]:
    r = c.get("/v1/alerts", params={"model": "credit"})
    return list(r.json()["alerts"]) if r.status_code == 200 else []


@pytest.mark.parametrize("durability", ["fast", "durable"])
def test_a_full_spool_loses_rows_by_policy_counted_and_alerted(
    own_pg: OwnPostgres, pg_url: str, trained: TrainedModels, tmp_path: Path, durability: str
) -> None:
    url = pg_url  # a fresh schema of a PostgreSQL this module owns
    seed_registry(url, trained, serving=1)
    settings = serve_settings(
        url,
        tmp_path / "spool",
        log_durability=durability,
        spool_max_bytes=CAP,
        monitor_enabled=False,
        health_interval_s=0.5,
    )
    with Server(settings) as srv, srv.client() as c:
        writer = srv.state.writer
        assert _dropped_metric(c) == 0
        assert c.get("/readyz").json()["checks"]["prediction_log"]["ok"] is True
        with Load(srv.url, trained.rows, tag=f"full-{durability}") as load:
            load.wait_answered(20)
            own_pg.stop("fast")
            wait_until("the spool fills and rows are lost", lambda: writer.stats.rows_dropped > 0, 30)
            if durability == "fast":
                load.wait_answered(20)  # still answered
            else:  # refused: no answer without its row
                wait_until("durable requests are refused", lambda: len(load.failures) >= 20, 30)
            assert writer.spool.pending_bytes <= CAP
            check = wait_until(
                "the prediction_log check fails",
                lambda: not c.get("/readyz").json()["checks"]["prediction_log"]["ok"],
                10,
            )
            body = c.get("/readyz").json()
            assert "log rows lost since start" in body["checks"]["prediction_log"]["detail"]
            own_pg.start()
            wait_until("the spool drains", lambda: writer.spool.pending_rows == 0, 30)
            load.wait_answered(20)
        assert writer.flush(timeout_s=30)
        dropped = writer.stats.rows_dropped
        assert _dropped_metric(c) == dropped
        status = c.get("/status").json()["prediction_log"]
        assert status["rows_dropped"] == dropped and status["rows_rejected"] == 0  # lost, not refused
        # the loss is reported, not a reason to be unready: ready again once the database check passes
        wait_until("ready again", lambda: c.get("/readyz").status_code == 200, 15)
        assert c.get("/readyz").json()["checks"]["prediction_log"]["ok"] is False
        wait_until(
            "the prediction_log_loss alert fires",
            lambda: any(
                a["rule_name"] == "prediction_log_loss" and a["state"] == "firing" for a in _alerts(c)
            ),
            15,
        )
    ids = logged_ids(url)
    print(f"\n{durability}: {len(load.ids)} rows answered, {dropped} lost, check failed after {check:.2f}s")
    assert len(ids) == len(set(ids))
    if durability == "fast":
        assert load.failures == []  # serving went on
        assert set(ids) <= set(load.ids)
        assert len(set(load.ids) - set(ids)) == dropped  # exactly the counted loss, nothing silent
    else:
        assert load.failures, "a full spool with the database down must refuse durable requests"
        assert all(f.startswith("503 ") and "prediction log unavailable" in f for f in load.failures)
        assert set(ids) == set(load.ids)  # every answered prediction is logged; the lost rows were refused
        assert dropped >= len(load.failures)


def test_a_durable_request_overflowing_to_a_full_spool_is_refused_not_answered(tmp_path: Path) -> None:
    """The queue full (the database slow) and the spool full: the overflow path must refuse, not answer."""
    engine = create_engine(f"sqlite:///{tmp_path / 'no' / 'such' / 'folder.db'}")  # every write fails
    spool = Spool(tmp_path / "spool", max_bytes=1)  # room for no row
    writer = LogWriter(
        engine=engine, spool=spool, durability="durable", queue_max_rows=1, commit_timeout_s=60
    )  # not started: the first request's row stays queued, the next ones overflow

    async def run() -> None:
        first = asyncio.create_task(writer.submit([log_row(0)]))
        await asyncio.sleep(0.05)
        assert writer.queued_rows == 1 and not first.done()
        with pytest.raises(LogUnavailable, match="holds its cap"):
            await writer.submit([log_row(1), log_row(2, size=3)])  # a request's batch of 3 predictions
        first.cancel()

    asyncio.run(run())
    assert writer.stats.rows_dropped == 4 and writer.stats.last_drop_at is not None  # predictions lost
    assert log_check(writer)[0].fn().ok is False
    spool.close()
    engine.dispose()
