"""Segment table benchmark: how long ``monitors.segments.segment_table`` takes on row samples of the
generator's credit data (10 features, of which the 3 categorical ones are segmented by default: 14
segments), with and without labels, quiet and with a shift confined to one region.

Run: ``.venv/bin/python bench/segments.py [--rows 20000] [--repeat 5]``; prints the median and the fastest of
``--repeat`` runs per case, in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from monitors.config import MonitorConfig
from monitors.horizon import run_alpha
from monitors.profile import build_reference_profile, profile_from_dict
from monitors.rows import RowSample
from monitors.segments import segment_table
from registry.schema import FeatureKind, infer_schema
from training.cluster.datagen import TARGET, default_logit, generate


def _sample(cols: dict[str, np.ndarray], kinds: dict[str, FeatureKind], *, labels: bool) -> RowSample:
    columns = {
        n: np.asarray(cols[n], dtype=np.float64)
        if k is FeatureKind.NUMERIC
        else np.asarray(cols[n], dtype=object)
        for n, k in kinds.items()
    }
    p = 1.0 / (1.0 + np.exp(-default_logit(cols)))
    y = np.asarray(cols[TARGET], dtype=np.float64) if labels else None
    return RowSample(columns=columns, kinds=kinds, predictions=p, labels=y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reference = generate(args.rows, seed=1)
    schema = infer_schema(reference, target=TARGET)
    p = 1.0 / (1.0 + np.exp(-default_logit(reference)))
    profile = profile_from_dict(
        build_reference_profile(reference, schema, predictions=p, labels=reference[TARGET])
    )
    kinds = {s.name: s.kind for s in schema.features}
    window = generate(args.rows, seed=2)
    north = window["region"] == "north"
    shifted = {**window, "income": np.where(north, window["income"] * 0.55, window["income"])}
    level = run_alpha(alpha=0.05, budget=0.5, every_s=300.0)
    config = MonitorConfig()
    ref = _sample(reference, kinds, labels=True)
    print(f"{args.rows} rows a side, {len(kinds)} features; seconds (median, fastest of {args.repeat})")
    for name, cols, labels in (
        ("quiet, labelled", window, True),
        ("quiet, no labels (CBPE)", window, False),
        ("north shifted, labelled", shifted, True),
    ):
        cur = _sample(cols, kinds, labels=labels)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            rows = segment_table(reference=ref, window=cur, profile=profile, config=config, level=level)
            times.append(time.perf_counter() - start)
        flagged = [r["segment"] for r in rows if r["flagged"]]
        print(
            f"{name:28s} {statistics.median(times):6.3f} {min(times):6.3f}  {len(rows)} segments, "
            f"flagged {flagged}"
        )


if __name__ == "__main__":
    main()
