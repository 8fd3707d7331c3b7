"""Silence matchers against adversarial labels: what one regex matcher costs per label value.

Run: ``.venv/bin/python bench/matchers.py [--labels 10000] [--repeat 3]``.

Each pattern of ``tests/alerts/test_rules.py``'s catastrophic list (exponential for a backtracking engine on
a near miss) and two ordinary ones is parsed as a silence matcher (``alerts.labels.parse_matcher``: RE2)
and matched against ``--labels`` label values ``a...a!`` of 20 to 59 characters, each a near miss. Printed
per pattern: the best of ``--repeat`` runs for all labels, in milliseconds, and RE2's program size.
Python's ``re`` is timed on one label of 26 ``a``s and a ``!`` for the first pattern, as the defect had it.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.labels import _regex, parse_matcher  # noqa: E402

CATASTROPHIC: tuple[str, ...] = importlib.import_module("tests.alerts.test_rules").CATASTROPHIC

ORDINARY = (r"credit|fraud-.*", r"[a-z0-9_-]{1,64}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=10_000, help="label values per pattern")
    parser.add_argument("--repeat", type=int, default=3, help="runs per pattern; the best is printed")
    args = parser.parse_args(argv)
    labels = [{"model": "a" * (20 + i % 40) + "!"} for i in range(args.labels)]
    print(f"{'pattern':<32} {'program':>7} {'ms, ' + str(args.labels) + ' labels':>18}")
    for pattern in (*CATASTROPHIC, *ORDINARY):
        matcher = parse_matcher(f"model=~{pattern}")
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            for one in labels:
                matcher.matches(one)
            best = min(best, time.perf_counter() - start)
        print(f"{pattern:<32} {_regex(pattern).programsize:>7} {best * 1000:>18.1f}")
    start = time.perf_counter()
    re.fullmatch(CATASTROPHIC[0], "a" * 26 + "!")
    print(
        f"\nPython re, {CATASTROPHIC[0]!r} on 26 a's and a '!': {(time.perf_counter() - start) * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
