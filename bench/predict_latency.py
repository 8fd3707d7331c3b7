"""Latency of a registered version's ``serving_default`` for one row, loaded in a fresh process.

    .venv/bin/python bench/predict_latency.py                 # trains a small model first (local mode)
    .venv/bin/python bench/predict_latency.py --path var/models/credit/1

Prints load time and median / p90 / p99 per call for 1 row and for 64 rows.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOADER = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
from registry.service import read_schema
from core.tabular import read_table
from registry.inputs import raw_inputs

path, data, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
fn = tf.saved_model.load(path).signatures["serving_default"]
load_s = time.perf_counter() - t0
schema = read_schema(path=__import__("pathlib").Path(path))
raw = raw_inputs(read_table(data), schema)
out = {"load_s": load_s}
for rows in (1, 64):
    batch = {k: tf.constant(v[:rows]) for k, v in raw.items()}
    for _ in range(50):
        fn(**batch)
    times = []
    for i in range(calls):
        t = time.perf_counter()
        fn(**batch)["probability"].numpy()
        times.append(time.perf_counter() - t)
    ms = np.array(times) * 1e3
    out[str(rows)] = {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)),
                      "p99_ms": float(np.percentile(ms, 99)), "calls": calls}
print(json.dumps(out))
"""


def _train_small(workdir: Path) -> tuple[Path, Path]:
    from core.database import open_database
    from core.tabular import write_table
    from training.cluster.datagen import generate
    from training.cluster.flows import run_training
    from training.cluster.progress import Progress
    from training.cluster.run_spec import Mode, TrainingRunSpec

    data = workdir / "baseline.csv"
    write_table(generate(5000, seed=1), data)
    db = open_database(f"sqlite:///{workdir / 'bench.db'}")
    job = TrainingRunSpec(model_name="bench", data=data, mode=Mode.LOCAL, epochs=1)
    result = run_training(
        job=job,
        db=db,
        registry=workdir / "models",
        checkpoint_root=workdir / "ckpt",
        progress=Progress("bench"),
    )
    db.dispose()
    return Path(result.version.path), data


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--path", type=Path, help="A version folder <registry>/<model>/<version>.")
    parser.add_argument("--data", type=Path, help="Rows to send (CSV/Parquet); default: generated baseline.")
    parser.add_argument("--calls", type=int, default=2000, help="Timed calls per batch size.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        path, data = args.path, args.data
        if path is None:
            path, data = _train_small(Path(tmp))
        if data is None:
            from core.tabular import write_table
            from training.cluster.datagen import generate

            data = Path(tmp) / "rows.csv"
            write_table(generate(1000, seed=2), data)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", LOADER, str(path), str(data), str(args.calls)],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - t0
    import json

    res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"version: {path}")
    print(
        f"fresh process: load SavedModel {res['load_s'] * 1e3:.1f} ms "
        f"(process total incl. TF import {wall:.1f} s)"
    )
    for rows in ("1", "64"):
        r = res[rows]
        print(
            f"serving_default, {rows:>2} row(s): median {r['median_ms']:.3f} ms, p90 {r['p90_ms']:.3f} ms, "
            f"p99 {r['p99_ms']:.3f} ms over {r['calls']} calls"
        )


if __name__ == "__main__":
    main()
