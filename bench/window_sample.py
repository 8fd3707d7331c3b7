"""Row-sample benchmark: what reading a window's sample costs beside reading the window, on PostgreSQL; and
what the reference profile's sample costs in ``profile.json`` (size, parse time).

Run: ``.venv/bin/python bench/window_sample.py [--rows 100000 1000000] [--sample-rows 20000]
[--request-rows 1 32] [--labels 0.1] [--repeat 3] [--pg-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]``.

The log is the one ``bench/drift.py`` writes (25 features, 20 numeric and 5 categorical, typed; one
``prediction_batches`` row per request of ``--request-rows`` predictions; ``--labels`` of them labelled), in a
scratch PostgreSQL schema dropped at the end. For each window (the last N predictions) it prints, median of
``--repeat`` runs, the wall and CPU seconds of: the window read and sketched without the sketch cache (every
row read), the warm run with the sketch cache (the monitor's steady state: the same window again), the same
with ``sample_rows`` (the sample read on its own thread while the window is sketched), and the sample read
alone (``monitors.log_window.read_window_sample``: the batch sizes' index scan, the sampled
rows' slices, their labels). Then the profile: its JSON size and parse time with and without ``"sample"``,
and the first access of ``Profile.sample``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from drift import fill_log, make_columns, predictions, scratch_database  # noqa: E402  (bench/drift.py)

from monitors.profile import build_reference_profile, profile_from_dict  # noqa: E402
from registry.schema import ModelSchema, OutputSpec, infer_feature  # noqa: E402


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of ``repeat`` calls, and the last result."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus), out


def show(label: str, wall: float, cpu: float, base: float | None = None) -> None:
    share = f"   {wall / base:6.1%} of the uncached read" if base else ""
    print(f"  {label:<40} {wall:8.3f} s   cpu {cpu:7.3f} s{share}", flush=True)


def bench_profile(reference_rows: int, repeat: int) -> Any:
    """The profile's size and parse time with and without its sample; returns the parsed profile."""
    ref = make_columns(reference_rows, seed=1)
    schema = ModelSchema(
        features=tuple(infer_feature(n, c) for n, c in ref.items()),
        outputs=(OutputSpec(name="p"),),
        target="",
    )
    raw = build_reference_profile(ref, schema, predictions=predictions(reference_rows, seed=5))
    with_sample = json.dumps(raw, separators=(",", ":"))
    without = json.dumps({k: v for k, v in raw.items() if k != "sample"}, separators=(",", ":"))
    print(f"profile of {reference_rows} reference rows, {len(ref)} features")
    sizes = f"{len(without) / 1e6:.2f} MB without the sample, {len(with_sample) / 1e6:.2f} MB with it"
    print(f"  profile.json {sizes}")
    wall, cpu, _ = timed(lambda: profile_from_dict(json.loads(without)), repeat)
    show("read + parse profile (no sample)", wall, cpu)
    wall, cpu, profile = timed(lambda: profile_from_dict(json.loads(with_sample)), repeat)
    show("read + parse profile (with sample)", wall, cpu)
    wall, cpu, _ = timed(lambda: profile_from_dict(json.loads(with_sample)).sample, repeat)
    show("... and its first Profile.sample", wall, cpu)
    return profile


def bench_windows(args: argparse.Namespace, profile: Any, request_rows: int) -> None:
    from core.database import open_database
    from monitors.log_window import SketchCache, read_window, read_window_sample
    from predictions.windows import WindowSpec

    with scratch_database("postgresql", args.pg_url) as url:
        t0 = time.perf_counter()
        labelled = fill_log(url, max(args.rows), request_rows=request_rows, labels=args.labels)
        print(
            f"postgresql: wrote {max(args.rows)} predictions, {request_rows} per request, "
            f"{labelled} labelled, in {time.perf_counter() - t0:.1f} s (not timed)"
        )
        db = open_database(url)
        for rows in args.rows:
            read = partial(
                read_window, engine=db.engine, profile=profile, model_name="bench", spec=WindowSpec(rows=rows)
            )
            print(f"window: last {rows} predictions, {request_rows} per request (median of {args.repeat})")
            base, cpu, window = timed(read, args.repeat)
            show("read + sketch, no cache (every row)", base, cpu)
            cache = SketchCache(db.engine)
            read(cache=cache)  # cold: fills the cache
            wall, cpu, _ = timed(partial(read, cache=cache), args.repeat)
            show("read + sketch, warm sketch cache", wall, cpu, base)
            warm = wall
            wall, cpu, _ = timed(partial(read, cache=cache, sample_rows=args.sample_rows), args.repeat)
            show("... with the sample (its own thread)", wall, cpu, base)
            print(f"  {'':<40} {wall / warm:8.2f} x the warm run without the sample")
            sampled = partial(
                read_window_sample, engine=db.engine, profile=profile, window=window, rows=args.sample_rows
            )
            wall, cpu, sample = timed(sampled, args.repeat)
            show(f"sample of {args.sample_rows} rows alone", wall, cpu, base)
            assert sample is not None and sample.rows == min(rows, args.sample_rows)
            print(f"  -> sample: {sample.rows} rows of {sample.population}, {sample.labelled} labelled")
        db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--sample-rows", type=int, default=20_000)
    parser.add_argument("--request-rows", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--labels", type=float, default=0.1)
    parser.add_argument("--reference-rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    profile = bench_profile(args.reference_rows, args.repeat)
    for request_rows in args.request_rows:
        bench_windows(args, profile, request_rows)


if __name__ == "__main__":
    main()
