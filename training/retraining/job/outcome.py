"""The candidate trained, judged by the validation gate on the holdout, and the job's outcome recorded
(promoted, passed, undecided, rejected; failed on an error)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.errors import Conflict
from core.tabular import Columns, read_table
from registry.models import VersionState
from registry.schema import ModelSchema, Task, label_codes
from registry.service import get_version, promote, read_schema, read_signature, reject, serving_version
from registry.signature import SourceSignature
from training.cluster.run_spec import Mode, TrainingRunSpec, prepare
from training.retraining.gate import GatePolicy, GateResult, Holdout, Verdict, evaluate
from training.retraining.job.control import JobControl, JobProgress, StopReason, log, record_on_job
from training.retraining.job.plan import JobData, Plan, Snapshot
from training.retraining.models import JobState
from training.retraining.service import finish

SCORE_BATCH = 4096


def train(control: JobControl, snap: Snapshot, plan: Plan, data: JobData) -> int:
    """Train the candidate on the job's training set; returns its (staged) version number."""
    from training.cluster.flows import metrics_line, run_training

    settings = control.settings
    base = plan.base_lineage
    job = TrainingRunSpec(
        model_name=plan.model_name,
        data=data.train,
        mode=plan.mode,
        ps=plan.ps,
        workers=plan.workers,
        epochs=plan.epochs,
        batch_size=int(base.get("batch_size") or 64),
        learning_rate=float(base.get("learning_rate") or 0.003),
        seed=snap.id,
        target=plan.schema.target,
        steps_per_closure=settings.steps_per_closure,
        checkpoint_every=settings.checkpoint_every_steps,
        parent_version=plan.parent,
        task=plan.task.short,
        model_fn=plan.model_fn,
        classes=plan.schema.classes,  # the serving version's class order, never the window's sorted labels
        features=tuple(plan.schema.feature_names),  # its features, in order: no other column of the data
    )
    shape = {Mode.ASYNC: f", {plan.ps} ps, {plan.workers} workers", Mode.SYNC: f", {plan.workers} workers"}
    builder = f", model function {plan.model_fn}" if plan.model_fn else ""
    record_on_job(
        control,
        lines=[
            f"training {plan.model_name} ({plan.mode.value}{shape.get(plan.mode, '')}, "
            f"{plan.epochs:g} epochs{builder}) from version {plan.parent}"
        ],
    )
    prepared = prepare(job)
    progress = JobProgress(control)
    lineage = {
        "job_id": snap.id,
        "trigger": snap.trigger,
        "requested_by": snap.requested_by,
        "alert_id": snap.alert_id,
        "data_window": data.window,
    }
    try:
        result = run_training(
            job=job,
            db=control.db,
            registry=settings.registry_path,
            checkpoint_root=settings.checkpoint_path,
            progress=progress,
            prepared=prepared,
            lineage=lineage,
            settings=settings,
        )
    finally:
        progress.close()
    m = result.metrics
    record_on_job(
        control,
        lines=[
            f"registered {plan.model_name}:{result.version.version} (staged) in {result.seconds:.1f}s: "
            f"{metrics_line(plan.task, m)}"
        ],
    )
    return result.version.version


def score_version(path: Path, schema: ModelSchema, columns: Columns) -> np.ndarray:
    """The version's output (``schema.output.name``) on the rows: ``[n]``, or ``[n, K]`` (multi-class)."""
    from registry.inputs import model_answers
    from registry.saved_model import load

    return model_answers(load(path), schema, columns, batch=SCORE_BATCH)


def validate(control: JobControl, plan: Plan, candidate: int, data: JobData) -> GateResult:
    """Score the holdout with the candidate and the version serving now, and run the gate."""
    with control.db.session() as session:
        row = get_version(session=session, model_name=plan.model_name, version=candidate)
        current = serving_version(session=session, model_name=plan.model_name)
    if row is None:
        raise Conflict(f"candidate {plan.model_name}:{candidate} is not in the registry any more")
    if current is not None and current.version != plan.serving:
        record_on_job(
            control, lines=[f"version {current.version} serves now (not {plan.serving}): compared with it"]
        )
    cand_schema = read_schema(path=Path(row.path))
    columns = read_table(data.holdout)
    target = columns.pop(cand_schema.target)
    if cand_schema.kind is Task.MULTICLASS:  # class names -> class indexes in the output's order
        labels = label_codes(target, cand_schema.classes)
    else:
        labels = np.asarray(target, dtype=np.float64)
    cand = score_version(Path(row.path), cand_schema, columns)
    serving = serving_schema = None
    signatures: tuple[SourceSignature | None, SourceSignature | None] = (None, None)
    if current is not None and current.version != candidate:
        path = Path(current.path)
        serving_schema = read_schema(path=path)
        serving = score_version(path, serving_schema, columns)
        signatures = (read_signature(path=path), read_signature(path=Path(row.path)))
    holdout = Holdout(columns=columns, labels=labels, candidate=cand, serving=serving)
    policy = GatePolicy.from_settings(control.settings)
    return evaluate(
        schema=cand_schema,
        holdout=holdout,
        policy=policy,
        serving_schema=serving_schema,
        signatures=signatures,
    )


def conclude(control: JobControl, plan: Plan, candidate: int, result: GateResult) -> JobState:
    """Promote, hold or reject the candidate and end the job, in one transaction."""
    settings = control.settings
    lines = [f"gate {c.name}: {'passed' if c.passed else 'FAILED'}: {c.message}" for c in result.checks]
    with control.db.session() as session:
        if result.passed and settings.retrain_auto_promote:
            promote(session=session, model_name=plan.model_name, version=candidate, actor=control.actor)
            state = JobState.PROMOTED
            lines.append(f"{plan.model_name}:{candidate} is now serving")
        elif result.passed:
            state = JobState.PASSED
            lines.append(
                f"held for a manual promotion (retrain_auto_promote is off): "
                f"driftwarden models promote {plan.model_name} {candidate}"
            )
        elif result.verdict is Verdict.UNDECIDED and [c.name for c in result.undecided] == ["input_contract"]:
            state = JobState.UNDECIDED
            lines.append(
                f"{plan.model_name}:{candidate} stays staged: its contract breaks the serving version's "
                "clients (gate input_contract); a person decides: driftwarden models promote "
                f"{plan.model_name} {candidate} --accept-contract-change, or driftwarden models reject "
                f"{plan.model_name} {candidate} --reason TEXT"
            )
        elif result.verdict is Verdict.UNDECIDED:
            state = JobState.UNDECIDED
            lines.append(
                f"the gate could not decide ({', '.join(c.name for c in result.undecided)}): "
                f"{plan.model_name}:{candidate} stays staged for a person to decide: "
                f"driftwarden models promote {plan.model_name} {candidate}, or driftwarden models reject "
                f"{plan.model_name} {candidate} --reason TEXT; a larger holdout decides on its own "
                "(more labelled rows, DRIFTWARDEN_RETRAIN_HOLDOUT_MIN_ROWS)"
            )
        else:
            reject(
                session=session,
                model_name=plan.model_name,
                version=candidate,
                reason=f"job {control.job_id}: {result.summary()}",
                actor=control.actor,
            )
            state = JobState.REJECTED
            lines.append(f"{plan.model_name}:{candidate} rejected; the serving version is unchanged")
        owned = finish(
            session=session,
            job_id=control.job_id,
            worker_id=control.worker_id,
            state=state,
            gate=result.as_dict(),
            result_version=candidate,
            lines=lines,
        )
        if not owned:  # taken over meanwhile: undo the promotion / rejection with this transaction
            control.halt(StopReason.LEASE_LOST)
            control.check()
    return state


def end_badly(
    control: JobControl, snap: Snapshot, candidate: int | None, state: JobState, error: str | None, what: str
) -> None:
    """End the job cancelled or failed; its candidate, if one was registered, is rejected with it."""
    try:
        with control.db.session() as session:
            if candidate is not None:
                row = get_version(session=session, model_name=snap.model_name, version=candidate)
                if row is not None and row.state is VersionState.STAGED:
                    reject(
                        session=session,
                        model_name=snap.model_name,
                        version=candidate,
                        reason=f"job {snap.id} {what}" + (f": {error}" if error else ""),
                        actor=control.actor,
                    )
            finish(session=session, job_id=snap.id, worker_id=control.worker_id, state=state, error=error)
    except Exception:
        log.exception("job %d: could not reject candidate %s; ending the job only", snap.id, candidate)
        with control.db.session() as session:
            finish(session=session, job_id=snap.id, worker_id=control.worker_id, state=state, error=error)
