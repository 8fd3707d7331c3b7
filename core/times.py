"""The one range of times a client may send, and the one check that reads such a time as UTC.

Every time that enters from outside (an ingested record's ``time``, a CloudEvent's ``ce-time``, an
Alertmanager alert's ``startsAt``/``endsAt``, a silence's ``starts_at``/``ends_at``, a file import's time
column, the ``since``/``until`` of a query) must lie in :data:`EARLIEST` ... :data:`LATEST`, UTC:

- **from 1970-01-01T00:00:00Z**: no prediction log holds an earlier time, and a year before 1000 would not
  come back: SQLite keeps a time as text (``YYYY-MM-DD HH:MM:SS``) and compares it as text, right for
  four-digit years only (``'999-...'`` sorts after ``'2026-...'``, and reads back as no time at all);
- **to 9999-12-30T23:59:59.999999Z**: Python's times end on 9999-12-31; the day left over keeps a time plus
  a day (a window's or a partition's end) representable. PostgreSQL's ``timestamptz`` holds the whole range.

A time is converted to UTC without overflowing (``datetime.astimezone`` raises ``OverflowError`` for
``0001-01-01T00:00:00+01:00`` or ``9999-12-31T23:59:59-01:00``, whose UTC falls outside Python's range):
such a time is simply outside the range. A refusal names the field and the range.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator

from core.errors import Invalid

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999_999, tzinfo=UTC)
RANGE = "1970-01-01T00:00:00Z to 9999-12-30T23:59:59Z (UTC)"
"""The range as the refusals word it."""
EXAMPLE = "2026-12-01T10:00:00Z"


def utc_in_range(moment: datetime) -> datetime | None:
    """``moment`` in UTC if it lies in the range, else None (never raises); a naive ``moment`` is UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        at = moment.astimezone(UTC)
    except OverflowError:  # its UTC is before year 1 or after 9999
        return None
    return at if EARLIEST <= at <= LATEST else None


def outside(shown: object) -> str:
    """The words of a refusal of a time outside the range (after the field's name)."""
    return f"{str(shown)[:64]!r} is outside the times driftwarden stores, {RANGE}"


def require_time(moment: datetime, *, field: str) -> datetime:
    """``moment`` in UTC, or :class:`~core.errors.Invalid` naming ``field`` and the range."""
    at = utc_in_range(moment)
    if at is None:
        raise Invalid(f"{field}: {outside(moment.isoformat())}")
    return at


def parse_time(text: str, *, field: str, naive_utc: bool = False) -> datetime:
    """An RFC 3339 time of a client (``text``) in UTC, or :class:`~core.errors.Invalid` naming ``field``: one
    that does not parse, one without its offset (unless ``naive_utc``: then it is UTC) or one outside the
    range."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise Invalid(f"{field}: {str(text)[:64]!r} is not an RFC 3339 time; give e.g. {EXAMPLE}") from None
    if moment.tzinfo is None and not naive_utc:
        raise Invalid(f"{field}: {str(text)[:64]!r} has no time zone; give one, e.g. {EXAMPLE}")
    at = utc_in_range(moment)
    if at is None:
        raise Invalid(f"{field}: {outside(text)}")
    return at


def _checked(moment: datetime) -> datetime:
    """A pydantic field's time in UTC (a naive one stays naive: the model's own rule speaks of it)."""
    if moment.tzinfo is None:
        return moment
    at = utc_in_range(moment)
    if at is None:
        raise ValueError(outside(moment.isoformat()))
    return at


ClientTime = Annotated[datetime, AfterValidator(_checked)]
"""A pydantic field of a client's time: converted to UTC and checked against the range (the error names the
field through pydantic's location)."""


def iso_or_none(moment: datetime | None) -> str | None:
    """``moment`` in ISO 8601 (as stored: aware times keep their offset), or None."""
    return None if moment is None else moment.isoformat()
