"""Reading the log: logged predictions by id, decoded documents, the newest predictions, counts, models."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
import orjson
from sqlalchemy import Connection, func, or_, select
from sqlalchemy.orm import Session

from core.database import aware
from predictions import typed
from predictions.batch import PREFIX, as_bytes, first_id, floats, ids_from, split_id
from predictions.models import PredictionBatch, PredictionLogLayout


class LoggedPrediction(NamedTuple):
    """What a label copies of its prediction (the feedback's columns of the same names)."""

    logged_at: datetime
    log_id: int
    position: int
    probability: float | None
    model_version: int
    status: str


def logged_predictions(
    *, session: Session, model_name: str, ids: Iterable[str]
) -> dict[str, LoggedPrediction]:
    """Each of ``ids`` that is a logged prediction of ``model_name``. The batches of one id prefix are a range
    of the primary key ``(first_id, logged_at)``: from the prefix's ``000`` up to the greatest id asked; a
    batch holds an id when its run (``size`` ids from its first) reaches it."""
    batch = PredictionBatch
    tails: dict[str, list[tuple[str, int]]] = {}
    for pid in dict.fromkeys(ids):
        parts = split_id(pid)
        if parts is not None:
            tails.setdefault(parts[0], []).append((pid, parts[1]))
    prefixes = list(tails)
    found: dict[str, LoggedPrediction] = {}
    for start in range(0, len(prefixes), 500):
        chunk = prefixes[start : start + 500]
        ranges = [
            batch.first_id.between(first_id(p, 0), first_id(p, max(t for _, t in tails[p]))) for p in chunk
        ]
        stmt = select(
            batch.first_id,
            batch.size,
            batch.logged_at,
            batch.id,
            batch.outputs,
            batch.model_version,
            batch.status,
        ).where(batch.model_name == model_name, or_(*ranges))
        for first, size, when, log_id, outputs, version, status in session.execute(stmt):
            prefix, low = first[:PREFIX], int(first[PREFIX:], 16)
            values = floats(as_bytes(outputs), size)
            for pid, tail in tails.get(prefix, ()):
                if low <= tail < low + size:
                    value = float(values[tail - low])
                    found[pid] = LoggedPrediction(
                        aware(when) or when,
                        log_id,
                        tail - low,
                        None if np.isnan(value) else value,
                        version,
                        status,
                    )
    return found


def load_layouts(conn: Connection | Session) -> dict[int, typed.Layout]:
    """Every layout recorded in the database, by id."""
    table = PredictionLogLayout
    found = conn.execute(select(table.id, table.numeric, table.categorical, table.categories)).all()
    return {int(i): typed.layout_from_json(int(i), num, cat, known) for i, num, cat, known in found}


class Logged(NamedTuple):
    """One logged prediction, decoded (what :func:`recent_predictions` returns)."""

    prediction_id: str
    request_id: str | None
    model_name: str
    model_version: int
    logged_at: datetime
    inputs: dict[str, Any]
    probability: float | None
    outputs: list[float] | None
    flags: list[str] | None
    latency_ms: float
    status: str
    protocol: str
    source: str


def decode_documents(batch: PredictionBatch, layout: typed.Layout | None) -> list[dict[str, Any]]:
    """A batch's inputs as one document per prediction: its stored documents, else its typed copy (numbers
    as floats, NaN as None; categories as texts; absent values left out)."""
    if batch.inputs is not None:
        return [dict(doc) if isinstance(doc, dict) else {} for doc in batch.inputs]
    if layout is None or batch.numbers is None:
        return [{} for _ in range(batch.size)]
    matrix = typed.numbers_matrix(bytes(batch.numbers), batch.size, layout.width)
    texts = iter((batch.categories or "").split("\n")) if batch.categories else iter(())
    first = len(layout.numeric)
    out: list[dict[str, Any]] = []
    for row in matrix.tolist():
        doc: dict[str, Any] = {}
        for name, value in zip(layout.numeric, row, strict=False):
            doc[name] = None if value != value else value
        codes = row[first:]
        other = orjson.loads(next(texts))["v"] if typed.OTHER in codes else None
        for j, (name, code) in enumerate(zip(layout.categorical, codes, strict=True)):
            if code == typed.OTHER:
                doc[name] = other[j] if other is not None else None
            elif code != typed.MISSING:
                doc[name] = layout.categories[j][int(code)]
        out.append(doc)
    return out


def recent_predictions(
    *, session: Session, model_name: str, limit: int | None = None, since: datetime | None = None
) -> list[Logged]:
    """The newest logged predictions of one model, newest first (last ``limit`` and/or since ``since``)."""
    stmt = select(PredictionBatch).where(PredictionBatch.model_name == model_name)
    if since is not None:
        stmt = stmt.where(PredictionBatch.logged_at >= since)
    stmt = stmt.order_by(PredictionBatch.id.desc())
    layouts = load_layouts(session)
    out: list[Logged] = []
    for batch in session.scalars(stmt.execution_options(yield_per=100)):
        docs = decode_documents(batch, layouts.get(batch.layout) if batch.layout is not None else None)
        values = floats(as_bytes(batch.outputs), batch.size)
        vectors = as_bytes(batch.vectors)
        width = len(vectors) // (8 * batch.size) if vectors else 0
        matrix = floats(vectors, batch.size * width).reshape(batch.size, width) if width else None
        ids = ids_from(batch.first_id, batch.size)
        for i in reversed(range(batch.size)):
            value = float(values[i])
            out.append(
                Logged(
                    prediction_id=ids[i],
                    request_id=batch.request_id,
                    model_name=batch.model_name,
                    model_version=batch.model_version,
                    logged_at=batch.logged_at,
                    inputs=docs[i],
                    probability=None if np.isnan(value) else value,
                    outputs=None if matrix is None else matrix[i].tolist(),
                    flags=None if batch.flags is None else batch.flags[i],
                    latency_ms=batch.latency_ms,
                    status=batch.status,
                    protocol=batch.protocol,
                    source=batch.source,
                )
            )
            if limit is not None and len(out) >= limit:
                return out
    return out


def count_predictions(*, session: Session, model_name: str | None = None) -> int:
    """Number of logged predictions (of one model, or all)."""
    stmt = select(func.coalesce(func.sum(PredictionBatch.size), 0))
    if model_name is not None:
        stmt = stmt.where(PredictionBatch.model_name == model_name)
    return int(session.scalar(stmt) or 0)


def logged_models(*, session: Session) -> list[str]:
    """Model names present in the log, by skipping along the ``(model_name, id)`` index (one seek each)."""
    names: list[str] = []
    last: str | None = None
    while True:
        stmt = select(PredictionBatch.model_name).order_by(PredictionBatch.model_name).limit(1)
        if last is not None:
            stmt = stmt.where(PredictionBatch.model_name > last)
        last = session.scalar(stmt)
        if last is None:
            return names
        names.append(last)
