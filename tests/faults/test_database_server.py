"""The database server itself stopped under load (``pg_ctl stop -m fast``) and started again.

tests/service/test_outage.py cuts the TCP connections through a proxy and tests/service/test_health.py
stops a PostgreSQL between sequential requests; here a PostgreSQL this module owns is shut down while three
clients keep sending: every request is answered, and once it is back the log holds exactly one row per
answered prediction id (no row lost, none written twice by the replay), in both durability modes.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.faults.conftest import Load, logged_ids, wait_until
from tests.support import OwnPostgres, Server, TrainedModels, seed_registry, serve_settings


@pytest.mark.parametrize("durability", ["fast", "durable"])
def test_server_stopped_and_started_under_load_loses_and_doubles_no_row(
    own_pg: OwnPostgres, pg_url: str, trained: TrainedModels, tmp_path: Path, durability: str
) -> None:
    url = pg_url  # a fresh schema of a PostgreSQL this module owns
    seed_registry(url, trained, serving=1)
    settings = serve_settings(
        url, tmp_path / "spool", log_durability=durability, monitor_enabled=False, health_interval_s=1.0
    )
    with Server(settings) as srv, Load(srv.url, trained.rows, tag=f"pgstop-{durability}") as load:
        writer = srv.state.writer
        load.wait_answered(30)
        own_pg.stop("fast")  # the server shuts down: every connection dies, new ones are refused
        down_at = load.answered()
        wait_until("rows go to the spool", lambda: writer.spool.pending_rows > 0, timeout_s=20)
        load.wait_answered(30)  # answered while the database is down
        assert not writer.stats.database_ok
        answered_while_down = load.answered() - down_at
        time.sleep(0.5)
        own_pg.start()
        wait_until("the writer reaches the database again", lambda: writer.stats.database_ok, 20)
        load.wait_answered(30)
        load.stop()
        assert writer.flush(timeout_s=60), "the spool did not drain"
        stats = writer.stats
    ids = logged_ids(url)
    print(
        f"\n{durability}: {len(load.ids)} rows answered ({answered_while_down} while PostgreSQL was down), "
        f"{stats.rows_spooled} spooled, {stats.rows_replayed} replayed"
    )
    assert load.failures == []
    assert answered_while_down >= 30 and stats.rows_spooled > 0 and stats.rows_replayed > 0
    assert stats.rows_dropped == 0
    assert len(set(load.ids)) == len(load.ids)
    doubled = [i for i, n in Counter(ids).items() if n > 1]
    assert doubled == []
    assert set(ids) == set(load.ids)  # exactly one row per answered prediction, and no other row
