"""Predictions logged through the production write path (the serving writer with ``lake_mode=also``: the
database and the lake sink) and labels stored as the feedback route stores them, for the end-to-end tests
of the lake (the sink's files read by the Spark reader)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from core.database import Database
from predictions.lake.files import open_lake
from predictions.lake.labels import store_lake_labels
from predictions.lake.sink import LakeSink
from predictions.pending import RequestRows
from predictions.service import new_prediction_ids, store_feedback
from predictions.spool import Spool
from predictions.writer import LogWriter
from registry.schema import Task
from tests.spark.lakedata import LAYOUT, Generated, generate

UNSEEN = "zz"  # a category the reference never saw


@dataclass
class Served:
    """What went through the write path: the ids (oldest first), the first and last time, the labelled."""

    ids: list[str]
    start: datetime
    end: datetime
    labelled: int


def documents(data: Generated, lo: int, hi: int) -> list[dict[str, Any]]:
    """Rows ``lo:hi`` as the request documents a client sends: x1 absent where NaN (or null every 13th),
    x2 whole, c absent where none and an unseen category every 17th row."""
    out: list[dict[str, Any]] = []
    for i in range(lo, hi):
        doc: dict[str, Any] = {"x2": int(data.columns["x2"][i])}
        x1 = float(data.columns["x1"][i])
        if i % 13 == 5:
            doc["x1"] = None
        elif not np.isnan(x1):
            doc["x1"] = x1
        c = data.columns["c"][i]
        if i % 17 == 3:
            doc["c"] = UNSEEN
        elif c is not None:
            doc["c"] = str(c)
        out.append(doc)
    return out


def serve_both(
    db: Database,
    lake: str,
    spool: Path,
    task: Task,
    *,
    rows: int,
    start: datetime,
    per_request: int = 5,
    spacing: timedelta = timedelta(seconds=1),
    labelled_every: int = 7,
    model: str | None = None,
) -> Served:
    """Log ``rows`` generated predictions of ``task`` through the serving writer into ``db`` and the lake
    sink of ``lake`` (``model``: the model's name, by default the task's); every ``labelled_every``-th gets
    a wrong label, then the right one, each stored in the database and the lake as the feedback route
    stores them."""
    model = model or task.name.lower()
    data = generate(task, rows, seed=11, shift=0.2)
    target = open_lake(lake)
    sink = LakeSink(target=target, wal=Spool.claim(spool / "lake"), roll_bytes=256 << 10, roll_s=3600)
    writer = LogWriter(engine=db.engine, spool=Spool.claim(spool / "db"), durability="fast", lake=sink)
    writer.start()
    ids = new_prediction_ids(rows)
    times: list[datetime] = []
    for k, lo in enumerate(range(0, rows, per_request)):
        hi = min(lo + per_request, rows)
        times.append(start + spacing * k)
        vectors: list[list[float | None]] | None = (
            None if data.vectors is None else [[float(p) for p in v] for v in data.vectors[lo:hi]]
        )
        request = RequestRows(
            model_name=model,
            model_version=1,
            logged_at=times[-1],
            request_id=f"req-{k}",
            protocol="v1",
            latency_ms=1.5,
            status="ok",
            ids=ids[lo:hi],
            inputs=documents(data, lo, hi),
            values=[float(v) for v in data.outputs[lo:hi]],
            flags=[None] * (hi - lo),
            layout=LAYOUT,
            outputs=vectors,
        )
        while not writer.offer(request):
            assert writer.flush(30.0), "the writer did not keep up"
    assert writer.flush(60.0), "the writer did not write its rows"
    labelled = list(range(0, rows, labelled_every))
    wrong = [(ids[i], _wrong(task, float(data.labels[i]))) for i in labelled[::5]]
    right = [(ids[i], float(data.labels[i])) for i in labelled]
    for pairs in (wrong, right):
        with db.session() as session:
            stored = store_feedback(session=session, model_name=model, labels=pairs)
        assert not stored.unknown
        store_lake_labels(sink=sink, model_name=model, labels=pairs)
    writer.close()  # the sink commits what its spool holds
    assert sink.wal.pending_rows == 0
    return Served(ids=ids, start=times[0], end=times[-1], labelled=len(labelled))


def _wrong(task: Task, label: float) -> float:
    if task is Task.MULTICLASS:
        return (label + 1) % 3
    return 1.0 - label
