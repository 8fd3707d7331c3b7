"""What a job works on: the snapshot of its row, its plan (the serving version's contract, task and
cluster) and its data folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.config import Settings
from core.database import aware
from core.errors import Conflict
from registry.models import ModelVersion, VersionState
from registry.schema import ModelSchema, Task
from registry.service import get_version, latest_version, read_schema, serving_version
from training.cluster.builders import lineage_ref, require_retrainable
from training.cluster.run_spec import Mode
from training.retraining.job.control import JobControl


@dataclass(frozen=True)
class Snapshot:
    """The job row's facts the flow needs (read once)."""

    id: int
    model_name: str
    trigger: str
    requested_by: str
    alert_id: int | None
    params: dict[str, Any]
    result_version: int | None
    created_at: datetime


@dataclass(frozen=True)
class Plan:
    """What the job trains from: the base version (serving, else the latest), its contract and settings."""

    model_name: str
    parent: int | None
    serving: int | None
    schema: ModelSchema
    base_lineage: dict[str, Any]
    mode: Mode
    ps: int
    workers: int
    epochs: float
    model_fn: str | None = None  # the parent's builder (its lineage's model_fn; None = the built-in MLP)

    @property
    def task(self) -> Task:
        return self.schema.kind


@dataclass(frozen=True)
class JobData:
    """The job's data files and the window they came from."""

    folder: Path
    train: Path
    holdout: Path
    window: dict[str, Any]


def job_folder(settings: Settings, job_id: int, created_at: datetime) -> Path:
    """``<checkpoint_path>/job-<id>-<created>/``: the job's training set, holdout and window.

    The job's creation time (UTC, to the microsecond) is part of the name: a job id alone is reused by
    another database (a fresh SQLite file, a PostgreSQL database set later, the test suite's) whose job of
    the same id would else take this folder's rows for its own as a takeover does, and train on them.
    """
    stamp = (aware(created_at) or created_at).astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return settings.checkpoint_path / f"job-{job_id}-{stamp}"


def is_staged(control: JobControl, plan: Plan, version: int) -> bool:
    with control.db.session() as session:
        row = get_version(session=session, model_name=plan.model_name, version=version)
        return row is not None and row.state is VersionState.STAGED


def make_plan(control: JobControl, snap: Snapshot) -> Plan:
    """The base version (serving, else latest), its contract, how to train (params > lineage > default)."""
    with control.db.session() as session:
        serving = serving_version(session=session, model_name=snap.model_name)
        base: ModelVersion | None = serving or latest_version(session=session, model_name=snap.model_name)
    if base is None:
        raise Conflict(f"model {snap.model_name!r} has no registered version to retrain")
    lineage = dict(base.lineage or {})
    require_retrainable(lineage, model_name=snap.model_name, version=base.version)
    schema = read_schema(path=Path(base.path))
    params = snap.params
    shape = lineage.get("cluster")
    cluster: dict[str, Any] = shape if isinstance(shape, dict) else {}
    if "mode" in params:
        mode = Mode(params["mode"])
    elif lineage.get("mode") in {m.value for m in Mode}:
        mode = Mode(lineage["mode"])
    else:
        mode = Mode.ASYNC
    inherited = "mode" not in params and lineage.get("mode") == mode.value
    ps = int(params.get("ps") or (inherited and cluster.get("ps")) or 1)
    workers = int(params.get("workers") or (inherited and cluster.get("worker")) or 2)
    epochs = float(params.get("epochs") or control.settings.retrain_epochs)
    return Plan(
        model_name=snap.model_name,
        parent=base.version,
        serving=serving.version if serving is not None else None,
        schema=schema,
        base_lineage=lineage,
        mode=mode,
        ps=ps,
        workers=workers,
        epochs=epochs,
        model_fn=lineage_ref(lineage),
    )


def existing_data(settings: Settings, snap: Snapshot) -> JobData | None:
    """The data an earlier attempt of the job wrote, when complete."""
    folder = job_folder(settings, snap.id, snap.created_at)
    data = JobData(folder, folder / "train.parquet", folder / "holdout.parquet", {})
    meta = folder / "window.json"
    if not (data.train.exists() and data.holdout.exists() and meta.exists()):
        return None
    return JobData(data.folder, data.train, data.holdout, json.loads(meta.read_text()))
