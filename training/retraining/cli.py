"""The retraining job queue on the command line: ``jobs list|show|cancel|submit`` and ``worker``.

TensorFlow loads only inside a job the worker runs, never at import.
"""

from __future__ import annotations

from typing import Annotated

import typer

from core.bounds import MAX_CLUSTER_WORKERS, MAX_EPOCHS, MAX_PARAMETER_SERVERS, MAX_POLL_S
from core.cli_options import JsonOut, write_json
from core.terminal import make_console, note
from training.cluster.run_spec import Mode

jobs_app = typer.Typer(
    help="Retraining jobs: list, show, cancel and submit. `driftwarden worker` runs them.",
    no_args_is_help=True,
)


JOB_STATES = "queued, running, validating, promoted, passed, undecided, rejected, failed, cancelled"


@jobs_app.command("list")
def jobs_list(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Only this model's jobs.")] = None,
    state: Annotated[
        str | None, typer.Option("--state", help=f"Only jobs in this state ({JOB_STATES}).")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most this many, newest first.")
    ] = 50,
    as_json: JsonOut = None,
) -> None:
    """List retraining jobs, newest first: state, trigger, progress, versions, outcome."""

    from rich.table import Table

    from core.database import open_database
    from training.retraining.service import job_document, list_jobs

    db = open_database()
    try:
        with db.session() as session:
            docs = [
                job_document(j)
                for j in list_jobs(session=session, model_name=model, state=state, limit=limit)
            ]
    finally:
        db.dispose()
    if as_json is not None:
        write_json(docs, to=as_json)
        return
    if not docs:
        typer.echo(
            "no retraining jobs yet. Queue one with `driftwarden jobs submit --model NAME` (or POST "
            "/v1/models/NAME/retrain); `driftwarden worker` runs them"
        )
        return
    table = Table(title="Retraining jobs")
    for col in ("id", "model", "state", "trigger", "progress", "parent", "candidate", "created", "outcome"):
        table.add_column(col)
    for d in docs:
        table.add_row(
            str(d["id"]),
            d["model_name"],
            d["state"] + (" (cancel requested)" if d["cancel_requested"] and d["state"] == "running" else ""),
            d["trigger"],
            _progress_text(d["progress"]),
            _opt(d["parent_version"]),
            _opt(d["result_version"]),
            (d["created_at"] or "")[:19].replace("T", " "),
            _outcome(d),
        )
    make_console().print(table)


@jobs_app.command("show")
def jobs_show(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id (from `driftwarden jobs list`).")],
    as_json: JsonOut = None,
) -> None:
    """Show one job: state, progress, data window, validation gate checks with their figures, log tail."""
    import json

    from core.database import open_database
    from training.retraining.service import get_job, job_document

    db = open_database()
    try:
        with db.session() as session:
            d = job_document(get_job(session=session, job_id=job_id))
    finally:
        db.dispose()
    if as_json is not None:
        write_json(d, to=as_json)
        return
    typer.echo(f"job {d['id']}: {d['state']}  model {d['model_name']}")
    typer.echo(f"  trigger: {d['trigger']} by {d['requested_by']}" + _alert(d))
    typer.echo(f"  params: {json.dumps(d['params'])}")
    typer.echo(
        f"  created {d['created_at']}  started {d['started_at'] or '-'}  finished {d['finished_at'] or '-'}"
    )
    typer.echo(f"  attempts: {d['attempts']}  worker: {d['lease_owner'] or '-'}")
    typer.echo(f"  progress: {_progress_text(d['progress']) or '-'}")
    if isinstance((d["progress"] or {}).get("cluster"), dict):
        from training.cluster.sharding import describe

        typer.echo(f"  cluster: {describe(d['progress']['cluster'])}")
    typer.echo(
        f"  parent version: {_opt(d['parent_version'])}  candidate version: {_opt(d['result_version'])}"
    )
    if d["cancel_requested"]:
        typer.echo("  cancel requested")
    if d["error"]:
        typer.echo(f"  error: {d['error']}")
    if d["data_window"]:
        typer.echo("data window:")
        for key, value in d["data_window"].items():
            typer.echo(f"  {key}: {value}")
    gate = d["gate"]
    if gate:
        from training.retraining.gate import check_verdict

        verdict = gate.get("verdict") or ("passed" if gate["passed"] else "failed")
        typer.echo(f"validation gate: {'passed' if verdict == 'passed' else verdict.upper()}")
        for check in gate["checks"]:
            typer.echo(f"  [{check_verdict(check).mark}] {check['name']}: {check['message']}")
            for key, value in check["figures"].items():
                typer.echo(f"         {key}: {value if isinstance(value, str) else json.dumps(value)}")
    typer.echo("log tail:")
    for line in d["log_tail"] or ["(empty)"]:
        typer.echo(f"  {line}")


@jobs_app.command("cancel")
def jobs_cancel(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")],
) -> None:
    """Cancel a job: a queued one at once; a running one stops at its worker's next heartbeat.

    A cancelled job's candidate version, if one was registered, is rejected; the serving version is untouched.
    """
    from core.config import get_settings
    from core.database import open_database
    from core.events import JOB_FINISHED, publish
    from training.retraining.service import request_cancel

    db = open_database()
    try:
        with db.session() as session:
            job = request_cancel(session=session, job_id=job_id)
            state = job.state.value
        if state == "cancelled":  # ended at once (it was queued): announce it as a worker would
            publish(JOB_FINISHED, db=db, settings=get_settings(), job_id=job_id)
    finally:
        db.dispose()
    if state == "cancelled":
        typer.echo(f"job {job_id} cancelled")
    else:
        typer.echo(f"job {job_id} is {state}: cancel requested, its worker stops it at the next heartbeat")


@jobs_app.command("submit")
def jobs_submit(
    model: Annotated[str, typer.Option("--model", "-m", help="Model to retrain (a registered one).")],
    mode: Annotated[
        Mode | None,
        typer.Option(
            "--mode", help="async | sync | local (default: the serving version's mode, else async)."
        ),
    ] = None,
    epochs: Annotated[
        float | None,
        typer.Option(
            "--epochs", min=0.01, max=MAX_EPOCHS, help="Passes over the rows (default: retrain_epochs)."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=1, max=MAX_CLUSTER_WORKERS, help="Cluster workers (async, sync)."),
    ] = None,
    ps: Annotated[
        int | None,
        typer.Option("--ps", min=1, max=MAX_PARAMETER_SERVERS, help="Parameter servers (async only)."),
    ] = None,
    drill: Annotated[
        str | None,
        typer.Option(
            "--drill",
            help="shuffled_labels: a fire drill that trains on shuffled labels; the gate must reject it.",
        ),
    ] = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept with the job).")] = None,
) -> None:
    """Queue a retraining job of MODEL on its labelled predictions (`driftwarden worker` runs it).

    The job reads the newest labelled predictions, holds out the newest share for the validation gate,
    trains a candidate, and promotes it only when the gate passes (or holds it when
    DRIFTWARDEN_RETRAIN_AUTO_PROMOTE is off, or when the holdout is too small for the gate to decide). An
    active job of the model is answered instead of a second one. The job trains the base version's own
    network (the builder function its lineage records, `driftwarden train --model-fn`); a version imported
    without --model-fn cannot be retrained (exit 2, naming the fix).
    """
    import getpass

    from core.database import open_database
    from training.retraining.service import enqueue

    params = {
        k: v
        for k, v in {
            "mode": mode.value if mode else None,
            "epochs": epochs,
            "workers": workers,
            "ps": ps,
            "drill": drill,
            "reason": reason,
        }.items()
        if v is not None
    }
    db = open_database()
    try:
        with db.session() as session:
            outcome = enqueue(
                session=session,
                model_name=model,
                trigger="cli",
                requested_by=f"cli:{getpass.getuser()}",
                params=params,
            )
    finally:
        db.dispose()
    if outcome.created:
        typer.echo(
            f"job {outcome.job_id} queued for {model}: `driftwarden jobs show {outcome.job_id}` follows it"
        )
    else:
        typer.echo(f"no new job: {outcome.reason} (`driftwarden jobs show {outcome.job_id}`)")


def worker(
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Run at most one job, then exit: 0 when no job was waiting or the job ended promoted or "
            "passed, 1 when it ended undecided, rejected, failed or cancelled (or was given back).",
        ),
    ] = False,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            min=0.05,
            max=MAX_POLL_S,
            help="Seconds between looks for a job when idle (default: job_poll_interval_s).",
        ),
    ] = None,
) -> None:
    """Run retraining jobs from the queue until interrupted (the worker of the training machines).

    Each job: the model's newest labelled predictions -> train a candidate (the job's mode: a local cluster of
    ps/worker processes, or one process) -> the validation gate on the newest rows held out -> promote,
    hold or reject. Any number of workers may share one database: each job runs on one of them, which holds
    a lease (DRIFTWARDEN_JOB_LEASE_S) by heartbeats; the job of a worker that dies is taken over by another
    once its lease expires. Ctrl-C or SIGTERM stops the running job and gives it back to the queue.
    """
    import signal
    import threading

    from core.config import get_settings
    from core.database import open_database
    from core.logs import quiet_tensorflow_banner, setup_logging
    from training.retraining.worker import Worker

    setup_logging()
    quiet_tensorflow_banner()
    settings = get_settings()
    if poll is not None:
        settings = settings.model_copy(update={"job_poll_interval_s": poll})
    db = open_database(settings=settings)
    runner = Worker(db=db, settings=settings)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # a second Ctrl-C: leave now
        note(f"stopping (signal {signum}): the running job is given back to the queue")
        stop.set()
        runner.interrupt()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    note(f"worker {runner.worker_id} waiting for jobs (Ctrl-C stops)")
    try:
        if once:
            job_id = runner.run_once()
            if job_id is None:
                typer.echo("no job waiting")
                return
            state = runner.last_state.value if runner.last_state is not None else "given back (not finished)"
            typer.echo(f"job {job_id} ended: {state}")
            if state not in ("promoted", "passed"):
                raise typer.Exit(1)
            return
        runner.run_forever(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        db.dispose()


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


def _alert(d: dict[str, object]) -> str:
    return f" (alert {d['alert_id']})" if d.get("alert_id") is not None else ""


def _progress_text(progress: dict[str, object]) -> str:
    if not progress:
        return ""
    step, total, loss = progress.get("step"), progress.get("total_steps"), progress.get("loss")
    text = f"{step}/{total}" if total else ""
    if isinstance(loss, float):
        text += f" loss {loss:.4f}"
    phase = progress.get("phase")
    return f"{text} ({phase})" if phase else text


def _outcome(d: dict[str, object]) -> str:
    gate = d.get("gate")
    if isinstance(gate, dict):
        from training.retraining.gate import Verdict, check_verdict

        checks = gate.get("checks", [])
        failed = [str(c["name"]) for c in checks if check_verdict(c) is Verdict.FAILED]
        undecided = [str(c["name"]) for c in checks if check_verdict(c) is Verdict.UNDECIDED]
        if failed:
            return "gate failed: " + ", ".join(failed)
        return "gate undecided: " + ", ".join(undecided) if undecided else "gate passed"
    error = d.get("error")
    return str(error)[:60] if error else ""


def register(app: typer.Typer) -> None:
    """Add ``jobs ...`` and ``worker`` to the root CLI."""
    app.add_typer(jobs_app, name="jobs")
    app.command("worker")(worker)
