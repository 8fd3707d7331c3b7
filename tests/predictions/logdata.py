"""Writing the prediction log for tests that read windows back (no server, no TensorFlow): requests of one
or more predictions, built into batch rows as the serving flow's writer builds them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine

from core.tabular import Columns
from predictions import typed
from predictions.batch import LogBatch
from predictions.pending import RequestRows, build
from predictions.service import (
    new_prediction_ids,
    write_log_rows,
)
from predictions.typed import Layout


def plain(value: Any) -> Any:
    """A JSON value as the server logs it (numpy scalars unwrapped, NaN -> null)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_requests(
    engine: Engine,
    docs: Sequence[dict[str, Any]],
    *,
    model: str = "credit",
    version: int = 1,
    probability: Sequence[float] | np.ndarray | None = None,
    start: datetime | None = None,
    spacing: timedelta = timedelta(milliseconds=1),
    status: str = "ok",
    layout: Layout | None = None,
    per_request: int = 1,
    vectors: Sequence[list[float | None]] | None = None,
) -> list[LogBatch]:
    """Log ``docs`` (oldest first) as requests of ``per_request`` predictions, ``spacing`` apart, typed in
    ``layout`` where they can be (as the serving flow writes them; without a layout: their documents only);
    returns the batch rows written, in order."""
    n = len(docs)
    p = np.full(n, 0.5) if probability is None else np.asarray(probability, dtype=np.float64)
    first = start if start is not None else datetime.now(UTC) - spacing * max(1, -(-n // per_request))
    requests: list[RequestRows] = []
    for k, lo in enumerate(range(0, n, per_request)):
        hi = min(lo + per_request, n)
        values = [None if math.isnan(v) else float(v) for v in p[lo:hi]]
        requests.append(
            RequestRows(
                model_name=model,
                model_version=version,
                logged_at=first + spacing * k,
                request_id=f"req-{k}",
                protocol="v1",
                latency_ms=1.0,
                status=status,
                ids=new_prediction_ids(hi - lo),
                inputs=list(docs[lo:hi]),
                values=values,
                flags=[None] * (hi - lo),
                layout=layout,
                outputs=None if vectors is None else list(vectors[lo:hi]),
            )
        )
    batches = [b for built in build(requests) for b in built]
    for lo in range(0, len(batches), 2000):
        write_log_rows(engine=engine, rows=batches[lo : lo + 2000], idempotent=False)
    return batches


def log_columns(
    engine: Engine,
    cols: Columns,
    *,
    features: list[str],
    model: str = "credit",
    version: int = 1,
    probability: np.ndarray | None = None,
    when: datetime | None = None,
    spacing: timedelta = timedelta(milliseconds=1),
    status: str = "ok",
    layout: Layout | None = None,
    per_request: int = 1,
) -> list[str]:
    """Log one prediction per row of ``cols`` (oldest first), in requests of ``per_request``; returns their
    prediction ids. ``layout``: with the typed copy of the inputs, as the serving flow writes it; without:
    the documents only."""
    n = len(cols[features[0]])
    docs = [{f: plain(cols[f][i]) for f in features} for i in range(n)]
    requests = max(1, -(-n // per_request))
    start = (when or datetime.now(UTC)) - spacing * requests
    batches = write_requests(
        engine,
        docs,
        model=model,
        version=version,
        probability=probability,
        start=start,
        spacing=spacing,
        status=status,
        layout=layout,
        per_request=per_request,
    )
    return [pid for b in batches for pid in b.ids()]


def log_inputs(
    engine: Engine,
    inputs: list[dict[str, Any]],
    *,
    layout: Layout | None = None,
    model: str = "credit",
    version: int = 1,
    probability: np.ndarray | None = None,
    per_request: int = 1,
) -> list[str]:
    """Log one prediction per input document (oldest first, requests 1 ms apart), typed in ``layout`` where
    it can be (as the serving flow writes them); returns their prediction ids."""
    batches = write_requests(
        engine,
        inputs,
        layout=layout,
        model=model,
        version=version,
        probability=probability,
        per_request=per_request,
    )
    return [pid for b in batches for pid in b.ids()]


def write_rows_as_they_were(engine: Engine, rows: Sequence[dict[str, Any]]) -> None:
    """Insert old-layout rows (one per prediction: ``prediction_id``, ``request_id``, ``model_name``, ...,
    ``numbers`` as hex) into whatever columns ``prediction_log`` has at the database's revision (a database
    migrated to a revision before the batch layout: its rows as a server of that revision wrote them)."""
    from sqlalchemy import MetaData, Table

    table = Table("prediction_log", MetaData(), autoload_with=engine)
    names = set(table.c.keys())
    values = []
    for row in rows:
        doc = {k: v for k, v in row.items() if k in names}
        if isinstance(doc.get("numbers"), str):
            doc["numbers"] = bytes.fromhex(doc["numbers"])
        values.append(doc)
    with engine.begin() as conn:
        conn.execute(table.insert(), values)


FLAG = ["x:observed_range"]


def make_rows(
    n: int,
    *,
    start: int = 0,
    when: datetime | None = None,
    model: str = "m",
    version: int = 1,
    status: str = "ok",
    per_request: int = 1,
    spacing: timedelta = timedelta(0),
    layout: typed.Layout | None = None,
) -> list[LogBatch]:
    """``n`` predictions of ``model`` as the writer's batch rows: requests of ``per_request`` predictions
    (request ``k`` logged at ``when + k * spacing``, its id ``req-<start + its first prediction>``), built as
    the writer thread builds them. Prediction ``i`` of the call has the inputs ``{"x": start + i, "c": "a"}``,
    the output ``(start + i) % 10 / 10`` and a flag when ``i`` is odd; documents only without ``layout``."""
    now = when or datetime.now(UTC)
    requests = []
    for k, lo in enumerate(range(0, n, per_request)):
        hi = min(lo + per_request, n)
        requests.append(
            RequestRows(
                model_name=model,
                model_version=version,
                logged_at=now + spacing * k,
                request_id=f"req-{start + lo}",
                protocol="v1",
                latency_ms=1.5,
                status=status,
                ids=new_prediction_ids(hi - lo),
                inputs=[{"x": float(start + i), "c": "a"} for i in range(lo, hi)],
                values=[(start + i) % 10 / 10 for i in range(lo, hi)],
                flags=[FLAG if i % 2 else None for i in range(lo, hi)],
                layout=layout,
            )
        )
    return [b for built in build(requests) for b in built]


def ids(rows: Sequence[LogBatch]) -> list[str]:
    """The prediction ids of ``rows``, in log order."""
    return [pid for b in rows for pid in b.ids()]


def old_rows(
    n: int,
    *,
    start: int = 0,
    when: datetime | None = None,
    model: str = "m",
    per_request: int = 1,
    spacing: timedelta = timedelta(0),
    **changes: Any,
) -> list[dict[str, Any]]:
    """``n`` predictions as an older version logged them: one ``prediction_log`` row each (the dicts
    ``tests.predictions.logdata.write_rows_as_they_were`` inserts), requests of ``per_request`` consecutive
    rows sharing a request id, a time and ids counted from one prefix; the values of :func:`make_rows`
    (``changes`` override columns of every row)."""
    now = when or datetime.now(UTC)
    out: list[dict[str, Any]] = []
    for k, lo in enumerate(range(0, n, per_request)):
        hi = min(lo + per_request, n)
        for i, pid in zip(range(lo, hi), new_prediction_ids(hi - lo), strict=True):
            out.append(
                {
                    "prediction_id": pid,
                    "request_id": f"req-{start + lo}",
                    "model_name": model,
                    "model_version": 1,
                    "logged_at": now + spacing * k,
                    "inputs": {"x": float(start + i), "c": "a"},
                    "probability": (start + i) % 10 / 10,
                    "flags": FLAG if i % 2 else None,
                    "latency_ms": 1.5,
                    "status": "ok",
                    "protocol": "v1",
                    **changes,
                }
            )
    return out


def old_line(row: dict[str, Any]) -> list[Any]:
    """A spool or dead-letter row as an older version wrote it (one prediction): ``[prediction_id,
    request_id, model_name, model_version, logged_at, inputs, probability, flags, latency_ms, status,
    protocol, layout, numbers, categories, outputs]``."""
    return [
        row["prediction_id"],
        row["request_id"],
        row["model_name"],
        row["model_version"],
        row["logged_at"].isoformat(),
        row["inputs"],
        row["probability"],
        row["flags"],
        row["latency_ms"],
        row["status"],
        row["protocol"],
        row.get("layout"),
        row.get("numbers"),
        row.get("categories"),
        row.get("outputs"),
    ]


NUMERIC = ["amount", "count"]


CATEGORICAL = ["colour"]


FEATURES = NUMERIC + CATEGORICAL


# "blue" is not a category of the layout: its texts are stored beside the typed copy
LAYOUT = typed.make_layout(NUMERIC, CATEGORICAL, [["red", "green"]])


def make_columns(n: int, *, seed: int) -> Columns:
    """Two numeric features (one with missing values) and one categorical (with missing values)."""
    rng = np.random.default_rng(seed)
    amount = np.round(rng.lognormal(5, 1, n), 2)
    amount[rng.random(n) < 0.05] = np.nan
    colour = rng.choice(np.array(["red", "green", "blue"], dtype=object), n)
    colour[rng.random(n) < 0.05] = None
    return {"amount": amount, "count": rng.poisson(3, n).astype(np.int64), "colour": colour}


def documents(cols: Columns) -> list[dict[str, Any]]:
    n = len(cols[FEATURES[0]])
    return [{f: plain(cols[f][i]) for f in FEATURES} for i in range(n)]
