"""Reading the database's log as the writer carries it, for a copy elsewhere (the lake's export)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.database import aware
from predictions.batch import LogBatch, as_bytes
from predictions.models import PredictionBatch, PredictionFeedback


def _hex(value: bytes | memoryview | str | None) -> str | None:
    blob = as_bytes(value)
    return None if blob is None else blob.hex()


def log_batches(*, session: Session, model_name: str, start: datetime, end: datetime) -> list[LogBatch]:
    """Every batch of ``model_name`` logged in ``[start, end)``, oldest first, as :class:`LogBatch` rows."""
    b = PredictionBatch
    stmt = (
        select(b)
        .where(b.model_name == model_name, b.logged_at >= start, b.logged_at < end)
        .order_by(b.logged_at, b.id)
    )
    out: list[LogBatch] = []
    for row in session.scalars(stmt):
        first = str(row.first_id)
        out.append(
            LogBatch(
                first[:33],
                int(first[33:], 16),
                row.size,
                row.request_id,
                row.model_name,
                row.model_version,
                aware(row.logged_at) or row.logged_at,
                row.latency_ms,
                row.status,
                row.protocol,
                row.source,
                row.layout if row.numbers is not None else None,
                _hex(row.numbers),
                row.categories,
                _hex(row.outputs) or "",
                _hex(row.vectors),
                row.flags,
                row.inputs,
            )
        )
    session.expunge_all()
    return out


def feedback_rows(
    *, session: Session, model_name: str, start: datetime, end: datetime
) -> list[tuple[str, float, datetime]]:
    """``(prediction_id, label, received_at)`` of the labels of ``model_name``'s predictions logged in
    ``[start, end)``."""
    f = PredictionFeedback
    stmt = select(f.prediction_id, f.label, f.received_at).where(
        f.model_name == model_name, f.logged_at >= start, f.logged_at < end
    )
    return [(pid, float(label), aware(when) or when) for pid, label, when in session.execute(stmt)]
