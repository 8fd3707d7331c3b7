"""Training commands: ``data generate``, ``train``, ``cluster node|chief|sync-worker``, the retraining job
queue (``jobs list|show|cancel|submit``) and its ``worker``.

TensorFlow loads inside the commands only, never at import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core.errors import DomainError, Invalid
from training.datagen import Scenario
from training.jobs import Mode

data_app = typer.Typer(help="Synthetic data sets with planted drift.", no_args_is_help=True)
cluster_app = typer.Typer(help="TensorFlow cluster nodes.", no_args_is_help=True)
jobs_app = typer.Typer(
    help="Retraining jobs: list, show, cancel and submit. `driftwarden worker` runs them.",
    no_args_is_help=True,
)


@cluster_app.command("node")
def cluster_node(
    role: Annotated[str, typer.Option("--role", help="ps or worker.")],
    index: Annotated[int, typer.Option("--index", min=0, help="Task index within the role.")],
    cluster: Annotated[
        str,
        typer.Option(
            "--cluster",
            help='Cluster spec: JSON like {"chief": ["h:p"], "ps": ["h:p"], "worker": ["h:p", "h:p"]}, '
            "a path to such a file, or a TF_CONFIG document.",
        ),
    ],
) -> None:
    """Run one TF server (ps or worker) of a cluster until killed: what each ps/worker machine runs.

    The chief is not a node: `driftwarden train` starts it on its own machine (`driftwarden cluster chief`
    in async mode; worker 0 of `driftwarden cluster sync-worker` in sync mode) and it connects to the nodes.
    """
    from core.logs import setup_logging
    from training.cluster import ClusterSpec
    from training.node import run_server

    setup_logging()
    try:
        spec = ClusterSpec.parse(cluster)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--cluster") from exc
    if role not in {"ps", "worker"}:
        raise typer.BadParameter("must be ps or worker", param_hint="--role")
    if index >= len(getattr(spec, role)):
        raise typer.BadParameter(
            f"the spec has {len(getattr(spec, role))} {role} task(s)", param_hint="--index"
        )
    run_server(role=role, index=index, spec=spec)


@data_app.command("generate")
def data_generate(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output file: .csv or .parquet, in an existing folder.")
    ],
    rows: Annotated[int, typer.Option("--rows", "-n", min=1, help="Number of rows.")] = 20_000,
    scenario: Annotated[
        Scenario, typer.Option("--scenario", "-s", help="Which drift to plant.")
    ] = Scenario.BASELINE,
    seed: Annotated[int, typer.Option("--seed", help="Random seed; same seed, same table.")] = 0,
    severity: Annotated[float, typer.Option("--severity", min=0.0, help="Scale of the planted drift.")] = 1.0,
) -> None:
    """Generate a credit-risk table (target column `default`) under a drift scenario."""
    from core.tabular import SUFFIXES, write_table
    from training.datagen import TARGET, generate

    if out.suffix.lower() not in SUFFIXES:
        raise Invalid(
            f"--out {out}: unsupported file type {out.suffix or '(none)'!r}; "
            f"use one of {', '.join(sorted(SUFFIXES))}"
        )
    folder = out.parent
    if folder.exists() and not folder.is_dir():
        raise Invalid(f"--out {out}: {folder} is a file, not a folder; choose another path")
    if not folder.exists():
        raise Invalid(f"--out {out}: the folder {folder} does not exist; create it first (mkdir -p {folder})")
    if out.is_dir():
        raise Invalid(f"--out {out} is a folder: give a file name ending in .csv or .parquet")
    cols = generate(rows, scenario=scenario, seed=seed, severity=severity)
    write_table(cols, out)
    typer.echo(
        f"wrote {rows} rows ({scenario.value}, seed {seed}, default rate {cols[TARGET].mean():.3f}) to {out}"
    )


@cluster_app.command("chief")
def cluster_chief(
    job: Annotated[Path, typer.Option("--job", help="job.json written by `driftwarden train`.")],
) -> None:
    """Run the async chief of a job: connect to its ps/worker nodes, train, write the final weights."""
    from core.logs import setup_logging
    from training.trainers.async_ps import ParameterServerLost, run_chief

    setup_logging()
    try:
        run_chief(job)
    except ParameterServerLost as exc:
        typer.secho(str(exc), fg=typer.colors.RED, err=True)
        raise typer.Exit(3) from exc


@cluster_app.command("sync-worker")
def cluster_sync_worker(
    job: Annotated[Path, typer.Option("--job", help="job.json written by `driftwarden train`.")],
    index: Annotated[int, typer.Option("--index", min=0, help="Worker index; 0 acts as chief.")],
) -> None:
    """Run one synchronous (all-reduce) worker of a job."""
    from core.logs import setup_logging
    from training.trainers.sync_mwms import run_worker

    setup_logging()
    run_worker(job, index)


def train(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name in the registry.")],
    data: Annotated[
        Path, typer.Option("--data", "-d", help="Training data: .csv or .parquet with a 0/1 target.")
    ],
    mode: Annotated[
        Mode, typer.Option("--mode", help="async: parameter servers; sync: all-reduce; local: one process.")
    ] = Mode.ASYNC,
    ps: Annotated[
        int | None, typer.Option("--ps", min=1, help="Parameter servers (--mode async only; default 1).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=1, help="Worker processes (--mode async or sync; default 2)."),
    ] = None,
    epochs: Annotated[float, typer.Option("--epochs", min=0.01, help="Passes over the training rows.")] = 3.0,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Global batch size.")] = 64,
    learning_rate: Annotated[
        float, typer.Option("--learning-rate", min=0.0, help="Adam learning rate.")
    ] = 0.003,
    target: Annotated[str, typer.Option("--target", help="Name of the 0/1 label column.")] = "default",
    seed: Annotated[int, typer.Option("--seed", help="Seed for the split, init and shuffling.")] = 0,
    checkpoint_every: Annotated[
        int | None,
        typer.Option("--checkpoint-every", min=1, help="Steps between checkpoints (default: settings)."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="Async only: train on an already running cluster (JSON spec or file with chief, ps and "
            "worker addresses; each ps/worker machine runs `driftwarden cluster node`). "
            "Default: start a local cluster on loopback.",
        ),
    ] = None,
) -> None:
    """Train MODEL on a TensorFlow cluster and register a new (staged) version.

    By default a local cluster (ps and worker processes on loopback) is started for the run and always
    stopped. async: parameter servers hold the variables, each worker's gradient is applied on arrival.
    sync: every step waits for all workers (all-reduce). Rerunning the same command after a crash resumes
    from the latest checkpoint.
    """
    from core.config import get_settings
    from core.database import open_database
    from core.logs import quiet_tensorflow_banner, setup_logging
    from registry.names import check_name
    from training.jobs import TrainJob, prepare
    from training.progress import Progress

    check_name(model, given_as="--model")  # fails before any data is read or any process started
    _check_cluster_options(mode=mode, ps=ps, workers=workers, cluster=cluster)
    setup_logging()
    quiet_tensorflow_banner()  # before TensorFlow loads here or in the cluster processes started below
    settings = get_settings()
    job = TrainJob(
        model_name=model,
        data=data,
        mode=mode,
        ps=ps or 1,
        workers=workers or 2,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        target=target,
        seed=seed,
        steps_per_closure=settings.steps_per_closure,
        checkpoint_every=checkpoint_every or settings.checkpoint_every_steps,
    )
    if not data.exists():
        raise Invalid(f"--data {data} does not exist (make one with `driftwarden data generate`)")
    prepared = prepare(job)  # bad data ends here, before a database is opened or any process started
    from training.cluster import ClusterSpec, NodeLost
    from training.flows import run_training

    external = None
    if cluster is not None:
        try:
            external = ClusterSpec.parse(cluster)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--cluster") from exc
        if mode is not Mode.ASYNC:
            raise typer.BadParameter("an external cluster needs --mode async", param_hint="--cluster")
    db = open_database()
    progress = Progress(f"train {model} ({mode.value})")
    try:
        result = run_training(
            job=job,
            db=db,
            registry=settings.registry_path,
            checkpoint_root=settings.checkpoint_path,
            progress=progress,
            cluster=external,
            prepared=prepared,
        )
    except DomainError:
        raise  # bad input: one line from the root command, no "rerun to resume"
    except (NodeLost, TimeoutError, ValueError, FileNotFoundError, RuntimeError) as exc:
        progress.close()
        typer.secho(f"training failed: {exc}", fg=typer.colors.RED, err=True)
        typer.echo("progress up to the last checkpoint is kept: rerun the same command to resume", err=True)
        raise typer.Exit(1) from exc
    finally:
        progress.close()
        db.dispose()
    m = result.metrics
    typer.echo(
        f"registered {model}:{result.version.version} (staged) in {result.seconds:.1f}s: "
        f"held-out accuracy {m['accuracy']:.4f}, ROC AUC {m['roc_auc']:.4f} (held-out rows {m['rows']}); "
        f"training rows {prepared.train_rows}"
    )


def _check_cluster_options(*, mode: Mode, ps: int | None, workers: int | None, cluster: str | None) -> None:
    """Options that the chosen mode would ignore are an error, never silently dropped."""
    if ps is not None and mode is not Mode.ASYNC:
        raise Invalid(
            f"--ps applies to --mode async only: --mode {mode.value} has no parameter servers "
            f"({'all-reduce between the workers' if mode is Mode.SYNC else 'one process'}); drop --ps"
        )
    if workers is not None and mode is Mode.LOCAL:
        raise Invalid("--workers does not apply to --mode local (one process): drop --workers")
    if cluster is not None and (ps is not None or workers is not None):
        raise Invalid("--ps and --workers come from the --cluster spec: drop them when you give --cluster")


JOB_STATES = "queued, running, validating, promoted, passed, rejected, failed, cancelled"


@jobs_app.command("list")
def jobs_list(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Only this model's jobs.")] = None,
    state: Annotated[
        str | None, typer.Option("--state", help=f"Only jobs in this state ({JOB_STATES}).")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most this many, newest first.")
    ] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
) -> None:
    """List retraining jobs, newest first: state, trigger, progress, versions, outcome."""
    import json

    from rich.console import Console
    from rich.table import Table

    from core.database import open_database
    from training.service import job_document, list_jobs

    db = open_database()
    try:
        with db.session() as session:
            docs = [
                job_document(j)
                for j in list_jobs(session=session, model_name=model, state=state, limit=limit)
            ]
    finally:
        db.dispose()
    if as_json:
        typer.echo(json.dumps(docs, indent=2))
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
    Console().print(table)


@jobs_app.command("show")
def jobs_show(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id (from `driftwarden jobs list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of text.")] = False,
) -> None:
    """Show one job: state, progress, data window, validation gate checks with their figures, log tail."""
    import json

    from core.database import open_database
    from training.service import get_job, job_document

    db = open_database()
    try:
        with db.session() as session:
            d = job_document(get_job(session=session, job_id=job_id))
    finally:
        db.dispose()
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    typer.echo(f"job {d['id']}: {d['state']}  model {d['model_name']}")
    typer.echo(f"  trigger: {d['trigger']} by {d['requested_by']}" + _alert(d))
    typer.echo(f"  params: {json.dumps(d['params'])}")
    typer.echo(
        f"  created {d['created_at']}  started {d['started_at'] or '-'}  finished {d['finished_at'] or '-'}"
    )
    typer.echo(f"  attempts: {d['attempts']}  worker: {d['lease_owner'] or '-'}")
    typer.echo(f"  progress: {_progress_text(d['progress']) or '-'}")
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
        typer.echo(f"validation gate: {'passed' if gate['passed'] else 'FAILED'}")
        for check in gate["checks"]:
            typer.echo(f"  [{'pass' if check['passed'] else 'FAIL'}] {check['name']}: {check['message']}")
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
    from training.service import request_cancel

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
        typer.Option("--epochs", min=0.01, help="Passes over the rows (default: retrain_epochs)."),
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", min=1, help="Cluster workers (async, sync).")
    ] = None,
    ps: Annotated[int | None, typer.Option("--ps", min=1, help="Parameter servers (async only).")] = None,
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
    DRIFTWARDEN_RETRAIN_AUTO_PROMOTE is off). An active job of the model is answered instead of a second one.
    """
    import getpass

    from core.database import open_database
    from training.service import enqueue

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
            "passed, 1 when it ended rejected, failed or cancelled (or was given back).",
        ),
    ] = False,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            min=0.05,
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
    from training.worker import Worker

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
        typer.echo(f"stopping (signal {signum}): the running job is given back to the queue", err=True)
        stop.set()
        runner.interrupt()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    typer.echo(f"worker {runner.worker_id} waiting for jobs (Ctrl-C stops)", err=True)
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
        failed = [str(c["name"]) for c in gate.get("checks", []) if not c.get("passed")]
        return "gate passed" if not failed else "gate failed: " + ", ".join(failed)
    error = d.get("error")
    return str(error)[:60] if error else ""


def register(app: typer.Typer) -> None:
    """Add the training commands to the root CLI."""
    app.add_typer(data_app, name="data")
    app.add_typer(cluster_app, name="cluster")
    app.add_typer(jobs_app, name="jobs")
    app.command("train")(train)
    app.command("worker")(worker)
