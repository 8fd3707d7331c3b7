"""Silences: add, list, expire, and which one silences a set of labels."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from alerts.labels import Matcher, matches_all
from alerts.models import Silence
from core.errors import NotFound


def add_silence(
    *,
    session: Session,
    matchers: Sequence[Matcher],
    starts_at: datetime,
    ends_at: datetime,
    created_by: str,
    comment: str,
    now: datetime,
) -> Silence:
    """A new silence."""
    row = Silence(
        id=str(uuid.uuid4()),
        matchers=[m.as_dict() for m in matchers],
        starts_at=starts_at,
        ends_at=ends_at,
        created_by=created_by,
        comment=comment,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def get_silence(*, session: Session, silence_id: str) -> Silence:
    """One silence, or NotFound."""
    row = session.get(Silence, silence_id)
    if row is None:
        raise NotFound(f"no silence {silence_id!r}: `GET /v1/silences` shows the silences")
    return row


def list_silences(*, session: Session, limit: int = 200) -> list[Silence]:
    """Silences, newest first."""
    return list(session.scalars(select(Silence).order_by(Silence.created_at.desc()).limit(limit)))


def is_active(silence: Silence, now: datetime) -> bool:
    """Whether a silence mutes alerts at ``now``."""
    return silence.expired_at is None and silence.starts_at <= now < silence.ends_at


def active_silences(*, session: Session, now: datetime) -> list[Silence]:
    """The silences muting alerts at ``now``."""
    rows = session.scalars(select(Silence).where(Silence.expired_at.is_(None), Silence.ends_at > now))
    return [s for s in rows if is_active(s, now)]


def silencing(silences: Sequence[Silence], labels: dict[str, Any]) -> Silence | None:
    """The first silence whose matchers all match ``labels``, or None."""
    for s in silences:
        if matches_all((Matcher.from_dict(m) for m in s.matchers), labels):
            return s
    return None


def expire_silence(*, session: Session, silence_id: str, now: datetime) -> Silence:
    """End a silence now (it stays listed, with ``expired_at``)."""
    row = get_silence(session=session, silence_id=silence_id)
    if row.expired_at is None:
        row.expired_at = now
        session.flush()
    return row
