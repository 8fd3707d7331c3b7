"""core.times: the one range of a client's times, read as UTC without overflowing at either end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import BaseModel, ValidationError

from core.errors import Invalid
from core.times import EARLIEST, LATEST, ClientTime, parse_time, require_time, utc_in_range

PLUS_ONE, MINUS_ONE = timezone(timedelta(hours=1)), timezone(timedelta(hours=-1))


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(1970, 1, 1, tzinfo=UTC), EARLIEST),
        (datetime(1970, 1, 1, 1, tzinfo=PLUS_ONE), EARLIEST),
        (datetime(9999, 12, 30, 23, 59, 59, 999_999, tzinfo=UTC), LATEST),
        (datetime(9999, 12, 30, 22, 59, 59, 999_999, tzinfo=MINUS_ONE), LATEST),
        (datetime(2026, 12, 1, 11, tzinfo=PLUS_ONE), datetime(2026, 12, 1, 10, tzinfo=UTC)),
        (datetime(2026, 12, 1, 10), datetime(2026, 12, 1, 10, tzinfo=UTC)),  # naive: UTC
        (datetime(1, 1, 1, tzinfo=PLUS_ONE), None),  # its UTC is before year 1: astimezone overflows
        (datetime(9999, 12, 31, 23, 59, 59, tzinfo=MINUS_ONE), None),  # after 9999: the same
        (datetime(1, 1, 1, tzinfo=UTC), None),
        (datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), None),
        (datetime(9999, 12, 31, tzinfo=UTC), None),
    ],
)
def test_a_time_is_utc_in_the_range_or_none(moment: datetime, expected: datetime | None) -> None:
    got = utc_in_range(moment)
    assert got == expected and (got is None or got.tzinfo is UTC)


def test_refusals_name_the_field_and_the_range() -> None:
    with pytest.raises(Invalid, match=r"^ends_at: '0001-01-01T00:00:00\+01:00' is outside .* 1970-01-01"):
        require_time(datetime(1, 1, 1, tzinfo=PLUS_ONE), field="ends_at")
    with pytest.raises(Invalid, match=r"^since: '9999-12-31T23:59:59-01:00' is outside"):
        parse_time("9999-12-31T23:59:59-01:00", field="since")
    with pytest.raises(Invalid, match=r"^since: 'soon' is not an RFC 3339 time"):
        parse_time("soon", field="since")
    with pytest.raises(Invalid, match=r"^since: '2026-12-01T10:00:00' has no time zone"):
        parse_time("2026-12-01T10:00:00", field="since")
    naive = parse_time("2026-12-01T10:00:00", field="t", naive_utc=True)
    assert naive == datetime(2026, 12, 1, 10, tzinfo=UTC)


class _Body(BaseModel):
    at: ClientTime | None = None


def test_a_pydantic_field_of_a_clients_time() -> None:
    ten = datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert _Body.model_validate({"at": "2026-12-01T11:00:00+01:00"}).at == ten
    naive = _Body.model_validate({"at": "2026-12-01T11:00:00"}).at  # left to the model's own rule
    assert naive == datetime(2026, 12, 1, 11)
    for value in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1969-07-20T20:17:00Z"):
        with pytest.raises(ValidationError, match="is outside the times driftwarden stores"):
            _Body.model_validate({"at": value})
