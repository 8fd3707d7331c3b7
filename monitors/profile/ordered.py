"""Numeric reference columns sorted once each, for both what the schema infers of them and their summary.

A reference's numeric column is sorted for its profile's quantiles (:func:`numeric_summary`) and, when the
schema is inferred, its allowed range reads its tails (:func:`registry.schema.infer_feature` with
``ordered``): one sort serves both. :class:`SortedPass` sorts the columns handed to it on
:data:`monitors.profile.WORKERS` threads while the caller reads the next ones; each thread sorts into one
buffer of its own, again and again (fresh pages for every column cost more than the copy), and neither
reader keeps a view of it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from core.tabular import CodedColumn, Column
from monitors.profile import WORKERS  # (the package does not import this module: no cycle)
from monitors.profile.summaries import numeric_summary
from registry.schema import FeatureSpec, infer_feature


@dataclass(frozen=True)
class Sorted:
    """What is read off a numeric column sorted once: its spec (None: not inferred) and its summary for the
    profile (None: left to the profile, which makes it again or says why it cannot)."""

    spec: FeatureSpec | None
    summary: dict[str, Any] | None


class SortedPass:
    """Numeric columns sorted as they are handed over (:meth:`add`), their spec inferred (with ``infer``) and
    their summary made on threads; :meth:`results` waits for them, in the order they were added. A context
    manager: leaving it cancels what has not started and waits for what has."""

    def __init__(self, *, infer: bool, skip: Collection[str] = (), only: Collection[str] | None = None):
        self.infer = infer
        self.skip = set(skip)
        self.only = None if only is None else set(only)
        self.local = threading.local()
        self.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="sort")
        self.jobs: dict[str, Future[Sorted]] = {}

    def __enter__(self) -> SortedPass:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def add(self, name: str, values: Column) -> None:
        """Sort ``values`` (column ``name``) on a thread when it is one this pass sorts."""
        wanted = name not in self.skip and (self.only is None or name in self.only)
        if wanted and not isinstance(values, CodedColumn) and values.dtype.kind in "iufb":  # numbers
            self.jobs[name] = self.pool.submit(self._one, name, values)

    def results(self) -> dict[str, Sorted]:
        """Every column's spec and summary, by name; the first error of a column (in order) is raised."""
        return {name: job.result() for name, job in self.jobs.items()}

    def _one(self, name: str, values: np.ndarray) -> Sorted:
        ordered = getattr(self.local, "buffer", None)
        if ordered is None or ordered.size != len(values):
            ordered = self.local.buffer = np.empty(len(values), dtype=np.float64)
        np.copyto(ordered, values)  # as as_float reads numbers: float64
        ordered.sort()  # as sorted_values sorts them (np.sort: a copy, then this)
        spec = infer_feature(name, values, ordered=ordered) if self.infer else None
        try:
            summary = numeric_summary(values, name=name, ordered=ordered)
        except (ValueError, TypeError):
            summary = None
        return Sorted(spec=spec, summary=summary)
