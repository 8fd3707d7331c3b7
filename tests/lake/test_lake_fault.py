"""The lake sink's faults with ``driftwarden serve`` as a real subprocess (``lake_mode=only``, ``durable``):

- the lake folder made unwritable under load: the answers go on, the rows wait in the sink's spool, the
  ``lake`` status says so, and once the folder is writable again they are committed;
- SIGKILL under load: every answered prediction is in a committed file or in the spool on disk; the next
  start commits the spool, and after its SIGTERM the lake holds each answered prediction exactly once.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

from predictions.lake.files import open_lake
from tests.faults.conftest import Load, spooled_ids, wait_until
from tests.faults.serve_process import ServeProcess
from tests.lake.sinkdata import read_lake, unwritable
from tests.support import TrainedModels, count_rows, postgres_schema, seed_registry


def lake_env(lake: str) -> dict[str, str]:
    """A serve process logging to the lake alone, durable, its files committed while the load runs."""
    return {
        "DRIFTWARDEN_LOG_DURABILITY": "durable",
        "DRIFTWARDEN_LAKE_URL": lake,
        "DRIFTWARDEN_LAKE_MODE": "only",
        "DRIFTWARDEN_LAKE_ROLL_S": "0.5",
    }


def lake_status(srv: ServeProcess) -> dict[str, object]:
    """The ``lake`` block of the process's ``/status``."""
    log = srv.status()["prediction_log"]
    assert isinstance(log, dict)
    return dict(log["lake"])


def test_unwritable_lake_and_sigkill_lose_no_answered_prediction(
    postgres_url: str, trained: TrainedModels, tmp_path: Path
) -> None:
    lake_dir = tmp_path / "lake"
    lake_dir.mkdir()
    spool = tmp_path / "spool"
    target = open_lake(str(lake_dir))
    with postgres_schema(postgres_url) as url:
        seed_registry(url, trained, serving=1)
        first = ServeProcess(url=url, spool=spool, log=tmp_path / "serve-1.log", env=lake_env(str(lake_dir)))
        try:
            with Load(first.url, trained.rows, threads=4, tag="lake") as load:
                load.wait_answered(100, timeout_s=90)
                wait_until("a file committed", lambda: read_lake(target).num_rows > 0, 30)
                with unwritable(lake_dir):
                    wait_until("the lake reported down", lambda: lake_status(first)["ok"] is False, 30)
                    load.wait_answered(100, timeout_s=90)  # answers go on, rows wait in the spool
                    waiting = lake_status(first)["spool_rows"]
                    assert isinstance(waiting, int) and waiting > 0
                wait_until("the lake back", lambda: lake_status(first)["ok"] is True, 30)
                load.wait_answered(100, timeout_s=90)
                assert first.signal(signal.SIGKILL) == -signal.SIGKILL
        finally:
            first.kill()
        killed = set(load.ids)
        committed = set(read_lake(target)["prediction_id"].to_pylist())
        missing = killed - committed - set(spooled_ids(spool))
        assert missing == set(), (
            f"{len(missing)} of {len(killed)} answered rows neither committed nor spooled"
        )

        second = ServeProcess(
            url=url, spool=spool, log=tmp_path / "serve-2.log", env=lake_env(str(lake_dir))
        )  # commits the spool
        try:
            with Load(second.url, trained.rows, threads=2, tag="again") as again:
                again.wait_answered(50, timeout_s=90)
            assert second.signal(signal.SIGTERM) in (0, -signal.SIGTERM)
        finally:
            second.kill()
        ids = read_lake(target)["prediction_id"].to_pylist()
        assert [i for i, n in Counter(ids).items() if n > 1] == []  # each prediction once
        answered = killed | set(again.ids)
        assert answered <= set(ids), f"{len(answered - set(ids))} answered rows missing from the lake"
        assert len(set(ids) - answered) <= 8  # accepted requests whose answer the kill or the stop cut off
        assert count_rows(url) == 0  # lake_mode=only: nothing in the database's log
        assert not any(p.name.startswith("_") for p in lake_dir.rglob("*"))  # no half-written file
        assert "Traceback" not in (tmp_path / "serve-2.log").read_text()
