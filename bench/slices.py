"""The weak-slice search: what one search costs on a window's row sample.

Run: ``.venv/bin/python bench/slices.py [--rows 20000] [--repeat 5]``.

A sample of ``--rows`` rows of the generator's credit-risk table (10 features: 7 numeric, 3 categorical),
scored by the generator's own probability, is searched (:func:`monitors.slices.weak_slices`) with labels
and without (the estimated loss through the reference calibration). Printed per source: the best of
``--repeat`` runs in milliseconds, the slices tried and the top slice.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitors.profile import build_reference_profile, profile_from_dict  # noqa: E402
from monitors.rows import RowSample  # noqa: E402
from monitors.slices import weak_slices  # noqa: E402
from registry.schema import FeatureKind, infer_schema  # noqa: E402
from training.cluster.datagen import TARGET, default_logit, generate  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows of the sample")
    parser.add_argument("--repeat", type=int, default=5, help="runs per source; the best is printed")
    args = parser.parse_args(argv)
    reference = generate(20_000, seed=1)
    schema = infer_schema(reference, target=TARGET)
    ref_p = 1.0 / (1.0 + np.exp(-default_logit(reference)))
    profile = profile_from_dict(
        build_reference_profile(reference, schema, predictions=ref_p, labels=reference[TARGET])
    )
    window = generate(args.rows, seed=2)
    kinds = {s.name: s.kind for s in schema.features}
    columns = {
        n: np.asarray(window[n], dtype=np.float64 if k is FeatureKind.NUMERIC else object)
        for n, k in kinds.items()
    }
    p = 1.0 / (1.0 + np.exp(-default_logit(window)))
    labels = np.asarray(window[TARGET], dtype=np.float64)
    print(f"{'source':<10} {'ms, ' + str(args.rows) + ' rows':>16} {'tried':>6}  top slice")
    for name, y in (("labels", labels), ("estimated", None)):
        sample = RowSample(columns=columns, kinds=kinds, predictions=p, labels=y)
        best = float("inf")
        found = None
        for _ in range(args.repeat):
            start = time.perf_counter()
            found = weak_slices(sample=sample, profile=profile, level=0.05, min_rows=100)
            best = min(best, time.perf_counter() - start)
        assert found is not None
        top = found["slices"][0]["slice"] if found["slices"] else "-"
        print(f"{name:<10} {best * 1000:>16.1f} {found['tried']:>6}  {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
