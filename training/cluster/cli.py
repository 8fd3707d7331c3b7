"""Training commands: ``data generate``, ``train``, ``cluster node|chief|sync-worker``; the retraining job
queue's commands (``jobs ...``, ``worker``) are in :mod:`training.retraining.cli`.

TensorFlow loads inside the commands only, never at import.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import numpy as np
import typer

from core.bounds import (
    MAX_BATCH_SIZE,
    MAX_CLUSTER_WORKERS,
    MAX_EPOCHS,
    MAX_GENERATED_ROWS,
    MAX_PARAMETER_SERVERS,
    MAX_SEED,
)
from core.errors import DomainError, Invalid
from training.cluster.datagen import Scenario
from training.cluster.run_spec import Mode

if TYPE_CHECKING:
    from registry.schema import Task
    from training.cluster.run_spec import TrainingRunSpec

data_app = typer.Typer(help="Synthetic data sets with planted drift.", no_args_is_help=True)
cluster_app = typer.Typer(help="TensorFlow cluster nodes.", no_args_is_help=True)


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
    from training.cluster.node import run_server
    from training.cluster.nodes import ClusterSpec

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
    rows: Annotated[
        int, typer.Option("--rows", "-n", min=1, max=MAX_GENERATED_ROWS, help="Number of rows.")
    ] = 20_000,
    scenario: Annotated[
        Scenario, typer.Option("--scenario", "-s", help="Which drift to plant.")
    ] = Scenario.BASELINE,
    seed: Annotated[
        int, typer.Option("--seed", min=0, max=MAX_SEED, help="Random seed; same seed, same table.")
    ] = 0,
    severity: Annotated[float, typer.Option("--severity", min=0.0, help="Scale of the planted drift.")] = 1.0,
    task: Annotated[
        str,
        typer.Option(
            "--task",
            help="The target to generate: binary (column `default`, 0/1), multiclass (column `risk_band`: "
            "low, medium, high) or regression (column `loss_amount`: the loss in thousands).",
        ),
    ] = "binary",
) -> None:
    """Generate a credit-risk table under a drift scenario, with the --task's target column: `default`
    (binary), `risk_band` (multiclass) or `loss_amount` (regression), all from the same latent risk."""
    from core.tabular import SUFFIXES, write_table
    from registry.schema import Task
    from training.cluster.datagen import TARGETS, generate

    kind = _task(task)

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
    cols = generate(rows, scenario=scenario, seed=seed, severity=severity, task=kind)
    write_table(cols, out)
    y = cols[TARGETS[kind]]
    if kind is Task.MULTICLASS:
        names, counts = np.unique(y.astype(str), return_counts=True)
        summary = "risk_band " + ", ".join(f"{n} {c / rows:.3f}" for n, c in zip(names, counts, strict=True))
    elif kind is Task.REGRESSION:
        summary = f"mean loss_amount {float(np.mean(y)):.3f}"
    else:
        summary = f"default rate {y.mean():.3f}"
    typer.echo(f"wrote {rows} rows ({scenario.value}, seed {seed}, {summary}) to {out}")


@cluster_app.command("chief")
def cluster_chief(
    job: Annotated[Path, typer.Option("--job", help="job.json written by `driftwarden train`.")],
) -> None:
    """Run the async chief of a job: connect to its ps/worker nodes, train, write the final weights."""
    from core.logs import setup_logging
    from training.cluster.trainers.async_ps import ParameterServerLost, run_chief

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
    from training.cluster.trainers.sync_mwms import run_worker

    setup_logging()
    run_worker(job, index)


def _task(text: str) -> Task:
    from registry.schema import Task

    try:
        return Task.parse(text)
    except ValueError as exc:
        raise Invalid(f"--task {text}: {exc}") from None


def train(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name in the registry.")],
    data: Annotated[
        Path,
        typer.Option(
            "--data", "-d", help="Training data: .csv or .parquet with the target column (see --task)."
        ),
    ],
    mode: Annotated[
        Mode, typer.Option("--mode", help="async: parameter servers; sync: all-reduce; local: one process.")
    ] = Mode.ASYNC,
    ps: Annotated[
        int | None,
        typer.Option(
            "--ps", min=1, max=MAX_PARAMETER_SERVERS, help="Parameter servers (--mode async only; default 1)."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            max=MAX_CLUSTER_WORKERS,
            help="Worker processes (--mode async or sync; default 2).",
        ),
    ] = None,
    epochs: Annotated[
        float, typer.Option("--epochs", min=0.01, max=MAX_EPOCHS, help="Passes over the training rows.")
    ] = 3.0,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, max=MAX_BATCH_SIZE, help="Global batch size.")
    ] = 64,
    learning_rate: Annotated[
        float, typer.Option("--learning-rate", min=0.0, help="Adam learning rate.")
    ] = 0.003,
    task: Annotated[
        str,
        typer.Option(
            "--task",
            help="What the model predicts: binary (0/1 target, output `probability`), multiclass (a class "
            "label target, at least 3 classes; output `probabilities`, one per class in sorted order) or "
            "regression (a numeric target; output `value`).",
        ),
    ] = "binary",
    model_fn: Annotated[
        str | None,
        typer.Option(
            "--model-fn",
            help="Your own Keras network: FILE.py:FUNC or package.module:FUNC, called as "
            "FUNC(input_dim=D, outputs=K, task=T) and returning an uncompiled keras.Model from the "
            "encoded (batch, D) float32 matrix to (batch, K) logits (K = classes for multiclass, else 1) "
            "or values (regression). It is loaded and tried on a zero batch before anything starts; "
            "default: the built-in MLP (see docs/training.md).",
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="Name of the target column (default: default for binary, risk_band for multiclass, "
            "loss_amount for regression, as `driftwarden data generate --task` writes them).",
        ),
    ] = None,
    features: Annotated[
        str | None,
        typer.Option(
            "--features",
            help="Only these columns are features, in this order (a,b,...); default: every column but "
            "the target. The version's lineage records the list.",
        ),
    ] = None,
    exclude: Annotated[
        str | None,
        typer.Option(
            "--exclude",
            help="Every column but these and the target is a feature (c,d,...): a second label, an id. "
            "Not with --features.",
        ),
    ] = None,
    embed: Annotated[
        list[str] | None,
        typer.Option(
            "--embed",
            help="FEATURE[:DIM] (repeatable): hash this categorical feature into buckets and learn a "
            "DIM-wide embedding (default DIM: settings, 8) instead of one-hot encoding it; a feature with "
            "more levels than DRIFTWARDEN_EMBED_MIN_LEVELS (1,000) is embedded without it. With --ps 2 or "
            "more a large table is sharded over the parameter servers.",
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed for the split, init and shuffling.")
    ] = 0,
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

    --task picks the target and the loss (binary: sigmoid cross-entropy; multiclass: softmax
    cross-entropy; regression: squared error); --model-fn trains your own Keras network instead of the
    built-in MLP, in every mode, and the version's lineage records it (reference and file SHA-256), so
    retraining jobs rebuild it. Every column but the target is a feature unless --features (only these)
    or --exclude (all but these) says otherwise; retraining jobs keep the version's features.
    """
    job, kind = _train_spec(
        model=model,
        data=data,
        mode=mode,
        ps=ps,
        workers=workers,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        task=task,
        model_fn=model_fn,
        target=target,
        features=features,
        exclude=exclude,
        embed=embed,
        seed=seed,
        checkpoint_every=checkpoint_every,
        cluster=cluster,
    )
    _train_and_report(job, kind, cluster=cluster)


def _train_spec(
    *,
    model: str,
    data: Path,
    mode: Mode,
    ps: int | None,
    workers: int | None,
    epochs: float,
    batch_size: int,
    learning_rate: float,
    task: str,
    model_fn: str | None,
    target: str | None,
    features: str | None,
    exclude: str | None,
    embed: list[str] | None,
    seed: int,
    checkpoint_every: int | None,
    cluster: str | None,
) -> tuple[TrainingRunSpec, Task]:
    """`train`'s options checked and made into the run's spec (logging set up before TensorFlow loads)."""
    from core.config import get_settings
    from core.logs import quiet_tensorflow_banner, setup_logging
    from registry.names import check_name
    from training.cluster.builders import normalize
    from training.cluster.datagen import TARGETS
    from training.cluster.run_spec import TrainingRunSpec

    check_name(model, given_as="--model")  # fails before any data is read or any process started
    _check_cluster_options(mode=mode, ps=ps, workers=workers, cluster=cluster)
    kind = _task(task)
    if features is not None and exclude is not None:
        raise Invalid("--features and --exclude choose the features two ways: give one of them")
    chosen, excluded = _columns(features, "--features"), _columns(exclude, "--exclude")
    fn_ref = normalize(model_fn)  # a file's path made absolute: the cluster processes load it too
    setup_logging()
    quiet_tensorflow_banner()  # before TensorFlow loads here or in the cluster processes started below
    settings = get_settings()
    job = TrainingRunSpec(
        model_name=model,
        data=data,
        mode=mode,
        ps=ps or 1,
        workers=workers or 2,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        target=target or TARGETS[kind],
        seed=seed,
        steps_per_closure=settings.steps_per_closure,
        checkpoint_every=checkpoint_every or settings.checkpoint_every_steps,
        task=kind.short,
        model_fn=fn_ref,
        features=chosen,
        exclude=excluded,
        embed=tuple(embed or ()),
    )
    if not data.exists():
        raise Invalid(f"--data {data} does not exist (make one with `driftwarden data generate`)")
    return job, kind


def _train_and_report(job: TrainingRunSpec, kind: Task, *, cluster: str | None) -> None:
    """Prepare the data, probe the builder, train (on ``cluster`` when given) and say what was registered."""
    from core.config import get_settings
    from core.database import open_database
    from training.cluster.progress import Progress
    from training.cluster.run_spec import prepare

    settings = get_settings()
    model, mode = job.model_name, job.mode
    prepared = prepare(job)  # bad data ends here, before a database is opened or any process started
    from training.cluster.builders import output_width, probe
    from training.cluster.flows import metrics_line, run_training
    from training.cluster.nodes import ClusterSpec, NodeLost

    # a broken builder ends here in one line (exit 2), before any cluster process starts
    probe(
        job.model_fn,
        input_dim=prepared.prep.width,
        outputs=output_width(kind, len(prepared.schema.classes)),
        task=kind,
    )

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
        f"{metrics_line(kind, m)} (held-out rows {m['rows']}); training rows {prepared.train_rows}"
    )


def _columns(text: str | None, option: str) -> tuple[str, ...]:
    """A comma-separated list of column names (distinct, none empty)."""
    if text is None:
        return ()
    names = tuple(part.strip() for part in text.split(","))
    if not all(names) or len(set(names)) != len(names):
        raise Invalid(f"{option} must be distinct, non-empty column names separated by commas, got {text!r}")
    return names


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


def register(app: typer.Typer) -> None:
    """Add ``data``, ``cluster`` and ``train`` to the root CLI."""
    app.add_typer(data_app, name="data")
    app.add_typer(cluster_app, name="cluster")
    app.command("train")(train)
