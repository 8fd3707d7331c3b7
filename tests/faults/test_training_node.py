"""A training node lost in the middle of a retraining job: real `driftwarden worker` on a real async cluster.

tests/training/cluster/test_launcher.py kills each node under `driftwarden train` (worker, chief: relaunched,
resumed and finished; ps: the run fails naming it) and tests/training/retraining/test_job_on_cluster.py kills
the job worker itself (its job is taken over and promoted). The gap filled here: node losses inside a
*retraining job*, as the job record and the registry see them, in one job to pay for one cluster start-up:
- the chief is SIGKILLed: the launcher relaunches it, it resumes from its checkpoint and the job goes on;
- then the parameter server is SIGKILLed: the job fails clearly (its error names ``ps:0`` and the signal),
  registers nothing, and the serving version is untouched throughout.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from core.database import Database, open_database
from tests.support import TrainedModels, postgres_schema, seed_registry
from tests.training.helpers import kill
from tests.training.jobworkspace import JobWorkspace, read_job, serving_number
from tests.training.retraindata import log_traffic
from training.retraining import service
from training.retraining.models import JobState, TrainingJob

pytestmark = [pytest.mark.cluster, pytest.mark.postgres]


def _enqueue(db: Database) -> int:
    with db.session() as s:
        queued = service.enqueue(
            session=s,
            model_name="credit",
            trigger="api",
            requested_by="faults",
            params={"mode": "async", "ps": 1, "workers": 1, "epochs": 40},
        )
    assert queued.job_id is not None
    return queued.job_id


def _until(
    db: Database,
    job_id: int,
    done: Callable[[TrainingJob], bool],
    worker: subprocess.Popen[bytes],
    log: Path,
    timeout: float,
) -> TrainingJob:
    deadline = time.monotonic() + timeout
    while True:
        job = read_job(db, job_id)
        if done(job):
            return job
        assert worker.poll() is None, f"worker exited: {log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"job {job_id} ({job.state}): {job.log_tail}"
        time.sleep(0.2)


def _checkpointed(job: TrainingJob) -> bool:
    return bool((job.progress or {}).get("checkpoint_step", 0) > 0)


def _runs(ws: JobWorkspace) -> set[Path]:
    return set(ws.root.glob("var/checkpoints/*/nodes/pids.json"))


def _pid(run: Path, node: str) -> int:
    """The latest pid of ``node`` in one run's pids.json."""
    return int(json.loads(run.read_text())[node][-1])


def test_a_lost_chief_is_recovered_and_a_lost_ps_fails_the_job_clearly(
    postgres_url: str, trained: TrainedModels, tmp_path: Path
) -> None:
    with postgres_schema(postgres_url) as url:
        seed_registry(url, trained, serving=1)
        db = open_database(url)
        ws = JobWorkspace(
            root=tmp_path,
            data=tmp_path / "unused.csv",
            extra={
                "DRIFTWARDEN_DATABASE_URL": url,
                "DRIFTWARDEN_JOB_POLL_INTERVAL_S": "0.2",
                "DRIFTWARDEN_CHECKPOINT_EVERY_STEPS": "20",
            },
        )
        try:
            log_traffic(db)
            worker, log = ws.start("worker", log_name="worker.log")
            try:
                job_id = _enqueue(db)
                at_kill = _until(db, job_id, _checkpointed, worker, log, 240)
                assert at_kill.state is JobState.RUNNING
                (run,) = _runs(ws)
                # 1. the chief dies: the launcher relaunches it, it resumes from the last checkpoint and
                # checkpoints again (only the chief writes checkpoints); the job goes on
                kill(_pid(run, "chief:0"))
                step = at_kill.progress["checkpoint_step"]
                resumed = _until(
                    db,
                    job_id,
                    lambda j: j.progress["checkpoint_step"] > step or j.state.final,
                    worker,
                    log,
                    120,
                )
                assert resumed.state is JobState.RUNNING, (resumed.state, resumed.error, resumed.log_tail)
                assert len(json.loads(run.read_text())["chief:0"]) == 2, "the chief was not relaunched"
                assert serving_number(db) == 1
                # 2. the parameter server dies: the variables are gone, the job fails and says why
                kill(_pid(run, "ps:0"))
                failed = _until(db, job_id, lambda j: j.state.final, worker, log, 120)
                assert failed.state is JobState.FAILED, (failed.state, failed.error, failed.log_tail)
                assert re.search(r"ps:0 at \S+ was lost \(signal 9\)", failed.error or ""), failed.error
                assert "chief:0" in (failed.log_tail or "") and "resumed from checkpoint" in failed.log_tail
                assert failed.result_version is None and serving_number(db) == 1  # serving untouched
                worker.send_signal(signal.SIGTERM)
                assert worker.wait(60) == 0, log.read_text()[-3000:]
            finally:
                if worker.poll() is None:
                    worker.kill()
            ws.assert_no_cluster_process()
        finally:
            db.dispose()
