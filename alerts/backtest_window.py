"""The window of each run of an alert backtest, counted as a monitor run counts it, without recounting it.

Run ``k`` (from 0) evaluates the last ``window`` rows after ``k + 1`` runs of ``step`` new rows each:
positions ``[(k + 1) * step, (k + 1) * step + window)`` (:class:`Layout`; the stream starts with a full
window of history). The stream is cut in blocks of ``span`` positions (a multiple of ``step``, about
``sqrt(window * step)``). A run's sketch is the merge (:meth:`monitors.sketch.WindowSketch.merge`, as the
monitor's sketch cache merges its blocks) of three parts: the newest block's rows so far (grown by ``step``
rows a run), the sealed blocks wholly inside the window (each counted once, merged once per block), and the
oldest block's rows from the window's start (its suffixes, counted once more when the window's start enters
it). So each row is counted at most twice and a run merges a few sketches, whatever the window.

What the monitor reads over the whole window on every run is done here the same way: the error stream of the
labelled rows goes to a fresh Page-Hinkley detector in order (its values are kept from the first count,
:class:`ErrorStream`: O(window) per run, as in the monitor), and a multi-class model's probability vectors are
counted again (:class:`monitors.sketch.MulticlassCounts`, as ``monitors.log_window`` reads them).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from alerts.backtest_traffic import Traffic
from monitors.drift.streaming import PageHinkley
from monitors.engine import CHUNK_ROWS, sketch_columns
from monitors.profile import Profile
from monitors.sketch import MulticlassCounts, WindowSketch
from registry.schema import Task


@dataclass(frozen=True)
class Layout:
    """Where each run's window lies in the stream, and the blocks it is counted in."""

    window: int
    step: int
    span: int

    @classmethod
    def of(cls, *, window: int, step: int) -> Layout:
        """Blocks of about ``sqrt(window * step)`` positions: a multiple of ``step``, at most ``window``."""
        blocks = max(1, math.isqrt(window // step)) if window >= step else 1
        return cls(window=window, step=step, span=blocks * step)

    def start(self, run: int) -> int:
        return (run + 1) * self.step

    def end(self, run: int) -> int:
        return self.start(run) + self.window


@dataclass
class _Recorder(PageHinkley):
    """An error detector that keeps the values it is fed, in order, instead of testing them."""

    kept: list[np.ndarray] = field(default_factory=list)

    def update(self, values: np.ndarray) -> list[int]:
        self.kept.append(np.array(values, dtype=np.float64).reshape(-1))
        return []


class ErrorStream:
    """The error values of the window's labelled rows in order, appended by ranges of positions."""

    def __init__(self) -> None:
        self._values = np.empty(1024)
        self._used = 0
        self._ranges: deque[tuple[int, int]] = deque()  # (first position, offset in _values)

    def extend(self, first: int, values: np.ndarray) -> None:
        """Append the values of the range of positions starting at ``first``."""
        if self._used + values.size > self._values.size:
            self._compact(values.size)
        self._ranges.append((first, self._used))
        self._values[self._used : self._used + values.size] = values
        self._used += values.size

    def since(self, position: int) -> np.ndarray:
        """The values from the range starting at ``position`` on (older ranges are dropped)."""
        while self._ranges and self._ranges[0][0] < position:
            self._ranges.popleft()
        if self._ranges and self._ranges[0][0] != position:
            raise ValueError(f"no range of the error stream starts at position {position}")
        offset = self._ranges[0][1] if self._ranges else self._used
        return self._values[offset : self._used]

    def _compact(self, more: int) -> None:
        offset = self._ranges[0][1] if self._ranges else self._used
        live = self._values[offset : self._used]
        size = max(self._values.size, 2 * (live.size + more))
        values = np.empty(size)
        values[: live.size] = live
        self._values, self._used = values, live.size
        self._ranges = deque((first, at - offset) for first, at in self._ranges)


class SlidingWindow:
    """The window sketch of each run from ``first`` on, each run in turn (:meth:`next`)."""

    def __init__(
        self, *, profile: Profile, traffic: Traffic, layout: Layout, threshold: float, first: int = 0
    ) -> None:
        self.profile, self.traffic, self.layout, self.threshold = profile, traffic, layout, threshold
        self.run = first
        self.multiclass = profile.task is Task.MULTICLASS
        self.totals: dict[int, WindowSketch] = {}  # sealed blocks by index
        self.head: WindowSketch | None = None  # the newest block's rows so far
        self.suffixes: dict[int, WindowSketch] = {}  # the tail block's rows from each start on
        self.tail_block = -1
        self.middle: tuple[int, int, WindowSketch | None] = (0, 0, None)
        self.errors = ErrorStream()
        self.end = 0  # the rows counted so far end here
        self._begin(first)

    def next(self) -> WindowSketch:
        """The sketch of the next run's window."""
        layout, run = self.layout, self.run
        start, end = layout.start(run), layout.end(run)
        self.run += 1
        parts: list[WindowSketch | None]
        if layout.window < layout.step:  # the window lies in the newest step's rows: counted whole
            parts = [self._count(start, end)]
            self._record(start, end)
        else:
            self._grow(end)
            parts = [self._tail(start), self._sealed(start, end), self.head]
        total = WindowSketch(threshold=self.threshold)  # its fresh error detector is the run's
        for part in parts:
            if part is not None:
                total = total.merge(part)
        if self.multiclass:
            self._vectors(total, start, end)
        else:
            total.errors.update(self.errors.since(start))
        return total

    def _begin(self, first: int) -> None:
        """Count the first run's window but its newest step (the run counts that step)."""
        layout = self.layout
        start = layout.start(first)
        if layout.window < layout.step:
            return
        sealed = -(-start // layout.span) * layout.span  # the first block boundary in the window
        for lo in range(start, sealed, layout.step):  # the tail's errors now; its counts with its suffixes
            self._record(lo, lo + layout.step)
        self.end = sealed
        self._grow(layout.end(first) - layout.step)

    def _grow(self, end: int) -> None:
        """Count the rows up to ``end`` into the newest block, sealing each block as it fills."""
        step, span = self.layout.step, self.layout.span
        while self.end < end:
            lo = self.end
            hi = min(end, (lo // step + 1) * step)
            part = self._count(lo, hi)
            self._record(lo, hi)
            self.head = part if self.head is None else self.head.merge(part)
            if hi % span == 0:
                self.totals[hi // span - 1] = self.head
                self.head = None
            self.end = hi

    def _tail(self, start: int) -> WindowSketch | None:
        """The oldest block's rows from ``start`` on (None when ``start`` begins a block)."""
        span, step = self.layout.span, self.layout.step
        if start % span == 0:
            return None
        block = start // span
        if block != self.tail_block:
            self.totals.pop(block, None)
            self.suffixes, acc = {}, None
            for lo in range((block + 1) * span - step, start - 1, -step):
                part = self._count(lo, lo + step)
                acc = part if acc is None else part.merge(acc)
                self.suffixes[lo] = acc
            self.tail_block = block
        return self.suffixes.pop(start)

    def _sealed(self, start: int, end: int) -> WindowSketch | None:
        """The merge of the sealed blocks wholly inside ``[start, end)`` (extended as blocks seal)."""
        span = self.layout.span
        lo, hi = -(-start // span), end // span
        was_lo, was_hi, merged = self.middle
        if lo != was_lo or hi < was_hi:
            was_hi, merged = lo, None
        for block in range(was_hi, hi):
            sealed = self.totals[block]
            merged = sealed if merged is None else merged.merge(sealed)
        for block in [b for b in self.totals if b < lo]:
            del self.totals[block]
        self.middle = (lo, hi, merged)
        return merged

    def _count(self, lo: int, hi: int) -> WindowSketch:
        """Positions ``[lo, hi)`` counted by the engine's own in-memory sketch."""
        rows = self.traffic.rows(lo, hi)
        return sketch_columns(
            profile=self.profile,
            columns=rows.columns,
            predictions=rows.predictions,
            labels=rows.labels,
            threshold=self.threshold,
        )

    def _record(self, lo: int, hi: int) -> None:
        """Keep the error values of positions ``[lo, hi)`` as the monitor's label count feeds them."""
        if self.multiclass or self.profile.prediction is None:
            return
        predictions, labels = self.traffic.outputs(lo, hi)
        if labels is None:
            return
        recorder = _Recorder()
        WindowSketch(threshold=self.threshold, errors=recorder).add_labels(self.profile, predictions, labels)
        kept = recorder.kept
        self.errors.extend(lo, np.concatenate(kept) if kept else np.empty(0))

    def _vectors(self, total: WindowSketch, start: int, end: int) -> None:
        """A multi-class window's vectors and labels counted in order (the error stream with them)."""
        predictions, labels = self.traffic.outputs(start, end)
        counts = MulticlassCounts(int(predictions.shape[1]))
        for lo in range(0, end - start, CHUNK_ROWS):
            p = predictions[lo : lo + CHUNK_ROWS]
            y = np.full(len(p), np.nan) if labels is None else labels[lo : lo + CHUNK_ROWS]
            counts.add(self.profile, p, y, total.errors)
        total.multiclass = counts
