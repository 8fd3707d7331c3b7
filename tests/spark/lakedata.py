"""Builders for the Spark tests: the SAME generated predictions logged into the database (as the serving
flow's writer builds its batch rows, typed in a layout) and written as Parquet files exactly per
:mod:`predictions.lake.layout` (committed names, hive partitions by hour, several files per hour), with the
labels in both. A builder for tests, not a second production writer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.database import Database
from monitors.profile import Profile, build_reference_profile, profile_from_dict
from predictions import typed
from predictions.lake import layout
from predictions.pending import RequestRows, build
from predictions.service import new_prediction_ids, write_log_rows
from predictions.service.feedback import record_feedback
from registry.schema import Task, infer_schema

NUMERIC = ["x1", "x2"]
CATEGORICAL = ["c"]
FEATURES = NUMERIC + CATEGORICAL
CATEGORIES = ["a", "b", "c"]
CLASSES = ("low", "mid", "high")
LAYOUT = typed.make_layout(NUMERIC, CATEGORICAL, [CATEGORIES])


@dataclass
class Generated:
    """One task's predictions: features, outputs (a multi-class model's vectors), labels (NaN: none)."""

    task: Task
    columns: dict[str, np.ndarray]
    outputs: np.ndarray
    vectors: np.ndarray | None
    labels: np.ndarray


def generate(task: Task, n: int, *, seed: int, shift: float = 0.0) -> Generated:
    """``n`` rows: x1 normal (2 % missing), x2 a whole count, c one of three categories (3 % missing)."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(shift, 1.0, n)
    x1[rng.random(n) < 0.02] = np.nan
    x2 = rng.poisson(3 + shift, n).astype(np.int64)
    c = rng.choice(np.array(CATEGORIES, dtype=object), n, p=[0.5, 0.3, 0.2])
    c[rng.random(n) < 0.03] = None
    z = np.nan_to_num(x1) + 0.2 * x2
    vectors = None
    if task is Task.BINARY:
        outputs = 1 / (1 + np.exp(-(z - 0.6)))
        labels = (rng.random(n) < outputs).astype(np.float64)
    elif task is Task.REGRESSION:
        outputs = 2 * z + rng.normal(0, 0.1, n)
        labels = outputs + rng.normal(0, 0.5, n)
    else:
        logits = np.stack([z, -z, 0.3 * z + 0.5], axis=1)
        vectors = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        outputs = vectors.max(axis=1)
        labels = (vectors.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1).astype(np.float64)
    return Generated(task, {"x1": x1, "x2": x2, "c": c}, outputs, vectors, labels)


def reference_doc(task: Task, *, rows: int = 20_000, seed: int = 1) -> dict[str, Any]:
    """The reference profile (its JSON document) of ``rows`` generated rows of ``task``."""
    ref = generate(task, rows, seed=seed)
    cols: dict[str, Any] = dict(ref.columns, y=ref.labels)
    if task is Task.MULTICLASS:
        cols["y"] = np.array([CLASSES[int(k)] for k in ref.labels], dtype=object)
        schema = infer_schema(cols, target="y", task=task, classes=CLASSES)
        return build_reference_profile(ref.columns, schema, predictions=ref.vectors, labels=ref.labels)
    schema = infer_schema(cols, target="y", task=task)
    return build_reference_profile(ref.columns, schema, predictions=ref.outputs, labels=ref.labels)


def reference_profile(task: Task, *, rows: int = 20_000, seed: int = 1) -> Profile:
    """:func:`reference_doc` as a profile."""
    return profile_from_dict(reference_doc(task, rows=rows, seed=seed))


@dataclass
class Logged:
    """Where a builder put the rows: the prediction ids (oldest first), the first and last time."""

    ids: list[str]
    start: datetime
    end: datetime


def log_both(
    db: Database | None,
    lake: Path,
    data: Generated,
    *,
    model: str,
    start: datetime,
    per_request: int = 500,
    spacing: timedelta = timedelta(seconds=10),
    files_per_hour: int = 2,
    labelled_every: int = 7,
    version: int = 1,
) -> Logged:
    """Log ``data`` in requests of ``per_request`` predictions ``spacing`` apart from ``start``, into ``db``
    (None: the lake only) and into the lake; every ``labelled_every``-th prediction gets a label, some first
    a wrong one that a newer label replaces (the newest wins in both)."""
    n = len(data.outputs)
    ids = new_prediction_ids(n)
    times = np.array([start + spacing * (i // per_request) for i in range(0, n, per_request)], dtype=object)
    if db is not None:
        _log_database(db, data, ids, times, model=model, per_request=per_request, version=version)
    at = np.repeat(np.array([t.timestamp() * 1e6 for t in times], dtype=np.int64), per_request)[:n]
    _write_predictions(lake, data, ids, at, model=model, files_per_hour=files_per_hour, version=version)
    labelled = np.arange(0, n, labelled_every)
    wrong = labelled[::5]
    pairs_wrong = [(ids[i], float(_wrong(data, i))) for i in wrong]
    pairs = [(ids[i], float(data.labels[i])) for i in labelled]
    if db is not None:
        for lo in range(0, len(pairs_wrong), 20_000):
            with db.session() as s:
                record_feedback(session=s, model_name=model, labels=pairs_wrong[lo : lo + 20_000])
        for lo in range(0, len(pairs), 20_000):
            with db.session() as s:
                record_feedback(session=s, model_name=model, labels=pairs[lo : lo + 20_000])
    received = datetime.now(UTC)
    _write_labels(lake, model, pairs_wrong, received - timedelta(minutes=1))
    _write_labels(lake, model, pairs, received)
    return Logged(ids=ids, start=times[0], end=times[-1])


def _wrong(data: Generated, i: int) -> float:
    if data.task is Task.REGRESSION:
        return data.labels[i] + 100.0
    if data.task is Task.MULTICLASS:
        return (data.labels[i] + 1) % 3
    return 1.0 - data.labels[i]


def _log_database(
    db: Database,
    data: Generated,
    ids: list[str],
    times: np.ndarray,
    *,
    model: str,
    per_request: int,
    version: int,
) -> None:
    requests = []
    for k, lo in enumerate(range(0, len(ids), per_request)):
        hi = min(lo + per_request, len(ids))
        cols: dict[str, Sequence[Any]] = {
            "x1": [None if np.isnan(v) else float(v) for v in data.columns["x1"][lo:hi]],
            "x2": [int(v) for v in data.columns["x2"][lo:hi]],
            "c": list(data.columns["c"][lo:hi]),
        }
        requests.append(
            RequestRows(
                model_name=model,
                model_version=version,
                logged_at=times[k],
                request_id=f"req-{k}",
                protocol="v1",
                latency_ms=1.0,
                status="ok",
                ids=ids[lo:hi],
                inputs=[{}] * (hi - lo),
                values=[float(v) for v in data.outputs[lo:hi]],
                flags=[None] * (hi - lo),
                layout=LAYOUT,
                columns=cols,
                outputs=None if data.vectors is None else [list(map(float, v)) for v in data.vectors[lo:hi]],
            )
        )
        if len(requests) >= 200:
            _write(db, requests)
            requests = []
    _write(db, requests)


def _write(db: Database, requests: list[RequestRows]) -> None:
    batches = [b for built in build(requests) for b in built]
    if batches:
        write_log_rows(engine=db.engine, rows=batches, idempotent=False)


def prediction_table(data: Generated, ids: list[str], at: np.ndarray, *, version: int) -> pa.Table:
    """The rows as the layout's predictions table (``at``: logged_at in microseconds)."""
    n = len(ids)
    features = pa.StructArray.from_arrays(
        [
            pa.array(data.columns["x1"], pa.float64(), from_pandas=True),
            pa.array(data.columns["x2"], pa.int64()),
            pa.array(list(data.columns["c"]), pa.string()).dictionary_encode(),
        ],
        names=FEATURES,
    )
    vector = (
        pa.nulls(n, pa.list_(pa.float64()))
        if data.vectors is None
        else pa.array(list(data.vectors), pa.list_(pa.float64()))
    )
    return pa.table(
        {
            "prediction_id": pa.array(ids, pa.string()),
            "request_id": pa.nulls(n, pa.string()),
            "model_version": pa.array(np.full(n, version, np.int64)),
            "logged_at": pa.array(at, pa.timestamp("us", tz="UTC")),
            "latency_ms": pa.array(np.ones(n)),
            "status": pa.array(["ok"] * n, pa.string()),
            "protocol": pa.array(["v1"] * n, pa.string()),
            "source": pa.array(["serve"] * n, pa.string()),
            "output": pa.array(data.outputs, pa.float64()),
            "vector": vector,
            "flags": pa.nulls(n, pa.list_(pa.string())),
            "inputs": pa.nulls(n, pa.string()),
            layout.FEATURES: features,
        }
    )


def _commit(root: Path, relative: str, table: pa.Table, sequence: int) -> None:
    """Write ``table`` under a temporary name and commit it by a rename, as the layout says."""
    folder = root / relative
    folder.mkdir(parents=True, exist_ok=True)
    name = layout.file_name(sequence)
    temporary = folder / layout.temporary_name(name)
    pq.write_table(table, temporary)
    temporary.rename(folder / name)


def _write_predictions(
    lake: Path,
    data: Generated,
    ids: list[str],
    at: np.ndarray,
    *,
    model: str,
    files_per_hour: int,
    version: int,
) -> None:
    table = prediction_table(data, ids, at, version=version)
    hours = at // 3_600_000_000
    seq = 0
    for hour in np.unique(hours):
        rows = np.flatnonzero(hours == hour)
        when = datetime.fromtimestamp(int(hour) * 3600, UTC)
        for part in np.array_split(rows, files_per_hour):
            if part.size:
                seq += 1
                _commit(lake, layout.partition(layout.PREDICTIONS, model, when), table.take(part), seq)


def _write_labels(lake: Path, model: str, pairs: list[tuple[str, float]], received: datetime) -> None:
    if not pairs:
        return
    table = pa.table(
        {
            "prediction_id": pa.array([p for p, _ in pairs], pa.string()),
            "label": pa.array([y for _, y in pairs], pa.float64()),
            "received_at": pa.array([received] * len(pairs), pa.timestamp("us", tz="UTC")),
        }
    )
    _commit(
        lake,
        layout.partition(layout.LABELS, model, received),
        table,
        int(received.timestamp() * 1000) % 10**6,
    )
