"""The one duration grammar of the CLI and the API (token lifetimes, silences, report links), and durations
said in words (:func:`in_words`: the report page, the backtest).

A duration is one or more ``<whole number><unit>`` parts, largest unit first, each unit at most once:
``w`` weeks, ``d`` days, ``h`` hours, ``m`` minutes, ``s`` seconds (``90s``, ``30m``, ``12h``, ``2w``,
``1d12h``, ``1w2d``), or a plain number of seconds (``90``, ``1.5``). It must be longer than zero and at
most ``maximum`` (by default :data:`LONGEST`, ten years); ``never`` is accepted where the caller allows it.
Errors are :class:`core.errors.Invalid` naming the field (``where``) and the rule.
"""

from __future__ import annotations

import re
from datetime import timedelta

from core.errors import Invalid

LONGEST = timedelta(days=3650)
UNITS = (("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
GRAMMAR = re.compile("".join(rf"(?:(\d{{1,12}}){unit})?" for unit, _ in UNITS))
SECONDS = re.compile(r"\d{1,12}(?:\.\d{1,9})?")
EXAMPLES = "30m, 12h, 1d12h, 2w or 90s"


def _show(limit: timedelta) -> str:
    days, rest = divmod(int(limit.total_seconds()), 86_400)
    if days and not rest:
        return f"{days}d"
    return f"{int(limit.total_seconds())}s"


def parse_duration(
    text: str, *, where: str, maximum: timedelta = LONGEST, allow_never: bool = False
) -> timedelta | None:
    """``text`` as a duration (see the module docstring); None for ``never`` where ``allow_never``."""
    raw = str(text).strip()
    if allow_never and raw == "never":
        return None
    found = GRAMMAR.fullmatch(raw) if raw else None
    if SECONDS.fullmatch(raw):
        seconds = float(raw)
    elif found is not None:
        seconds = float(sum(int(n) * size for n, (_, size) in zip(found.groups(), UNITS, strict=True) if n))
    else:
        also = " (or never)" if allow_never else ""
        raise Invalid(f"{where}: {raw!r} is not a duration: write e.g. {EXAMPLES}{also}")
    if seconds <= 0:
        raise Invalid(f"{where}: {raw!r} must be longer than 0 seconds")
    if seconds > maximum.total_seconds():
        raise Invalid(f"{where}: {raw!r} is longer than the longest allowed, {_show(maximum)}")
    return timedelta(seconds=seconds)


def require_duration(text: str, *, where: str, maximum: timedelta = LONGEST) -> timedelta:
    """:func:`parse_duration` without ``never``: always a duration."""
    value = parse_duration(text, where=where, maximum=maximum)
    assert value is not None  # allow_never is off
    return value


def in_words(seconds: float) -> str:
    """A span for people: ``45 s``, ``5 min``, ``1 h 30 min``, ``2 d``, ``1 d 6 h`` (never negative)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, mins = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {mins} min" if mins else "")
    days, hrs = divmod(round(s / 3600), 24)
    return f"{days} d" + (f" {hrs} h" if hrs else "")
