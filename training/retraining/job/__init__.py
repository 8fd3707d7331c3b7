"""One retraining job from claim to final state: window -> data -> train -> validation gate -> outcome.

1. **Window**: the model's newest labelled predictions (prediction log joined with feedback,
   ``retrain_window_rows`` / ``retrain_window_minutes``), typed with the serving version's contract,
   read when the job starts (a job an alert started first waits, bounded, while the window is short:
   :func:`wait_for_rows`); fewer than ``retrain_min_rows`` refuses clearly. Split by time: the newest
   ``retrain_holdout_fraction`` (at least ``retrain_holdout_min_rows``, at most half) is the gate's
   holdout and is never trained on. Optionally the serving
   version's own training data is mixed in (``retrain_include_previous_data``). The drill
   ``shuffled_labels`` shuffles the training labels (the gate must reject the result). Both parts are
   written to the job's folder (``<checkpoint_path>/job-<id>-<created>/``), so a worker taking the job over
   trains on the same rows and resumes from the same checkpoints.
2. **Train**: :func:`training.cluster.flows.run_training` (mode, ps and workers from the job's params, else
   the serving version's lineage, else async with 1 ps and 2 workers) on the serving version's feature list
   and class order (the window and the mixed-in previous data hold no other column); the candidate is a
   staged version whose lineage names the parent version, the job, its trigger, its alert, its data window
   and its features.
3. **Gate** (:mod:`training.retraining.gate`) on the holdout, both versions scored through their SavedModels.
4. **Outcome**, in one transaction with the job's final state: ``promoted`` (registry promote, actor
   ``job:<id>``), ``passed`` (held: ``retrain_auto_promote`` is off), ``undecided`` (held: the holdout
   could not decide a check) or ``rejected`` (registry reject with the failed checks as the reason). An
   error ends the job ``failed``; a candidate of a failed or cancelled job is rejected. The serving
   version changes only by a promotion after a passed gate.

Cancellation and a lost lease stop the run at the next progress update (:class:`JobProgress` raises
:class:`JobStopped`; the launcher then stops every cluster process it started).

The package by subject: ``control.py`` (a running job's control and progress), ``plan.py`` (what a job
works on), ``window.py`` (its data: the window read, split and written), ``outcome.py`` (training, the
gate, the outcome) and ``job.py`` (:func:`run_job`, the steps in order).
"""

from __future__ import annotations

from training.retraining.job.control import JobControl, JobProgress, JobStopped, NotEnoughData, StopReason
from training.retraining.job.data import holdout_rows, read_data, rows_wanted, wait_for_rows
from training.retraining.job.outcome import conclude, score_version, train, validate
from training.retraining.job.plan import JobData, Plan, Snapshot, existing_data, job_folder, make_plan
from training.retraining.job.run import run_job

__all__ = [
    "JobControl",
    "JobData",
    "JobProgress",
    "JobStopped",
    "NotEnoughData",
    "Plan",
    "Snapshot",
    "StopReason",
    "conclude",
    "existing_data",
    "holdout_rows",
    "job_folder",
    "make_plan",
    "read_data",
    "rows_wanted",
    "run_job",
    "score_version",
    "train",
    "validate",
    "wait_for_rows",
]
