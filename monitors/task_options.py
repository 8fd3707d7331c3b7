"""The offline comparison's options checked against the contract's task: a binary model's options are
refused, one line, on a multi-class or regression contract."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.errors import Invalid
from registry.schema import Task

if TYPE_CHECKING:
    from monitors.config import MonitorConfig


def check_task_options(
    task: Task,
    classes: Sequence[str],
    *,
    named: str,
    prediction: str | None,
    config: MonitorConfig,
    hint: str,
) -> None:
    """Options that only a binary model has are refused, one line, on a contract of another task."""
    if task is Task.BINARY:
        return
    what = (
        f"{named} is multi-class" + (f" (classes {', '.join(classes)})" if classes else "")
        if task is Task.MULTICLASS
        else f"{named} is a regression"
    )
    if prediction is not None and task is Task.MULTICLASS:
        raise Invalid(
            f"--prediction-column {prediction!r} holds one probability per row, a binary model's: {what}, "
            "whose output is a probability per class; leave the option out (the features are compared)"
        )
    if "classification_threshold" in config.model_fields_set:
        raise Invalid(
            "the monitor setting 'classification_threshold' applies to binary models: "
            f"{what}; remove it{hint}"
        )
