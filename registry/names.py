"""Model names, labels and version numbers: one documented rule, checked wherever one comes in.

A model name (and a version label) is 1 to 64 ASCII letters, digits, ``_``, ``.`` or ``-`` that does not
start with ``.`` or ``-``: pattern :data:`NAME_PATTERN`. Such a name is a plain folder name (no separator,
never ``.`` or ``..``), a URL path segment that needs no escaping, and a valid TensorFlow Serving model name;
it cannot collide with the ``name:verb`` route syntax. Versions are positive integers.
"""

from __future__ import annotations

import re

from core.errors import Invalid

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
MAX_NAME_LENGTH = 64
NAME_RULE = (
    f"1 to {MAX_NAME_LENGTH} ASCII letters, digits, '_', '.' or '-', not starting with '.' or '-' "
    f"(pattern {NAME_PATTERN}), e.g. 'credit-risk'"
)
_NAME = re.compile(NAME_PATTERN.removeprefix("^").removesuffix("$"))
_ALLOWED = re.compile(r"[A-Za-z0-9_.-]")
MAX_VERSION = 2**31 - 1  # the version column is a 32-bit integer
_SHOWN = 40  # characters of a rejected name quoted in the message


class InvalidName(Invalid):
    """A model name or label that breaks :data:`NAME_PATTERN`; the message names it, the rule and the fix."""


class InvalidVersion(Invalid):
    """A version that is not a positive integer."""


def _quoted(text: str) -> str:
    shown = repr(text[:_SHOWN])  # repr escapes newlines and other unprintable characters: one line
    return shown + (f"... ({len(text)} characters)" if len(text) > _SHOWN else "")


def _broken_rule(text: str) -> str | None:
    if not text:
        return "it is empty"
    if len(text) > MAX_NAME_LENGTH:
        return f"it has {len(text)} characters, more than {MAX_NAME_LENGTH}"
    if text[0] in ".-":
        return f"it starts with {text[0]!r}"
    bad = next((c for c in text if not _ALLOWED.fullmatch(c)), None)
    if bad is not None:
        return f"it contains {bad!r}"
    return None if _NAME.fullmatch(text) else "it does not match the pattern"


def check_name(name: str, *, what: str = "model name", given_as: str | None = None) -> str:
    """``name`` unchanged when it is a valid model name (or label, with ``what``); else raise InvalidName.

    ``given_as`` names where the name came from (a CLI option such as ``--model``), put first in the message.
    """
    where = f"{given_as}: " if given_as else ""
    if not isinstance(name, str):
        raise InvalidName(f"{where}{what} must be text, got {type(name).__name__}: a {what} is {NAME_RULE}")
    broken = _broken_rule(name)
    if broken is not None:
        raise InvalidName(f"{where}{what} {_quoted(name)} is not allowed ({broken}): a {what} is {NAME_RULE}")
    return name


def check_label(label: str) -> str:
    """``label`` unchanged when it is a valid version label (same rule as model names)."""
    return check_name(label, what="label")


def check_version(version: int, *, what: str = "version") -> int:
    """``version`` unchanged when it is a positive integer; else raise InvalidVersion."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise InvalidVersion(
            f"{what} must be a positive integer from 1 to {MAX_VERSION}, got {version!r} (rule: version)"
        )
    return version


def parse_version(text: str, *, what: str = "version") -> int:
    """A version given as text (a CLI argument, a URL segment): digits only, at least 1."""
    if not (text.isascii() and text.isdigit() and len(text) <= 10 and 1 <= int(text) <= MAX_VERSION):
        raise InvalidVersion(
            f"{what} must be a positive integer from 1 to {MAX_VERSION}, got {_quoted(text)} (rule: version)"
        )
    return int(text)


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:VERSION`` as (checked name, version or None)."""
    name, sep, version = ref.rpartition(":")
    if not sep:
        return check_name(ref), None
    return check_name(name), parse_version(version, what=f"the version in {_quoted(ref)}")
