"""What a window is (:class:`WindowSpec`), where it lies in the log (:class:`WindowSummary`), a chunk of it as
numpy columns (:class:`Chunk`), and the filters every read of it shares."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy.sql.elements import ColumnElement

from core.config import Settings
from predictions.models import PredictionBatch, PredictionStatus

CHUNK_ROWS: int = Settings.model_fields["monitor_chunk_rows"].default
"""Predictions per chunk unless told otherwise: the default of the ``monitor_chunk_rows`` setting. The
monitors sketch in-memory columns in chunks of the same size."""


READER = "columnar"
"""The reader's name, as a window reports it."""


@dataclass(frozen=True)
class WindowSpec:
    """Which predictions form a window: the last ``rows`` and/or the last ``minutes`` (both: the
    intersection)."""

    rows: int | None = None
    minutes: float | None = None
    version: int | None = None  # only predictions of this model version (None: every version)
    until: datetime | None = None  # only predictions logged before this time (a past window: backfill)

    def __post_init__(self) -> None:
        if self.rows is not None and self.rows <= 0:
            raise ValueError(f"window rows must be positive, got {self.rows}")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"window minutes must be positive, got {self.minutes}")

    def describe(self) -> str:
        parts = []
        if self.rows is not None:
            parts.append(f"last {self.rows} predictions")
        if self.minutes is not None:
            parts.append(f"last {self.minutes:g} minutes")
        what = " within the ".join(parts) or "every prediction"
        if self.until is not None:
            what += f" before {self.until.isoformat()}"
        return what + ("" if self.version is None else f" of version {self.version}")


@dataclass(frozen=True)
class WindowSummary:
    """Where a non-empty window lies in the log: its prediction count, time span and batch id range
    (``skip``: the oldest predictions of the first batch that are not in the window)."""

    model_name: str
    spec: WindowSpec
    rows: int
    start: datetime | None
    end: datetime | None
    first_id: int
    last_id: int
    since: datetime | None  # the time bound (now - minutes); None without one
    skip: int = 0

    @classmethod
    def of_ids(cls, *, model_name: str, spec: WindowSpec, low: int, high: int) -> WindowSummary:
        """The batch ids ``low..high`` read as a window of their own, under ``spec``'s filters (before the
        window's summary is known: its row count is the ids' count, a bound)."""
        return cls(model_name, spec, high - low + 1, None, None, low, high, None)

    def block_span(self, block: int, size: int) -> tuple[int, int]:
        """The ids of the aligned block ``block`` (of ``size`` batch ids) inside the window's range."""
        low, high = block * size, block * size + size - 1
        return max(low, self.first_id), min(high, self.last_id)

    def holds_block(self, block: int, size: int, oldest: datetime) -> bool:
        """Whether the block (``oldest``: its oldest ``logged_at``) lies wholly inside the window: its every
        row is in it, so its counts may be kept."""
        low, high = block * size, block * size + size - 1
        starts = self.first_id < low or (self.first_id == low and not self.skip)
        inside = starts and high <= self.last_id
        return inside and (self.since is None or oldest >= self.since)


@dataclass
class Chunk:
    """One chunk of a window as numpy columns: every numeric feature (floats), the categorical features
    counted (``category_counts``), the predictions, the labels (NaN: none) and the predictions counted by
    their batch's ``source`` (``serve``, ``ingest``, ``import``, ...; only sources the chunk holds)."""

    rows: int
    columns: dict[str, np.ndarray]
    predictions: np.ndarray
    labels: np.ndarray
    category_counts: dict[str, Counter[str | None]] = field(default_factory=dict)
    sources: Counter[str] = field(default_factory=Counter)


def filters(
    *, model_name: str, spec: WindowSpec, since: datetime | None, upto: int | None = None
) -> list[ColumnElement[bool]]:
    log = PredictionBatch
    out: list[ColumnElement[bool]] = [log.model_name == model_name, log.status == PredictionStatus.OK.value]
    if spec.version is not None:
        out.append(log.model_version == spec.version)
    if since is not None:
        out.append(log.logged_at >= since)
    if spec.until is not None:
        out.append(log.logged_at < spec.until)
    if upto is not None:
        out.append(log.id <= upto)
    return out


def since_of(spec: WindowSpec, now: datetime | None) -> datetime | None:
    """The window's time bound (None without one)."""
    if spec.minutes is None:
        return None
    return (now or datetime.now(UTC)).astimezone(UTC) - timedelta(minutes=spec.minutes)


# The planner cannot know that ``id / B`` has few values: it expects a group per row and sorts the window's
# index entries; without sorts it hashes the few groups. The setting lasts for the statement's transaction.
NO_SORT = "SET LOCAL enable_sort = off"
