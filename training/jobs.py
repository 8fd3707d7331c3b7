"""A training job's description and its data preparation (no TensorFlow here)."""

from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import Invalid
from core.tabular import Columns, read_table
from registry.schema import ModelSchema, infer_schema
from training.datagen import TARGET
from training.features import Preprocessing, fit_preprocessing, raw_inputs


class Mode(enum.StrEnum):
    ASYNC = "async"  # parameter servers, each gradient applied on arrival
    SYNC = "sync"  # all workers contribute to each step (all-reduce)
    LOCAL = "local"  # one process, no cluster (development only)


@dataclass(frozen=True)
class TrainJob:
    """Everything that determines a training run; its ``key`` names the checkpoint folder."""

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

    @property
    def key(self) -> str:
        """Stable id of the run: same data file and same settings give the same key (so reruns resume)."""
        stat = self.data.stat()
        ident = {
            **{k: str(v) for k, v in asdict(self).items() if k not in {"extra", "parent_version"}},
            "data": str(self.data.resolve()),
            "size": stat.st_size,
            "mtime": int(stat.st_mtime),
        }
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

    @property
    def train_rows(self) -> int:
        return int(self.train_y.size)

    def planned_steps(self, job: TrainJob) -> int:
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


def prepare(job: TrainJob) -> PreparedData:
    """Read the data, check it, split off the held-out rows (seeded), infer the contract, fit preprocessing.

    Data that cannot train a model raises :class:`TrainingDataError` (an ``Invalid``: exit 2 in the CLI).
    """
    columns = read_table(job.data)
    if job.target not in columns:
        raise TrainingDataError(
            f"--data {job.data} has no target column {job.target!r} (columns: {', '.join(columns)}): "
            "name the 0/1 label column with --target"
        )
    if len(columns) < 2:
        raise TrainingDataError(f"--data {job.data} has no feature columns besides the target {job.target!r}")
    y_all = columns[job.target]
    n = len(y_all)
    if n < MIN_ROWS:
        raise TrainingDataError(
            f"--data {job.data} has {n} rows, too few to train and hold out 20 % (need at least {MIN_ROWS})"
        )
    check_labels(job.data, job.target, y_all)
    order = np.random.default_rng(job.seed).permutation(n)
    n_hold = max(1, int(round(n * job.holdout)))
    hold, train = order[:n_hold], order[n_hold:]
    train_cols = {k: v[train] for k, v in columns.items()}
    try:
        schema = infer_schema(train_cols, target=job.target)
        prep = fit_preprocessing(train_cols, schema)
    except ValueError as exc:  # a column the contract cannot describe (e.g. an id column of free text)
        raise TrainingDataError(f"--data {job.data}: {exc}") from None
    hold_cols = {k: v[hold] for k, v in columns.items()}
    return PreparedData(
        schema=schema,
        prep=prep,
        train_columns={k: v for k, v in train_cols.items() if k != job.target},
        train_y=train_cols[job.target].astype(np.float32),
        holdout_inputs=raw_inputs(hold_cols, schema),
        holdout_y=hold_cols[job.target].astype(np.int64),
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


def write_job(job: TrainJob, *, cluster: dict[str, list[str]], files: RunFiles) -> Path:
    """Persist the job and its cluster for the chief / worker processes."""
    files.root.mkdir(parents=True, exist_ok=True)
    doc = {**asdict(job), "data": str(job.data.resolve()), "mode": job.mode.value, "cluster": cluster}
    files.job.write_text(json.dumps(doc, indent=2))
    return files.job


def read_job(path: Path) -> tuple[TrainJob, dict[str, list[str]], RunFiles]:
    """The job, its cluster and its files, as written by :func:`write_job`."""
    doc = json.loads(path.read_text())
    cluster = doc.pop("cluster")
    job = TrainJob(**{**doc, "data": Path(doc["data"]), "mode": Mode(doc["mode"])})
    return job, cluster, RunFiles(path.parent)


def save_weights(weights: list[tuple[np.ndarray, np.ndarray]], path: Path) -> None:
    """Final Dense weights as ``k0, b0, k1, b1, ...`` (written atomically)."""
    arrays = {}
    for i, (k, b) in enumerate(weights):
        arrays[f"k{i}"], arrays[f"b{i}"] = k, b
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)  # type: ignore[arg-type]
    tmp.replace(path)


def load_weights(path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """Inverse of :func:`save_weights`."""
    with np.load(path) as z:
        n = len(z.files) // 2
        return [(z[f"k{i}"], z[f"b{i}"]) for i in range(n)]
