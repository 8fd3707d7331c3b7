"""The labelled rows of retraining: labelled answered predictions with their inputs as columns."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from core.database import aware
from predictions.models import PredictionBatch, PredictionFeedback, PredictionStatus
from predictions.service.reading import decode_documents, load_layouts


class LabelledRows(NamedTuple):
    """Labelled predictions of one model, oldest first by their time (a prediction's time is its batch's
    ``logged_at``; the log's id order is the order of logging, which imported history or a client's clock
    skew does not follow): input columns, labels and times.

    ``columns``: each numeric feature as floats (JSON null, an absent key or a value of another type is
    NaN), each categorical feature as objects (its text; None when absent or not a string), as the window
    readers of the monitors read them. ``window_rows``: every answered prediction logged between the first
    and the last of these rows, labelled or not.
    """

    columns: dict[str, np.ndarray]
    labels: np.ndarray
    logged_at: list[datetime]
    window_rows: int


def _labelled(model_name: str, since: datetime | None) -> list[ColumnElement[bool]]:
    """The conditions of the labelled answered predictions of ``model_name`` (since ``since``)."""
    fb = PredictionFeedback
    where = [
        fb.model_name == model_name,
        fb.status == PredictionStatus.OK.value,
        fb.log_id.is_not(None),
        fb.position.is_not(None),
    ]
    return where if since is None else [*where, fb.logged_at >= since]


def count_labelled(*, session: Session, model_name: str, limit: int, since: datetime | None = None) -> int:
    """How many labelled answered predictions of ``model_name`` there are (since ``since``), counted up to
    ``limit``: what :func:`labelled_rows` would read, without reading it."""
    wanted = select(PredictionFeedback.prediction_id).where(*_labelled(model_name, since)).limit(limit)
    inner = wanted.subquery()
    return int(session.scalar(select(func.count()).select_from(inner)) or 0)


def labelled_rows(
    *,
    session: Session,
    model_name: str,
    numeric: Sequence[str],
    categorical: Sequence[str],
    limit: int,
    since: datetime | None = None,
) -> LabelledRows:
    """The newest ``limit`` answered predictions of ``model_name`` (by their time, then log order) that have a
    ground-truth label."""
    fb, batch = PredictionFeedback, PredictionBatch
    stmt = select(fb.log_id, fb.position, fb.label, fb.logged_at).where(*_labelled(model_name, since))
    stmt = stmt.order_by(fb.logged_at.desc(), fb.log_id.desc(), fb.position.desc()).limit(limit)
    found = list(reversed(session.execute(stmt).all()))
    layouts = load_layouts(session)
    docs: dict[int, list[dict[str, Any]]] = {}
    wanted = list(dict.fromkeys(int(log_id or 0) for log_id, *_ in found))
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        for row in session.scalars(select(batch).where(batch.model_name == model_name, batch.id.in_(chunk))):
            docs[row.id] = decode_documents(row, layouts.get(row.layout) if row.layout is not None else None)
    kept: list[tuple[dict[str, Any], float, datetime]] = []
    for log_id, pos, label, when in found:
        batch_docs = docs.get(int(log_id or 0), [])
        if pos is not None and pos < len(batch_docs):
            kept.append((batch_docs[pos], label, when))
    n = len(kept)
    columns: dict[str, np.ndarray] = {}
    for name in numeric:
        col = np.full(n, np.nan)
        for i, (inputs, _, _) in enumerate(kept):
            value = inputs.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                col[i] = float(value)
        columns[name] = col
    for name in categorical:
        cats = np.empty(n, dtype=object)
        for i, (inputs, _, _) in enumerate(kept):
            value = inputs.get(name)
            cats[i] = value if isinstance(value, str) else None
        columns[name] = cats
    labels = np.array([float(label) for _, label, _ in kept], dtype=np.float64)
    times = [aware(when) or when for _, _, when in kept]
    window_rows = 0
    if kept:
        window_rows = int(
            session.scalar(
                select(func.coalesce(func.sum(batch.size), 0)).where(
                    batch.model_name == model_name,
                    batch.status == PredictionStatus.OK.value,
                    batch.logged_at >= times[0],
                    batch.logged_at <= times[-1],
                )
            )
            or 0
        )
    return LabelledRows(columns=columns, labels=labels, logged_at=times, window_rows=window_rows)
