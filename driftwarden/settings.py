"""The monitor settings of a comparison (``**settings`` of :func:`driftwarden.compare`), checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from driftwarden.errors import InvalidInput

if TYPE_CHECKING:
    from monitors.config import MonitorConfig
    from registry.schema import Task


def monitor_config(settings: dict[str, Any]) -> MonitorConfig:
    """The settings ``driftwarden drift --config`` accepts, validated by the same
    :class:`monitors.config.MonitorConfig`; an unknown name or a value that breaks a rule is
    :class:`InvalidInput` naming the setting and the rule."""
    from pydantic import ValidationError

    from monitors.config import MonitorConfig

    unknown = sorted(set(settings) - set(MonitorConfig.model_fields))
    if unknown:
        known = ", ".join(sorted(MonitorConfig.model_fields))
        raise InvalidInput(f"unknown setting {', '.join(map(repr, unknown))}: the settings are {known}")
    try:
        return MonitorConfig.model_validate(settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"setting {'.'.join(str(p) for p in e['loc'])!r}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidInput(f"invalid monitor settings: {problems}") from None


def parse_task(task: str | None) -> Task | None:
    """``binary``, ``multiclass`` or ``regression`` (None: binary, as ``driftwarden drift`` without a
    schema); anything else is :class:`InvalidInput`."""
    from registry.schema import Task

    if task is None:
        return None
    try:
        return Task.parse(str(task))
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
