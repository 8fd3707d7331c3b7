"""A retraining job end to end on SQLite (local mode): logged + labelled traffic -> worker -> gate -> outcome.

The serving version (``credit:1`` of the ``trained`` fixture) meets traffic whose concept has drifted
(``concept_drift``: same inputs, another P(y | x)); a candidate retrained on that labelled traffic is far
better on the newest rows and is promoted, a fire drill on shuffled labels is rejected, too little feedback
fails clearly. The serving version changes only by a promotion.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from predictions.service import labelled_rows
from registry.models import VersionState
from registry.service import history, read_meta
from tests.training.retraindata import ROWS, World, log_traffic
from training.cluster.datagen import generate
from training.retraining import service
from training.retraining.models import JobState
from training.retraining.worker import Worker


def test_the_reader_returns_the_newest_labelled_rows_typed_and_in_time_order(world: World) -> None:
    y = log_traffic(world.db, rows=400, labelled=300)
    with world.db.session() as s:
        rows = labelled_rows(
            session=s,
            model_name="credit",
            numeric=["age", "employment_years"],
            categorical=["region"],
            limit=200,
        )
    assert rows.labels.tolist() == y[100:300].astype(float).tolist()  # the newest 200 of the 300 labelled
    assert rows.columns["age"].dtype == np.float64 and rows.columns["region"].dtype == object
    assert np.isnan(rows.columns["employment_years"]).any()  # nulls are NaN
    assert rows.logged_at == sorted(rows.logged_at)
    assert rows.window_rows == 200  # every prediction between the first and the last of them is labelled


def test_a_good_candidate_is_promoted_with_its_lineage(world: World) -> None:
    log_traffic(world.db)
    job_id = world.submit(reason="concept drift")
    worker = Worker(db=world.db, settings=world.settings, worker_id="test:1:1")
    assert worker.run_once() == job_id
    assert worker.run_once() is None  # nothing left
    job = world.job(job_id)
    assert job.state is JobState.PROMOTED, job.error or job.log_tail
    assert job.result_version == 3 and job.parent_version == 1 and job.attempts == 1
    assert world.serving() == 3
    assert world.version(1).state is VersionState.ARCHIVED
    window = job.data_window
    assert window is not None
    assert window["labelled_rows"] == ROWS and window["rows"] == ROWS
    # at least retrain_holdout_min_rows (2000) are held out, but never more than half of the window
    assert window["holdout_rows"] == 1500 and window["train_rows"] == 1500
    assert "held out 1500 rows, fewer than retrain_holdout_min_rows=2000" in job.log_tail
    assert window["first_prediction_at"] < window["holdout_from"] <= window["last_prediction_at"]
    lineage = world.version(3).lineage
    assert lineage["parent_version"] == 1 and lineage["job_id"] == job_id
    assert lineage["trigger"] == "cli" and lineage["alert_id"] is None and lineage["data_window"] == window
    assert (
        lineage["mode"] == "local" and lineage["train_rows"] == 1200
    )  # prepare() holds out 20 % for metrics
    assert read_meta(path=Path(world.version(3).path), name="lineage")["job_id"] == job_id
    gate = job.gate
    assert gate is not None and gate["passed"] is True and gate["verdict"] == "passed"
    checks = {c["name"]: c for c in gate["checks"]}
    assert set(checks) == {"input_contract", "outputs", "metric", "calibration", "slices"}
    assert checks["metric"]["figures"]["candidate"] > checks["metric"]["figures"]["serving"] + 0.1
    assert checks["metric"]["figures"]["bounds"][0] > 0.05  # better with 95 % confidence, on 1500 rows
    assert checks["input_contract"]["figures"]["rows"] == 1500
    assert job.progress["step"] == job.progress["total_steps"] > 0 and job.progress["loss"] > 0
    assert "claimed by worker test:1:1 (attempt 1)" in job.log_tail
    assert "credit:3 is now serving" in job.log_tail
    with world.db.session() as s:
        promote = [
            e for e in history(session=s, model_name="credit", version=3) if e.action.value == "promote"
        ]
    assert [e.actor for e in promote] == [f"job:{job_id}"]
    assert world.finished == [job_id]


def test_a_shuffled_labels_drill_is_rejected_and_production_is_untouched(world: World) -> None:
    log_traffic(world.db)
    with world.db.session() as s:
        before = [(e.action, e.to_state) for e in history(session=s, model_name="credit", version=1)]
    job_id = world.submit(drill="shuffled_labels")
    Worker(db=world.db, settings=world.settings).run_once()
    job = world.job(job_id)
    assert job.state is JobState.REJECTED, job.error or job.log_tail
    assert world.serving() == 1
    with world.db.session() as s:
        after = [(e.action, e.to_state) for e in history(session=s, model_name="credit", version=1)]
    assert after == before
    assert job.gate is not None and job.gate["passed"] is False
    failed = [c["name"] for c in job.gate["checks"] if not c["passed"]]
    assert "metric" in failed
    metric = next(c for c in job.gate["checks"] if c["name"] == "metric")
    assert metric["figures"]["candidate"] < 0.6 < metric["figures"]["serving"]
    candidate = world.version(3)
    assert candidate.state is VersionState.REJECTED
    assert candidate.state_reason.startswith(f"job {job_id}: validation gate failed: metric: roc_auc ")
    assert candidate.lineage["data_window"]["drill"] == "shuffled_labels"
    assert "fire drill shuffled_labels" in job.log_tail
    assert world.finished == [job_id]


def test_too_few_labelled_predictions_fail_clearly(world: World) -> None:
    log_traffic(world.db, rows=400, labelled=120)
    job_id = world.submit()
    Worker(db=world.db, settings=world.settings).run_once()
    job = world.job(job_id)
    assert job.state is JobState.FAILED
    assert job.error == (
        "model credit has 120 labelled predictions in the window (the last 50000 labelled predictions), "
        "fewer than retrain_min_rows=500: send feedback labels (POST /v1/models/credit/feedback) or lower "
        "DRIFTWARDEN_RETRAIN_MIN_ROWS"
    )
    assert job.result_version is None and world.serving() == 1 and world.version(3) is None
    assert world.finished == [job_id]


def test_without_auto_promote_a_passing_candidate_is_held(world: World) -> None:
    log_traffic(world.db)
    job_id = world.submit()
    Worker(db=world.db, settings=world.settings_with(retrain_auto_promote=False)).run_once()
    job = world.job(job_id)
    assert job.state is JobState.PASSED, job.error or job.log_tail
    assert world.serving() == 1 and world.version(3).state is VersionState.STAGED
    assert "driftwarden models promote credit 3" in job.log_tail


def test_a_holdout_too_small_to_decide_holds_the_candidate_undecided(world: World) -> None:
    log_traffic(world.db)
    job_id = world.submit()
    small = world.settings_with(retrain_holdout_fraction=0.05, retrain_holdout_min_rows=1)  # 150 rows
    Worker(db=world.db, settings=small).run_once()
    job = world.job(job_id)
    assert job.state is JobState.UNDECIDED, job.error or job.log_tail
    assert job.data_window is not None and job.data_window["holdout_rows"] == 150
    assert job.gate is not None and job.gate["verdict"] == "undecided" and job.gate["passed"] is False
    verdicts = {c["name"]: c["verdict"] for c in job.gate["checks"]}
    assert verdicts["metric"] == verdicts["calibration"] == "undecided", verdicts
    assert "failed" not in verdicts.values()
    metric = next(c for c in job.gate["checks"] if c["name"] == "metric")
    assert "150 holdout rows, fewer than the 200 this check needs" in metric["message"]
    assert world.serving() == 1 and world.version(3).state is VersionState.STAGED  # held for a person
    assert "the gate could not decide (metric, calibration)" in job.log_tail
    by_hand = "driftwarden models promote credit 3, or driftwarden models reject credit 3 --reason TEXT"
    assert by_hand in job.log_tail
    assert world.finished == [job_id]


def test_a_running_job_stops_when_cancelled_and_its_candidate_never_appears(world: World) -> None:
    log_traffic(world.db)
    job_id = world.submit(epochs=300)  # thousands of steps: the cancel lands long before the end
    settings = world.settings_with(job_lease_s=0.9, checkpoint_every_steps=10)
    worker = Worker(db=world.db, settings=settings)
    runner = threading.Thread(target=worker.run_once)
    runner.start()
    deadline = time.monotonic() + 120
    while not (world.job(job_id).progress or {}).get("step"):
        assert time.monotonic() < deadline and runner.is_alive(), world.job(job_id).log_tail
        time.sleep(0.05)
    with world.db.session() as s:
        service.request_cancel(session=s, job_id=job_id)
    runner.join(120)
    assert not runner.is_alive()
    job = world.job(job_id)
    assert job.state is JobState.CANCELLED, job.log_tail
    assert job.progress["step"] < job.progress["total_steps"]
    assert world.serving() == 1 and world.version(3) is None
    assert worker.last_state is JobState.CANCELLED and world.finished == [job_id]


def test_a_stopped_worker_gives_its_job_back_and_the_next_one_runs_it(world: World) -> None:
    log_traffic(world.db)
    job_id = world.submit()  # epochs from each worker's retrain_epochs: the first one would run for minutes
    slow = world.settings_with(checkpoint_every_steps=10, retrain_epochs=300.0)
    first = Worker(db=world.db, settings=slow, worker_id="first:1:1")
    first.start()
    deadline = time.monotonic() + 120
    while not (world.job(job_id).progress or {}).get("step"):
        assert time.monotonic() < deadline, world.job(job_id).log_tail
        time.sleep(0.05)
    assert first.stop(timeout=60)
    job = world.job(job_id)
    assert (
        job.state is JobState.RUNNING and "released by worker first:1:1: worker shutting down" in job.log_tail
    )
    assert world.finished == [] and world.version(3) is None
    second = Worker(db=world.db, settings=world.settings, worker_id="second:1:1")
    assert second.run_once() == job_id
    job = world.job(job_id)
    assert job.state is JobState.PROMOTED, job.error or job.log_tail
    assert job.attempts == 1  # a clean release does not count as an attempt
    assert "taken over from first:1:1 by worker second:1:1" in job.log_tail
    assert "reusing the data of the previous attempt" in job.log_tail
    assert world.finished == [job_id]


def test_the_embedded_worker_runs_jobs_in_the_api_process_and_stops_with_it(world: World) -> None:
    from core.runtime import Runtime
    from training.retraining.scheduled import embedded_worker_wanted, start_in_app

    assert embedded_worker_wanted(world.settings)  # unset on SQLite: yes
    assert not embedded_worker_wanted(world.settings_with(worker_embedded=False))
    assert embedded_worker_wanted(world.settings_with(worker_embedded=True))
    assert start_in_app(Runtime(settings=world.settings_with(worker_embedded=False), db=world.db)) is None
    log_traffic(world.db)
    worker = start_in_app(Runtime(settings=world.settings, db=world.db))
    assert worker is not None
    try:
        job_id = world.submit()  # queued after the worker started: it finds it at its next poll
        deadline = time.monotonic() + 120
        while not world.job(job_id).state.final:
            assert time.monotonic() < deadline, world.job(job_id).log_tail
            time.sleep(0.1)
    finally:
        assert worker.stop(timeout=30)
    assert world.job(job_id).state is JobState.PROMOTED and world.finished == [job_id]


def test_previous_training_data_and_the_serving_versions_mode_are_used_when_asked(
    world: World, tmp_path: Path
) -> None:
    from sqlalchemy import update

    from core.tabular import write_table
    from registry.models import ModelVersion

    previous = write_table(generate(1000, seed=3), tmp_path / "previous.parquet")
    with world.db.session() as s:  # what `driftwarden train` records for a version
        s.execute(
            update(ModelVersion)
            .where(ModelVersion.model_name == "credit", ModelVersion.version == 1)
            .values(lineage={"data_source": str(previous), "mode": "local", "cluster": {"chief": 1}})
        )
    log_traffic(world.db)
    with world.db.session() as s:  # no mode asked for: the serving version's (local) is used
        job_id = service.enqueue(session=s, model_name="credit", trigger="api", requested_by="t").job_id
    assert job_id is not None
    Worker(db=world.db, settings=world.settings_with(retrain_include_previous_data=True)).run_once()
    job = world.job(job_id)
    assert job.state is JobState.PROMOTED, job.error or job.log_tail
    assert job.data_window is not None
    assert job.data_window["previous_data_rows"] == 1000 and job.data_window["train_rows"] == 1500 + 1000
    assert f"mixed in 1000 rows of the serving version's training data ({previous})" in job.log_tail
    assert "training credit (local, 3 epochs) from version 1" in job.log_tail
    lineage = world.version(3).lineage
    assert lineage["mode"] == "local" and lineage["train_rows"] == 2000  # 80 % of 2500 (prepare's split)
