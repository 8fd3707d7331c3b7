"""The Python API's ``driftwarden.compare`` against ``driftwarden drift`` on the same data, side by side.

Run: ``.venv/bin/python bench/api_compare.py [--rows 1000000] [--rounds 1] [--dir DIR]``.

Generates a reference and a shifted current table of ``--rows`` rows x 25 columns (20 numeric, 5
categorical: ``bench/drift.py``'s columns) into Parquet once (kept in ``--dir`` and reused when there), then
times, each in a fresh process (wall and CPU seconds, from before Python's imports to the report; medians of
``--rounds``):

- ``driftwarden drift REF CUR``: the command (``python -m service.cli``), as a user runs it;
- ``compare(paths)``: ``import driftwarden; driftwarden.compare(REF, CUR)`` on the same Parquet files;
- ``compare(frames)``: the same on pandas frames read from them beforehand (reading them is not timed; the
  import of ``driftwarden`` and the frames' conversion to Arrow are).

The acceptance: ``compare`` takes no longer than ``driftwarden drift``. ``--rounds N`` runs the three N times,
interleaved (each round starting with the next one), and prints each run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# a fresh interpreter: the clock starts before the imports; prints the seconds (and the verdict)
API_SCRIPT = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
frames = sys.argv[1] == "frames"
if frames:
    import pandas as pd
    ref, cur = pd.read_parquet(sys.argv[2]), pd.read_parquet(sys.argv[3])
    t0, c0 = time.perf_counter(), time.process_time()  # reading the frames is the notebook's, not compare's
else:
    ref, cur = sys.argv[2], sys.argv[3]
import driftwarden
report = driftwarden.compare(ref, cur)
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0}))
"""


def make_files(rows: int, folder: Path) -> tuple[Path, Path]:
    """The reference and the current Parquet files of ``rows`` rows (made once, reused)."""
    import importlib.util

    from core.tabular import write_table

    # bench/drift.py's columns (bench/ is a folder of scripts, not a package: loaded by its path)
    spec = importlib.util.spec_from_file_location("bench_drift", ROOT / "bench" / "drift.py")
    assert spec is not None and spec.loader is not None
    drift = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drift)
    make_columns = drift.make_columns

    ref, cur = folder / f"reference-{rows}.parquet", folder / f"current-{rows}.parquet"
    if not ref.exists():
        write_table(make_columns(rows, seed=1), ref)
    if not cur.exists():
        write_table(make_columns(rows, seed=2, shift=0.05), cur)
    return ref, cur


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def time_cli(ref: Path, cur: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``driftwarden drift REF CUR`` in its own process (exit 0 or 1: stable or
    drifted)."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "drift", str(ref), str(cur)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    seconds = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"driftwarden drift failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)


def time_api(kind: str, ref: Path, cur: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``driftwarden.compare`` on ``kind`` (paths or frames), measured inside its
    process."""
    done = subprocess.run(
        [sys.executable, "-c", API_SCRIPT, kind, str(ref), str(cur)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"compare({kind}) failed: {done.stderr[-2000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    return float(measured["seconds"]), float(measured["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path("var/bench"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    ref, cur = make_files(args.rows, args.dir)
    print(f"{args.rows:,} rows x 25 columns (20 numeric, 5 categorical), Parquet: {ref.name}, {cur.name}")
    runs: dict[str, list[tuple[float, float]]] = {
        "driftwarden drift": [],
        "compare(paths)": [],
        "compare(frames)": [],
    }
    stages = {
        "driftwarden drift": lambda: time_cli(ref, cur),
        "compare(paths)": lambda: time_api("paths", ref, cur),
        "compare(frames)": lambda: time_api("frames", ref, cur),
    }
    order = list(stages)
    for k in range(args.rounds):  # each round in another order: a busy moment of the machine hits each alike
        for label in order[k % 3 :] + order[: k % 3]:
            runs[label].append(stages[label]())
    cli = statistics.median(wall for wall, _ in runs["driftwarden drift"])
    print(f"{'what':<20} {'wall s':>7} {'vs drift':>9} {'cpu s':>7}   runs (wall/cpu)")
    for label, measured in runs.items():
        wall = statistics.median(w for w, _ in measured)
        cpu = statistics.median(c for _, c in measured)
        each = " ".join(f"{w:.2f}/{c:.2f}" for w, c in measured)
        print(f"{label:<20} {wall:7.2f} {wall / cli:8.2f}x {cpu:7.2f}   {each}")


if __name__ == "__main__":
    main()
