"""A training run's spec (:class:`TrainingRunSpec`) and its data preparation (no TensorFlow here)."""

from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.config import get_settings
from core.errors import Invalid
from core.tabular import Columns, read_table
from registry.inputs import raw_inputs
from registry.schema import FeatureKind, ModelSchema, Task, check_classes, infer_schema, label_codes
from training.cluster.builders import file_sha256
from training.cluster.datagen import TARGET
from training.cluster.embedding import check_named, parse_embed
from training.cluster.features import Preprocessing, fit_preprocessing


class Mode(enum.StrEnum):
    ASYNC = "async"  # parameter servers, each gradient applied on arrival
    SYNC = "sync"  # all workers contribute to each step (all-reduce)
    LOCAL = "local"  # one process, no cluster (development only)


@dataclass(frozen=True)
class TrainingRunSpec:
    """A training run's spec: everything that determines the run; its ``key`` names the checkpoint folder.
    (A queued retraining job is :class:`training.retraining.models.TrainingJob`.)"""

    model_name: str
    data: Path
    mode: Mode = Mode.ASYNC
    ps: int = 1
    workers: int = 2
    epochs: float = 3.0
    batch_size: int = 64
    learning_rate: float = 0.003
    holdout: float = 0.2
    seed: int = 0
    target: str = TARGET
    steps_per_closure: int = 10
    checkpoint_every: int = 50
    parent_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    task: str = "binary"  # binary | multiclass | regression (Task.parse)
    model_fn: str | None = None  # the builder: FILE.py:FUNC or package.module:FUNC; None = the built-in MLP
    classes: tuple[str, ...] = ()  # multi-class: the class names in output order (default: sorted labels)
    features: tuple[str, ...] = ()  # only these columns are features, in this order (default: all but target)
    exclude: tuple[str, ...] = ()  # these columns are not features (with ``features``: not both)
    embed: tuple[
        str, ...
    ] = ()  # --embed FEATURE[:DIM] values: hashed into embeddings (training.cluster.embedding)

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", Task.parse(self.task).short)
        object.__setattr__(self, "classes", tuple(self.classes))
        object.__setattr__(self, "features", tuple(self.features))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "embed", tuple(self.embed))

    @property
    def kind(self) -> Task:
        """The task as an enum."""
        return Task.parse(self.task)

    @property
    def key(self) -> str:
        """Stable id of the run: same data file and same settings give the same key (so reruns resume);
        another task, builder or builder file is another run."""
        stat = self.data.stat()
        skip = {"extra", "parent_version", "task", "model_fn", "classes", "features", "exclude", "embed"}
        ident = {
            **{k: str(v) for k, v in asdict(self).items() if k not in skip},
            "data": str(self.data.resolve()),
            "size": stat.st_size,
            "mtime": int(stat.st_mtime),
        }
        # the built-in binary run keeps the key it had before tasks and builders existed
        if self.kind is not Task.BINARY:
            ident["task"] = self.task
        if self.classes:
            ident["classes"] = list(self.classes)
        if self.features:
            ident["features"] = list(self.features)
        if self.exclude:
            ident["exclude"] = list(self.exclude)
        if self.embed:
            ident["embed"] = list(self.embed)
        if self.model_fn is not None:
            ident["model_fn"] = self.model_fn
            ident["model_fn_sha256"] = file_sha256(self.model_fn) or ""
        digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.model_name}-{self.mode.value}-{digest}"


@dataclass
class PreparedData:
    """The split, the contract, the fitted preprocessing and the raw training columns."""

    schema: ModelSchema
    prep: Preprocessing
    train_columns: Columns
    train_y: np.ndarray
    holdout_inputs: dict[str, np.ndarray]
    holdout_y: np.ndarray
    holdout_columns: Columns = field(default_factory=dict)  # the held-out rows' raw feature columns

    @property
    def train_rows(self) -> int:
        return int(self.train_y.size)

    def planned_steps(self, job: TrainingRunSpec) -> int:
        """Total optimizer steps: epochs x rows / batch, rounded up to whole closures."""
        steps = max(1, math.ceil(job.epochs * self.train_rows / job.batch_size))
        per = job.steps_per_closure if job.mode is Mode.ASYNC else 1
        return math.ceil(steps / per) * per


class TrainingDataError(Invalid, ValueError):
    """Data that cannot train a model; the message names the file, what is wrong and how to fix it."""


MIN_ROWS = 50


def check_labels(path: Path, target: str, y: np.ndarray) -> None:
    """The target must hold 0/1 labels, none missing, both classes present."""
    where = f"--data {path}: target column {target!r}"
    if y.dtype.kind == "O":
        missing = np.array([v is None for v in y])
        present = sorted({str(v) for v in y[~missing]})
        if missing.any():
            raise TrainingDataError(
                f"{where} has {int(missing.sum())} missing label(s): fill or drop those rows"
            )
        shown = ", ".join(repr(v) for v in present[:5]) + (", ..." if len(present) > 5 else "")
        raise TrainingDataError(
            f"{where} holds text ({shown}), not 0/1 labels: recode it to 0 and 1 (1 = the positive class, "
            "e.g. yes -> 1, no -> 0)"
        )
    if y.dtype.kind == "f" and np.isnan(y).any():
        raise TrainingDataError(
            f"{where} has {int(np.isnan(y).sum())} missing label(s): fill or drop those rows"
        )
    values = sorted({float(v) for v in np.unique(y)})
    if not set(values) <= {0.0, 1.0}:
        shown = ", ".join(f"{v:g}" for v in values[:5]) + (", ..." if len(values) > 5 else "")
        raise TrainingDataError(
            f"{where} must hold 0/1 labels (binary classification), found {shown}: recode it to 0 and 1"
        )
    if len(values) < 2:
        raise TrainingDataError(
            f"{where} holds only the label {values[0]:g}: the data needs rows of both classes, 0 and 1"
        )


def check_task_labels(path: Path, target: str, y: np.ndarray, task: Task) -> None:
    """The target holds the task's labels, none missing: 0/1 (binary), classes (multi-class), numbers."""
    where = f"--data {path}: target column {target!r}"
    if task is Task.BINARY:
        check_labels(path, target, y)
        return
    if y.dtype.kind == "O":
        missing = np.array([v is None or (isinstance(v, float) and v != v) or v == "" for v in y])
    else:
        missing = np.isnan(y.astype(np.float64)) if y.dtype.kind == "f" else np.zeros(len(y), bool)
    if missing.any():
        raise TrainingDataError(f"{where} has {int(missing.sum())} missing label(s): fill or drop those rows")
    if task is Task.REGRESSION and y.dtype.kind not in "iuf":
        raise TrainingDataError(f"{where} holds text: a regression (--task regression) needs numbers")


def select_features(job: TrainingRunSpec, columns: Columns) -> Columns:
    """The target and the feature columns ``job.features`` (in that order) or all but ``job.exclude``
    (default: every column); a name that is not a column, or names the target, is a TrainingDataError."""
    if job.features and job.exclude:
        raise TrainingDataError("--features and --exclude choose the features two ways: give one of them")
    for option, names in (("--features", job.features), ("--exclude", job.exclude)):
        unknown = [name for name in names if name not in columns]
        if unknown:
            raise TrainingDataError(
                f"{option} names {', '.join(map(repr, unknown))}: not a column of --data {job.data} "
                f"(its columns: {', '.join(columns)})"
            )
        if job.target in names:
            raise TrainingDataError(
                f"{option} names the target {job.target!r}: it is the label, never a feature; leave it out"
            )
    if job.features:
        return {**{name: columns[name] for name in job.features}, job.target: columns[job.target]}
    return {name: values for name, values in columns.items() if name not in job.exclude}


def prepare(job: TrainingRunSpec) -> PreparedData:
    """Read the data, check it, split off the held-out rows (seeded), infer the contract, fit preprocessing.

    Data that cannot train a model raises :class:`TrainingDataError` (an ``Invalid``: exit 2 in the CLI).
    The features are the columns :func:`select_features` keeps.
    Targets: binary 0/1; multi-class: class indexes into the classes (``job.classes``, else the sorted
    labels); regression: the numbers.
    """
    task = job.kind
    columns = read_table(job.data)
    if job.target not in columns:
        what = {Task.BINARY: "0/1 label", Task.MULTICLASS: "class label", Task.REGRESSION: "numeric target"}
        raise TrainingDataError(
            f"--data {job.data} has no target column {job.target!r} (columns: {', '.join(columns)}): "
            f"name the {what[task]} column with --target"
        )
    columns = select_features(job, columns)
    if len(columns) < 2:
        raise TrainingDataError(f"--data {job.data} has no feature columns besides the target {job.target!r}")
    y_all = columns[job.target]
    n = len(y_all)
    if n < MIN_ROWS:
        raise TrainingDataError(
            f"--data {job.data} has {n} rows, too few to train and hold out 20 % (need at least {MIN_ROWS})"
        )
    check_task_labels(job.data, job.target, y_all, task)
    classes: tuple[str, ...] = ()
    if task is Task.MULTICLASS:
        try:  # from all rows: a class seen in the held-out rows only is still a class of the model
            classes = check_classes(y_all, target=job.target, classes=job.classes)
        except ValueError as exc:
            raise TrainingDataError(f"--data {job.data}: {exc}") from None
    order = np.random.default_rng(job.seed).permutation(n)
    n_hold = max(1, int(round(n * job.holdout)))
    hold, train = order[:n_hold], order[n_hold:]
    train_cols = {k: v[train] for k, v in columns.items()}
    settings = get_settings()
    embed = parse_embed(job.embed)
    try:
        schema = infer_schema(
            train_cols,
            target=job.target,
            task=task,
            classes=classes,
            range_chance=settings.range_chance,
            wide=frozenset(embed),
            wide_above=settings.embed_min_levels,
        )
        check_named(
            embed,
            [f.name for f in schema.features if f.kind is FeatureKind.CATEGORICAL],
            [f.name for f in schema.features if f.kind is not FeatureKind.CATEGORICAL],
        )
        prep = fit_preprocessing(
            train_cols,
            schema,
            embed=embed,
            embed_dim=settings.embed_dim,
            embed_buckets=settings.embed_buckets,
        )
    except ValueError as exc:  # a column the contract cannot describe (e.g. an id column of free text)
        raise TrainingDataError(f"--data {job.data}: {exc}") from None
    hold_cols = {k: v[hold] for k, v in columns.items()}
    train_y, holdout_y = train_cols[job.target], hold_cols[job.target]
    if task is Task.MULTICLASS:
        train_y, holdout_y = label_codes(train_y, classes), label_codes(holdout_y, classes).astype(np.int64)
    elif task is Task.REGRESSION:
        holdout_y = holdout_y.astype(np.float64)
    else:
        holdout_y = holdout_y.astype(np.int64)
    return PreparedData(
        schema=schema,
        prep=prep,
        train_columns={k: v for k, v in train_cols.items() if k != job.target},
        train_y=train_y.astype(np.float32),
        holdout_inputs=raw_inputs(hold_cols, schema),
        holdout_y=holdout_y,
        holdout_columns={k: v for k, v in hold_cols.items() if k != job.target},
    )


@dataclass(frozen=True)
class RunFiles:
    """Where one run keeps its job, checkpoints, progress, node logs and final weights."""

    root: Path

    @property
    def job(self) -> Path:
        return self.root / "job.json"

    @property
    def checkpoints(self) -> Path:
        return self.root / "ckpt"

    @property
    def progress(self) -> Path:
        return self.root / "progress.jsonl"

    @property
    def weights(self) -> Path:
        return self.root / "weights.npz"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes"


def write_job(job: TrainingRunSpec, *, cluster: dict[str, list[str]], files: RunFiles) -> Path:
    """Persist the job and its cluster for the chief / worker processes."""
    files.root.mkdir(parents=True, exist_ok=True)
    doc = {**asdict(job), "data": str(job.data.resolve()), "mode": job.mode.value, "cluster": cluster}
    files.job.write_text(json.dumps(doc, indent=2))
    return files.job


def read_job(path: Path) -> tuple[TrainingRunSpec, dict[str, list[str]], RunFiles]:
    """The job, its cluster and its files, as written by :func:`write_job`."""
    doc = json.loads(path.read_text())
    cluster = doc.pop("cluster")
    doc["classes"] = tuple(doc.get("classes") or ())
    job = TrainingRunSpec(**{**doc, "data": Path(doc["data"]), "mode": Mode(doc["mode"])})
    return job, cluster, RunFiles(path.parent)


def save_weights(weights: list[np.ndarray], path: Path) -> None:
    """The model's final weights, in ``net.weights`` order, as ``w0, w1, ...`` (written atomically)."""
    arrays = {f"w{i}": np.asarray(w) for i, w in enumerate(weights)}
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)  # type: ignore[arg-type]
    tmp.replace(path)


def load_weights(path: Path) -> list[np.ndarray]:
    """Inverse of :func:`save_weights`."""
    with np.load(path) as z:
        return [z[f"w{i}"] for i in range(len(z.files))]
