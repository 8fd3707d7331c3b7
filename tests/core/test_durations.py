"""The one duration grammar (core/durations.py): every form it takes, and the errors that name the field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.durations import LONGEST, parse_duration, require_duration
from core.errors import Invalid


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("12h", 12 * 3600),
        ("90d", 90 * 86400),
        ("2w", 14 * 86400),
        ("1d12h", 36 * 3600),
        ("1w2d", 9 * 86400),
        ("1h30m15s", 5415),
        ("90", 90),
        ("1.5", 1.5),
        (" 2h ", 7200),
        ("3650d", 3650 * 86400),
    ],
)
def test_every_form_of_the_grammar(text: str, seconds: float) -> None:
    assert require_duration(text, where="d") == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("soon", "is not a duration: write e.g. 30m, 12h, 1d12h, 2w or 90s"),
        ("-1d", "is not a duration"),
        ("", "is not a duration"),
        ("12h1d", "is not a duration"),  # largest unit first
        ("2H", "is not a duration"),
        ("1d1d", "is not a duration"),
        ("0d", "must be longer than 0 seconds"),
        ("0", "must be longer than 0 seconds"),
        ("3651d", "is longer than the longest allowed, 3650d"),
        ("99999999999d", "is longer than the longest allowed, 3650d"),
        ("9999999999999999999w", "is not a duration"),  # more digits than any duration needs
        ("1e400", "is not a duration"),
    ],
)
def test_errors_name_the_field_and_the_rule(text: str, rule: str) -> None:
    with pytest.raises(Invalid) as err:
        parse_duration(text, where="--for")
    assert str(err.value).startswith(f"--for: {text.strip()!r} ") and rule in str(err.value)


def test_never_only_where_allowed_and_a_smaller_maximum() -> None:
    assert parse_duration("never", where="--expires-in", allow_never=True) is None
    with pytest.raises(Invalid, match=r"'never' is not a duration"):
        parse_duration("never", where="--ttl")
    with pytest.raises(Invalid, match="longer than the longest allowed, 90d"):
        parse_duration("91d", where="--ttl", maximum=timedelta(days=90))


@given(st.text(max_size=40))
def test_any_text_is_a_duration_in_range_or_invalid(text: str) -> None:
    try:
        value = parse_duration(text, where="x")
    except Invalid:
        return
    assert value is not None and timedelta(0) < value <= LONGEST
