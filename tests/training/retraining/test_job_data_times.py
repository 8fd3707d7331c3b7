"""A retraining job's data window is chosen, split and reported by the predictions' times, not by log order.

Imported history (old timestamps) logged after live traffic, or a client's clock skew, puts the log's id
order out of time order. The job must still take the newest labelled predictions by time, hold out the
newest of them, and report a window whose first time is before its last, with a prediction count that
covers its labelled rows (the issue saw ``first_prediction_at`` after ``last_prediction_at`` and
``12001 labelled of 0 predictions``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from pydantic import SecretStr

from core.config import Settings
from core.database import open_database
from core.tabular import read_table
from predictions.service import labelled_rows, record_feedback
from registry.schema import infer_schema
from registry.service import META_DIR, promote, register_version
from tests.predictions.logdata import log_columns
from tests.support import CREDIT_FEATURES
from training.cluster.datagen import TARGET, generate
from training.retraining import service
from training.retraining.job import JobControl, Snapshot, make_plan, read_data

LIVE, HISTORY, WINDOW = 1_000, 2_000, 2_500


def test_the_window_is_the_newest_rows_by_time_whatever_their_log_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    db = open_database(url, upgrade=True)
    try:
        folder = tmp_path / "credit" / "1"
        (folder / META_DIR).mkdir(parents=True)
        schema = infer_schema(generate(500, seed=3), target=TARGET)
        (folder / META_DIR / "schema.json").write_text(json.dumps(schema.to_dict()))
        with db.session() as s:
            register_version(session=s, model_name="credit", version=1, path=folder, metrics={}, lineage={})
            promote(session=s, model_name="credit", version=1)

        now = datetime.now(UTC).replace(microsecond=0)
        live, past = generate(LIVE, seed=1), generate(HISTORY, seed=2)
        # live traffic of the last minutes is logged first (low ids) ...
        live_at = [now - timedelta(seconds=LIVE - i) for i in range(LIVE)]
        live_ids = log_columns(
            db.engine, live, features=CREDIT_FEATURES, when=now, spacing=timedelta(seconds=1)
        )
        # ... then 30 days of history up to 10 hours ago is imported (high ids, old times)
        step = timedelta(days=30) / HISTORY
        end = now - timedelta(hours=10)
        past_at = [end - step * (HISTORY - i) for i in range(HISTORY)]
        past_ids = log_columns(db.engine, past, features=CREDIT_FEATURES, when=end, spacing=step)
        with db.session() as s:
            labels = [
                (pid, float(y))
                for ids, cols in ((live_ids, live), (past_ids, past))
                for pid, y in zip(ids, cols[TARGET], strict=True)
            ]
            assert record_feedback(session=s, model_name="credit", labels=labels)[0] == LIVE + HISTORY

        with db.session() as s:
            every = labelled_rows(
                session=s, model_name="credit", numeric=["age"], categorical=[], limit=LIVE + HISTORY
            )
        assert every.logged_at == sorted(every.logged_at)  # oldest first by time
        assert every.logged_at[0] == past_at[0] and every.logged_at[-1] == live_at[-1]
        assert every.window_rows == LIVE + HISTORY  # every prediction between the first and the last time

        settings = Settings(
            database_url=SecretStr(url),
            registry_path=tmp_path,
            checkpoint_path=tmp_path / "ckpt",
            retrain_window_rows=WINDOW,
            retrain_min_rows=500,
            retrain_holdout_min_rows=500,
            retrain_holdout_fraction=0.2,
        )
        with db.session() as s:
            queued = service.enqueue(session=s, model_name="credit", trigger="cli", requested_by="test")
        with db.session() as s:
            job = service.claim(session=s, worker_id="test:1", lease_s=60)
            assert job is not None and job.id == queued.job_id
            snap = Snapshot(job.id, "credit", "cli", "test", None, {}, None, job.created_at)
        control = JobControl(db=db, settings=settings, job_id=snap.id, worker_id="test:1")
        data = read_data(control, snap, make_plan(control, snap))

        # the newest 2500 by time: the 1000 live predictions and the newest 1500 of the history
        window = data.window
        first = datetime.fromisoformat(window["first_prediction_at"])
        last = datetime.fromisoformat(window["last_prediction_at"])
        assert first == past_at[HISTORY - (WINDOW - LIVE)] and last == live_at[-1]
        held = datetime.fromisoformat(window["holdout_from"])
        assert first < held <= last and held == live_at[LIVE - 500]  # the newest 500 (all live) held out
        assert window["labelled_rows"] == WINDOW and window["rows"] == WINDOW
        holdout = read_table(data.holdout)
        np.testing.assert_allclose(np.asarray(holdout["age"], dtype=float), live["age"][LIVE - 500 :])
        with db.session() as s:
            tail = service.get_job(session=s, job_id=snap.id).log_tail
        assert f"window: {WINDOW} labelled of {WINDOW} predictions from {first.isoformat()} to " in tail, tail
    finally:
        db.dispose()
