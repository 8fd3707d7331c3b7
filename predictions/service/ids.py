"""Prediction ids: time-ordered UUIDs (v7 layout) handed out in counted runs."""

from __future__ import annotations

import os
import random
import time

_random = random.Random(int.from_bytes(os.urandom(32), "big"))
# a forked child (a worker of a server started with fork) must not repeat its parent's ids
os.register_at_fork(after_in_child=lambda: _random.seed(int.from_bytes(os.urandom(32), "big")))


def new_prediction_id() -> str:
    """A time-ordered UUID (v7 layout: 48-bit milliseconds, then random bits)."""
    return new_prediction_ids(1)[0]


_HEX3 = tuple(f"{i:03x}" for i in range(4096))  # the last three hex digits of an id, by value
_RUN = 2048  # ids per shared prefix, at most (the counter's start stays random in at least 2048 values)


def new_prediction_ids(n: int) -> list[str]:
    """``n`` time-ordered UUIDs (v7 layout; RFC 9562 section 6.2, method 2: a random start, then counted).

    Up to 2048 ids share their first 29 hex digits: the millisecond, the version, 12 random bits, the
    variant and 50 random bits; the last 12 bits count up from a random start (so the ids of one call of
    up to 2048 are in order). Each id is one string concatenation: no UUID objects, no numpy (whose larger
    operations release the GIL, and on the serving path the event loop then waits to take it back from the
    writer thread), and no syscall (the random bits come from a seeded generator).
    """
    out: list[str] = []
    while len(out) < n:
        k = min(n - len(out), _RUN)
        ms = (time.time_ns() // 1_000_000) & 0xFFFF_FFFF_FFFF
        # the id without its last 12 bits: ms (48), version 7 (4), rand_a (12), variant 0b10 (2), rand_b (50)
        high = ms << 68 | 0x7 << 64 | _random.getrandbits(12) << 52 | 0b10 << 50 | _random.getrandbits(50)
        h = f"{high:029x}"
        head = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        low = _random.randrange(4096 - k + 1)
        out += [head + tail for tail in _HEX3[low : low + k]]
    return out
