"""Training: prepare -> probe the builder -> train (async | sync | local) -> calibrate (binary) -> evaluate
-> profile -> publish."""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.config import Settings, get_settings
from core.database import Database
from monitors.performance import metrics_for
from monitors.profile import build_reference_profile, reference_sample
from registry.models import ModelVersion
from registry.schema import Task
from registry.service import latest_version
from training.cluster.builders import output_width, probe
from training.cluster.calibration import fit_platt, logits_of
from training.cluster.embedding import check_mode
from training.cluster.launcher import Weights, train_on_cluster
from training.cluster.nodes import ClusterSpec
from training.cluster.progress import Progress
from training.cluster.run_spec import Mode, PreparedData, RunFiles, TrainingRunSpec, prepare
from training.cluster.sharding import check_shards

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from training.cluster.export import ServingModule

log = logging.getLogger("driftwarden.training")


@dataclass
class TrainResult:
    version: ModelVersion
    metrics: dict[str, float]
    seconds: float


def run_training(
    *,
    job: TrainingRunSpec,
    db: Database,
    registry: Path,
    checkpoint_root: Path,
    progress: Progress,
    cluster: ClusterSpec | None = None,
    prepared: PreparedData | None = None,
    lineage: Mapping[str, Any] | None = None,
    settings: Settings | None = None,
) -> TrainResult:
    """Train ``job`` on its cluster, calibrate its probabilities (binary: Platt scaling) and evaluate on
    the held-out split, and register a new staged version.

    The job's builder (``job.model_fn``) is loaded and probed first: a broken one raises
    :class:`training.cluster.builders.ModelFnError` (one line) before any cluster process starts.

    ``prepared``: the job's data as :func:`training.cluster.run_spec.prepare` returned it (read here when not
    given).
    ``lineage``: more facts for the version's lineage (a retraining job adds its id, trigger and window).
    ``settings``: the cluster settings (default: the process's).
    """
    from training.cluster.export import ServingModule, predict, publish

    t0 = time.monotonic()
    data = prepared or prepare(job)
    progress.event(
        "data %s: %d training rows, %d held out, %d features (%d encoded columns)",
        job.data,
        data.train_rows,
        data.holdout_y.size,
        len(data.schema.features),
        data.prep.width,
    )
    task = data.schema.kind
    model_fn = probe(
        job.model_fn,
        input_dim=data.prep.width,
        outputs=output_width(task, len(data.schema.classes)),
        task=task,
    )
    check_mode(job.mode.value, [e.name for e in data.prep.embedded])
    if job.mode is Mode.ASYNC:  # a shard above the configured limit ends here, before any process starts
        check_shards(
            prep=data.prep, ps=len(cluster.ps) if cluster else job.ps, settings=settings or get_settings()
        )
    files = RunFiles(checkpoint_root / job.key)
    weights, cluster_shape = _train(job, data, files, progress, settings=settings, cluster=cluster)
    module = ServingModule(weights, data.prep, data.schema, model_fn=job.model_fn)
    calibration = _calibrate(module, data)
    outputs = predict(module, data.holdout_inputs)
    metrics = evaluate(task, y_true=data.holdout_y, predictions=outputs, classes=data.schema.classes)
    profile = _profile(data, outputs)
    seconds = time.monotonic() - t0
    with db.session() as session:
        parent = _parent_version(session, job)
        facts = {
            **_lineage(job, data, cluster_shape=cluster_shape, seconds=seconds, parent=parent),
            "model_fn": model_fn,
            **calibration,
            **(lineage or {}),
        }
        version = publish(
            session=session,
            registry=registry,
            model_name=job.model_name,
            module=module,
            schema=data.schema,
            documents={"profile": profile, "preprocessing": data.prep.to_dict()},
            metrics=metrics,
            lineage=facts,
            parent_version=parent,
        )
    # the run is complete: a rerun trains a new version; node logs, pids and progress stay for operators
    shutil.rmtree(files.checkpoints, ignore_errors=True)
    files.weights.unlink(missing_ok=True)
    return TrainResult(version=version, metrics=metrics, seconds=seconds)


def _train(
    job: TrainingRunSpec,
    data: PreparedData,
    files: RunFiles,
    progress: Progress,
    *,
    settings: Settings | None,
    cluster: ClusterSpec | None,
) -> tuple[Weights, dict[str, int]]:
    """Train in this process (local mode) or on the job's cluster; the weights and the cluster's shape."""
    if job.mode is Mode.LOCAL:
        from training.cluster.trainers import local

        return local.train(job, data, progress), {"chief": 1}
    return train_on_cluster(
        job=job, files=files, progress=progress, settings=settings or get_settings(), external=cluster
    )


def _calibrate(module: ServingModule, data: PreparedData) -> dict[str, Any]:
    """Binary: Platt scaling fitted on the held-out split and set on ``module``; its lineage entry."""
    from training.cluster.export import predict

    if data.schema.kind is not Task.BINARY:
        return {}
    raw = predict(module, data.holdout_inputs)
    scale, shift = fit_platt(logits_of(raw), data.holdout_y)
    module.calibrate(scale=scale, shift=shift)
    return {"calibration": {"method": "platt", "scale": round(scale, 6), "shift": round(shift, 6)}}


def _profile(data: PreparedData, outputs: np.ndarray) -> dict[str, Any]:
    """The version's reference profile."""
    # the features are profiled on the training rows, the answers on the held-out rows: the row sample is
    # of the held-out rows, whose features, answers and labels belong together
    held_out = reference_sample(
        data.holdout_columns or data.holdout_inputs, data.schema, predictions=outputs, labels=data.holdout_y
    )
    return build_reference_profile(
        data.train_columns, data.schema, predictions=outputs, labels=data.holdout_y, sample=held_out
    )


def _parent_version(session: Session, job: TrainingRunSpec) -> int | None:
    """The version a run follows: the job's own, else the model's latest (None before its first)."""
    if job.parent_version is not None:
        return job.parent_version
    latest = latest_version(session=session, model_name=job.model_name)
    return latest.version if latest else None


def _lineage(
    job: TrainingRunSpec,
    data: PreparedData,
    *,
    cluster_shape: Mapping[str, int],
    seconds: float,
    parent: int | None,
) -> dict[str, Any]:
    """The run's facts for the version's lineage (the builder, calibration and the caller's are added)."""
    return {
        "data_source": str(job.data.resolve()),
        "train_rows": data.train_rows,
        "holdout_rows": int(data.holdout_y.size),
        "mode": job.mode.value,
        "cluster": cluster_shape,
        "epochs": job.epochs,
        "batch_size": job.batch_size,
        "learning_rate": job.learning_rate,
        "steps": data.planned_steps(job),
        "seed": job.seed,
        "duration_s": round(seconds, 3),
        "parent_version": parent,
        "job_key": job.key,
        "task": data.schema.kind.short,
        "features": list(data.schema.feature_names),
        **({"excluded": list(job.exclude)} if job.exclude else {}),
    }


def evaluate(
    task: Task, *, y_true: np.ndarray, predictions: np.ndarray, classes: Sequence[str] = ()
) -> dict[str, Any]:
    """The held-out metrics of the task (``monitors.performance.metrics_for``: per-class ones named by
    ``classes``), ``rows`` as an int, an undefined one (precision of a model that predicts no positive, R²
    of a constant target: NaN) as None: the version's metrics are JSON, and PostgreSQL's refuses NaN."""
    found = metrics_for(task, y_true=y_true, predictions=predictions, classes=classes)
    metrics: dict[str, Any] = {k: v if math.isfinite(v) else None for k, v in found.items()}
    metrics["rows"] = int(found["rows"])
    return metrics


SUMMARY_METRICS = {
    Task.BINARY: (("accuracy", "held-out accuracy"), ("roc_auc", "ROC AUC")),
    Task.MULTICLASS: (("accuracy", "held-out accuracy"), ("macro_f1", "macro F1"), ("log_loss", "log loss")),
    Task.REGRESSION: (("mae", "held-out MAE"), ("rmse", "RMSE"), ("r2", "R²")),
}


def metrics_line(task: Task, metrics: Mapping[str, Any]) -> str:
    """The task's headline metrics in one phrase, e.g. ``held-out accuracy 0.9012, ROC AUC 0.9433``."""
    parts = []
    for key, label in SUMMARY_METRICS[task]:
        value = metrics.get(key)
        if isinstance(value, int | float):
            parts.append(f"{label} {float(value):.4f}")
    return ", ".join(parts)
