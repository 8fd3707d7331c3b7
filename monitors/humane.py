"""Times as people read them (pure): ``4 Dec 2026 17:37 UTC``, a window as a range and a duration
(``4 Dec 2026 16:37–17:37 UTC (1 h)``), an age (``3 h ago``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.durations import in_words


def parse_instant(value: object) -> datetime | None:
    """A stored time (a datetime or its ISO text, naive read as UTC) in UTC; None when there is none."""
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str) and value:
        try:
            at = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(UTC)


def _day(at: datetime) -> str:
    return f"{at.day} {at:%b %Y}"


def when(at: datetime) -> str:
    """``4 Dec 2026 17:37 UTC``."""
    at = at.astimezone(UTC)
    return f"{_day(at)} {at:%H:%M} UTC"


def short(at: datetime) -> str:
    """``4 Dec 17:37`` (a chart's tick)."""
    at = at.astimezone(UTC)
    return f"{at.day} {at:%b %H:%M}"


def span(start: datetime, end: datetime) -> str:
    """A window as a range and a duration: ``4 Dec 2026 16:37–17:37 UTC (1 h)``, the day repeated only
    when the window ends on another day."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    tail = f"{end:%H:%M} UTC" if start.date() == end.date() else when(end)
    return f"{_day(start)} {start:%H:%M}\u2013{tail} ({in_words((end - start).total_seconds())})"


def age(at: datetime, *, now: datetime) -> str:
    """How long ago ``at`` was: ``just now``, ``12 min ago``, ``3 h ago``, ``2 d ago`` (``in ...`` ahead)."""
    delta = now - at
    if abs(delta) < timedelta(minutes=1):
        return "just now"
    text = in_words(abs(delta.total_seconds()))
    return f"{text} ago" if delta > timedelta(0) else f"in {text}"
