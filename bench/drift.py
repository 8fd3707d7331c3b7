"""Drift-report benchmark: 25 features (20 numeric, 5 categorical), in-memory windows of 10k/100k/1M rows.

Run: ``.venv/bin/python bench/drift.py [--rows 10000 100000 1000000] [--reference-rows 100000]``.
Prints wall seconds and peak memory growth (MB above the RSS at the start of the stage, from the
kernel's VmHWM after resetting it through /proc/self/clear_refs) for each stage.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from monitors.profile import build_reference_profile, profile_from_dict
from monitors.service import evaluate, sketch_columns
from service.registry.schema import ModelSchema, OutputSpec, infer_feature
from service.tabular import Columns

T = TypeVar("T")
N_NUMERIC, N_CATEGORICAL = 20, 5


def make_columns(rows: int, *, seed: int, shift: float = 0.0) -> Columns:
    """20 numeric columns of varied shapes (some integer, one with missing values) and 5 categorical."""
    rng = np.random.default_rng(seed)
    cols: Columns = {}
    for i in range(N_NUMERIC):
        kind = i % 5
        if kind == 0:
            x = rng.normal(50 + shift * 10, 10, rows)
        elif kind == 1:
            x = rng.lognormal(10 + shift * 0.4, 0.5, rows)
        elif kind == 2:
            x = rng.poisson(4 + shift, rows).astype(np.int64)
        elif kind == 3:
            x = np.round(rng.exponential(5, rows), 1)
            x[rng.random(rows) < 0.02] = np.nan
        else:
            x = rng.uniform(0, 1 + shift, rows)
        cols[f"num_{i:02d}"] = x
    for j in range(N_CATEGORICAL):
        k = 3 + 2 * j
        cats = np.array([f"c{j}_{v}" for v in range(k)], dtype=object)
        p = np.arange(k, 0, -1, dtype=np.float64)
        p /= p.sum()
        cols[f"cat_{j}"] = rng.choice(cats, rows, p=p)
    return cols


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def measure(label: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` once; print seconds and peak RSS growth in MB."""
    gc.collect()
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS counter (Linux)
    start_rss = _rss_kb("VmRSS")
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    peak = max(_rss_kb("VmHWM") - start_rss, 0) / 1024
    print(f"  {label:<34} {dt:8.3f} s   peak +{peak:7.1f} MB", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--reference-rows", type=int, default=100_000)
    args = parser.parse_args()

    print(
        f"reference: {args.reference_rows} rows, {N_NUMERIC} numeric + {N_CATEGORICAL} categorical features"
    )
    ref = make_columns(args.reference_rows, seed=1)
    schema = ModelSchema(
        features=tuple(infer_feature(n, c) for n, c in ref.items()),
        outputs=(OutputSpec(name="p"),),
        target="",
    )
    raw: dict[str, Any] = measure("build profile", lambda r=ref: build_reference_profile(r, schema))
    size = len(json.dumps(raw))
    profile = measure("parse profile", lambda: profile_from_dict(json.loads(json.dumps(raw))))
    print(f"  profile.json: {size / 1e6:.2f} MB")
    ref.clear()
    for rows in args.rows:
        print(f"window: {rows} rows (numeric columns shifted in half of the features)")
        cur = make_columns(rows, seed=2, shift=0.0)
        shifted = make_columns(rows, seed=3, shift=0.05)
        for name in list(cur)[::2]:
            cur[name] = shifted[name]
        del shifted
        gc.collect()
        sketch = measure(
            "sketch (count on reference grids)", lambda c=cur: sketch_columns(profile=profile, columns=c)
        )
        report = measure("evaluate (all tests, report)", lambda s=sketch: evaluate(profile=profile, sketch=s))
        measure(
            "full report (sketch + evaluate)",
            lambda c=cur: evaluate(profile=profile, sketch=sketch_columns(profile=profile, columns=c)),
        )
        measure("report as JSON", lambda r=report: json.dumps(r.as_dict()))
        print(
            f"  -> dataset drifted={report.drifted}, {report.dataset.n_drifted}/{report.dataset.n_features} "
            f"features, multivariate drifted={report.multivariate.drifted if report.multivariate else None}"
        )
        del cur, sketch, report


if __name__ == "__main__":
    main()
