"""Feedback: ground-truth labels stored with copies of their predictions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.database import utcnow
from predictions.models import PredictionFeedback
from predictions.service.reading import logged_predictions

# what a resent label replaces (with the copies of its prediction: the same values)
_FEEDBACK_UPDATED = ("label", "received_at", "log_id", "position", "probability", "model_version", "status")
_IDS_PER_QUERY = 1000  # prediction ids per query of the labels held


@dataclass(frozen=True)
class StoredFeedback:
    """What a call of :func:`store_feedback` did with its labels, by prediction id."""

    stored: int  # new labels, and labels that replace another label of the same prediction
    present: int  # labels the table already held (the same label of the same prediction): not written again
    unknown: list[str]  # ids that are no logged prediction of the model


def record_feedback(
    *, session: Session, model_name: str, labels: Sequence[tuple[str, float]]
) -> tuple[int, list[str]]:
    """Store ground-truth labels of logged predictions; returns (stored, unknown prediction ids)."""
    done = store_feedback(session=session, model_name=model_name, labels=labels)
    return done.stored, done.unknown


def store_feedback(
    *, session: Session, model_name: str, labels: Sequence[tuple[str, float]]
) -> StoredFeedback:
    """Store ground-truth labels of logged predictions, counting those the table already held."""
    known = logged_predictions(session=session, model_name=model_name, ids=(pid for pid, _ in labels))
    latest = {pid: label for pid, label in labels if pid in known}  # a repeated id: the last label wins
    unknown = list(dict.fromkeys(pid for pid, _ in labels if pid not in known))
    logged = {pid: known[pid].logged_at for pid in latest}
    held = _held_labels(session=session, model_name=model_name, ids=logged)
    changed = {pid: label for pid, label in latest.items() if held.get(pid) != label}
    if changed:
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
            for pid, label in changed.items()
        ]
        dialect = session.get_bind().dialect.name
        ins = postgresql.insert if dialect == "postgresql" else sqlite.insert
        stmt = ins(PredictionFeedback)
        stmt = stmt.on_conflict_do_update(
            index_elements=["prediction_id", "logged_at"],
            set_={name: stmt.excluded[name] for name in _FEEDBACK_UPDATED},
        )
        session.execute(stmt, values)
    return StoredFeedback(stored=len(changed), present=len(latest) - len(changed), unknown=unknown)


def _held_labels(*, session: Session, model_name: str, ids: Mapping[str, datetime]) -> dict[str, float]:
    """The labels the table holds of ``ids`` (logged predictions of ``model_name``, with their ``logged_at``:
    on PostgreSQL only the partitions of those days are read)."""
    table = PredictionFeedback
    held: dict[str, float] = {}
    pids = list(ids)
    for start in range(0, len(pids), _IDS_PER_QUERY):
        chunk = pids[start : start + _IDS_PER_QUERY]
        stmt = select(table.prediction_id, table.label).where(
            table.model_name == model_name,
            table.prediction_id.in_(chunk),
            table.logged_at.in_({ids[pid] for pid in chunk}),
        )
        held.update({pid: float(label) for pid, label in session.execute(stmt)})
    return held
