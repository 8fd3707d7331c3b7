"""The reference's sorts (``monitors.profile.ordered.SortedPass``) hold a few columns at most: a reader faster
than the sorts waits for one to end instead of holding every column it read whole."""

from __future__ import annotations

import threading

import numpy as np

from monitors.profile import WORKERS
from monitors.profile.ordered import Sorted, SortedPass


class _Gated(SortedPass):
    """Sorts that wait for the gate to open."""

    def __init__(self) -> None:
        super().__init__(infer=False)
        self.gate = threading.Event()

    def _one(self, name: str, values: np.ndarray) -> Sorted:
        self.gate.wait()
        return super()._one(name, values)


def test_columns_handed_over_wait_for_a_sort_to_end() -> None:
    columns = {f"x{i}": np.random.default_rng(i).normal(size=1_000) for i in range(WORKERS + 4)}
    names = list(columns)
    sorts = _Gated()
    with sorts:
        for name in names[: WORKERS + 1]:
            assert sorts.add(name, columns[name])  # a column waiting for each thread, and one more
        assert not sorts.slots.acquire(blocking=False)  # the next add would wait: no sort has ended
        sorts.gate.set()
        for name in names[WORKERS + 1 :]:
            assert sorts.add(name, columns[name])
        assert not sorts.add("text", np.array(["a", "b"], dtype=object))  # not a number: not taken
        done = sorts.results()
    assert list(done) == names
    assert all(d.summary is not None and d.summary["count"] == 1_000 for d in done.values())
