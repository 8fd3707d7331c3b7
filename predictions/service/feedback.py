"""Feedback: ground-truth labels stored with copies of their predictions."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.database import utcnow
from predictions.models import PredictionFeedback
from predictions.service.reading import logged_predictions

# what a resent label replaces (with the copies of its prediction: the same values)
_FEEDBACK_UPDATED = ("label", "received_at", "log_id", "position", "probability", "model_version", "status")


def record_feedback(
    *, session: Session, model_name: str, labels: Sequence[tuple[str, float]]
) -> tuple[int, list[str]]:
    """Store ground-truth labels of logged predictions; returns (stored, unknown prediction ids)."""
    known = logged_predictions(session=session, model_name=model_name, ids=(pid for pid, _ in labels))
    latest = {pid: label for pid, label in labels if pid in known}  # a repeated id: the last label wins
    unknown = list(dict.fromkeys(pid for pid, _ in labels if pid not in known))
    if latest:
        now = utcnow()
        values = [
            {
                "prediction_id": pid,
                "model_name": model_name,
                "label": label,
                "received_at": now,
                # the feedback lives in the partition of its prediction (logged_at) and carries what a
                # window reads of it, so a window's labels are read without the batches
                **known[pid]._asdict(),
            }
            for pid, label in latest.items()
        ]
        dialect = session.get_bind().dialect.name
        ins = postgresql.insert if dialect == "postgresql" else sqlite.insert
        stmt = ins(PredictionFeedback)
        stmt = stmt.on_conflict_do_update(
            index_elements=["prediction_id", "logged_at"],
            set_={name: stmt.excluded[name] for name in _FEEDBACK_UPDATED},
        )
        session.execute(stmt, values)
    return len(latest), unknown
