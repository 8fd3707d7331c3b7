"""One retraining job from claim to final state: plan, data, training, gate, outcome."""

from __future__ import annotations

from core.errors import DomainError
from training.retraining.job.control import JobControl, JobStopped, StopReason, log, record_on_job
from training.retraining.job.data import read_data
from training.retraining.job.outcome import conclude, end_badly, train, validate
from training.retraining.job.plan import Snapshot, existing_data, is_staged, make_plan
from training.retraining.models import JobState
from training.retraining.service import get_job


def run_job(control: JobControl) -> JobState:
    """Run the claimed job to its final state (stored with the outcome) and return that state.

    Raises :class:`JobStopped` when the job was taken over or the worker shuts down: then the job is not
    this worker's to end.
    """
    with control.db.session() as session:
        row = get_job(session=session, job_id=control.job_id)
        snap = Snapshot(
            id=row.id,
            model_name=row.model_name,
            trigger=row.trigger.value,
            requested_by=row.requested_by,
            alert_id=row.alert_id,
            params=dict(row.params or {}),
            result_version=row.result_version,
            created_at=row.created_at,
        )
    candidate: int | None = None
    try:
        plan = make_plan(control, snap)
        data = existing_data(control.settings, snap)
        if (
            snap.result_version is not None
            and data is not None
            and is_staged(control, plan, snap.result_version)
        ):
            candidate = snap.result_version  # trained before a takeover: straight to the gate
            record_on_job(control, lines=[f"candidate {plan.model_name}:{candidate} was trained already"])
        else:
            if data is None:
                record_on_job(control, progress={"phase": "reading data"})
                data = read_data(control, snap, plan)
            else:
                record_on_job(
                    control, lines=["reusing the data of the previous attempt (same rows, same checkpoints)"]
                )
            record_on_job(control, data_window=data.window, parent_version=plan.parent)
            control.check()
            candidate = train(control, snap, plan, data)
        control.check()
        record_on_job(
            control,
            state=JobState.VALIDATING,
            result_version=candidate,
            progress={"phase": "validating"},
            lines=[f"candidate {plan.model_name}:{candidate}: running the validation gate"],
        )
        result = validate(control, plan, candidate, data)
        control.check()
        return conclude(control, plan, candidate, result)
    except JobStopped as stop:
        if stop.reason is not StopReason.CANCELLED:
            raise
        end_badly(control, snap, candidate, JobState.CANCELLED, None, "was cancelled")
        return JobState.CANCELLED
    except Exception as exc:
        if isinstance(exc, DomainError):
            message = str(exc)
            log.warning("job %d failed: %s", snap.id, message)
        else:
            message = f"{type(exc).__name__}: {exc}".strip()
            log.exception("job %d failed", snap.id)
        end_badly(control, snap, candidate, JobState.FAILED, message, "failed")
        return JobState.FAILED
