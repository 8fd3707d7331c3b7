"""Numeric reference columns put in order once each, for what the schema infers of them and their summary.

A reference's numeric column is read in order for its profile's quantiles (:func:`present_summary`) and,
when the schema is inferred, for its allowed range's tails (:func:`registry.schema.infer_feature` with
``ordered``): one partial sort (:func:`core.order.partial_sort`: the buckets that hold the quantiles and the
tails' values, not the whole column) serves both. :class:`SortedPass` orders the columns handed to it on
:data:`monitors.profile.WORKERS` threads while the caller reads the next ones.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from core.order import PartialSort, Scratch
from core.tabular import CodedColumn, Column
from monitors.profile import WORKERS  # (the package does not import this module: no cycle)
from monitors.profile.summaries import present_summary, quantile_order
from registry.schema import FeatureSpec, OrderedColumn, infer_feature
from registry.tails import SortedEnds, end_size


@dataclass(frozen=True)
class Sorted:
    """What is read off a numeric column put in order once: its spec (None: not inferred) and its summary for
    the profile (None: ``failure`` says why it could not be made)."""

    spec: FeatureSpec | None
    summary: dict[str, Any] | None
    failure: ValueError | TypeError | None = None


class SortedPass:
    """Numeric columns put in order as they are handed over (:meth:`add`), their spec inferred (with
    ``infer``) and their summary made on threads; :meth:`results` waits for them, in the order they were
    added. A context manager: leaving it cancels what has not started and waits for what has."""

    def __init__(self, *, infer: bool, skip: Collection[str] = (), only: Collection[str] | None = None):
        self.infer = infer
        self.skip = set(skip)
        self.only = None if only is None else set(only)
        self.local = threading.local()  # each thread's Scratch: a column's order is read before the next
        self.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="sort")
        self.jobs: dict[str, Future[Sorted]] = {}
        self.slots = threading.Semaphore(WORKERS + 1)  # columns handed over and not yet sorted, at most

    def __enter__(self) -> SortedPass:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def add(self, name: str, values: Column) -> bool:
        """Order ``values`` (column ``name``) on a thread when it is one this pass orders (then True); waits
        while :data:`~monitors.profile.WORKERS` + 1 columns are not sorted yet (a reader faster than the sorts
        would hold every column it read whole, and fresh pages for each cost more than the reading)."""
        wanted = name not in self.skip and (self.only is None or name in self.only)
        if wanted and not isinstance(values, CodedColumn) and values.dtype.kind in "iufb":  # numbers
            self.slots.acquire()  # a column waiting for its sort is held whole: a few at most
            job = self.pool.submit(self._one, name, values)
            job.add_done_callback(lambda _: self.slots.release())
            self.jobs[name] = job
            return True
        return False

    def results(self) -> dict[str, Sorted]:
        """Every column's spec and summary, by name; the first error of a column (in order) is raised."""
        return {name: job.result() for name, job in self.jobs.items()}

    def _one(self, name: str, values: np.ndarray) -> Sorted:
        scratch = getattr(self.local, "scratch", None)
        if scratch is None:
            scratch = self.local.scratch = Scratch()
        present = _present(values, scratch)
        spec = None
        if self.infer:  # the tails' values are put in order too: the range's fits read them
            below, finite = 0, present.size  # values at -inf, then finite ones
            if present.size and not (np.isfinite(present.min()) and np.isfinite(present.max())):
                below = int(np.count_nonzero(present == -np.inf))
                finite = present.size - below - int(np.count_nonzero(present == np.inf))
            k = end_size(finite)
            ends = [(below, below + k), (below + finite - k, below + finite)]
            order = quantile_order(present, spans=ends, scratch=scratch)
            spec = infer_feature(name, values, ordered=_facts(order, below=below, finite=finite, k=k))
        else:
            order = quantile_order(present, scratch=scratch)
        try:
            summary = present_summary(present, missing=len(values) - present.size, name=name, order=order)
        except (ValueError, TypeError) as exc:
            return Sorted(spec=spec, summary=None, failure=exc)
        return Sorted(spec=spec, summary=summary)


def _present(values: np.ndarray, scratch: Scratch) -> np.ndarray:
    """The column's present values as float64 (NaN dropped), in ``scratch``'s buffers unless the column is
    float64 with no NaN (then the column itself)."""
    n = len(values)
    if values.dtype != np.float64:
        x = scratch.get("float", n, np.float64)
        np.copyto(x, values, casting="unsafe")  # as as_float reads numbers: float64
    else:
        x = values
    missing = np.isnan(x, out=scratch.get("missing", n, np.bool_))
    lost = int(np.count_nonzero(missing))
    if not lost:
        return x
    kept = np.logical_not(missing, out=missing)
    return np.compress(kept, x, out=scratch.get("present", n - lost, np.float64))


def _facts(order: PartialSort, *, below: int, finite: int, k: int) -> OrderedColumn:
    """What schema inference reads of a column from its partial sort (``below`` values are -inf, then
    ``finite`` finite ones, whose ends of ``k`` values each were asked for)."""
    n = order.size
    lo, hi = (float(v) for v in order.take(np.array([0, n - 1]))) if n else (0.0, 0.0)
    ends = SortedEnds(
        count=finite,
        low=order.span(below, below + k),
        high=order.span(below + finite - k, below + finite),
    )
    return OrderedColumn(present=n, lo=lo, hi=hi, finite=ends)
