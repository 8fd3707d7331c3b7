"""Root-cause cost benchmark (issue 42): a monitor run with the row sample, segments, weak slices and the
attribution, against the steady-state run without them, on a PostgreSQL log.

Run: ``.venv/bin/python bench/root_cause.py [--rows 1000000] [--sample-rows 20000 5000]
[--request-rows 32] [--labels 0.1] [--drifted 8] [--repeat 3]
[--pg-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]``.

The log is ``bench/drift.py``'s (25 features, 20 numeric and 5 categorical, typed; ``--labels`` of the rows
labelled), the reference profile ``bench/window_sample.py``'s (100,000 rows with answers: it keeps its row
sample and the surrogate of its answers). For the window of the last ``--rows`` predictions it prints,
median of ``--repeat`` runs on a warm sketch cache (the monitor's steady state):

- ``today``: the window read and sketched, and the engine's report (what a run cost before issue 42);
- per ``--sample-rows``: the same with the window's row sample read, then :func:`monitors.explain.explain`
  (weak slices, segments; the bench window has no drift, so no attribution), and the ratio to ``today``;
- the attribution alone (:func:`monitors.attribution.attribute`) with ``--drifted`` features taken as
  drifted, asked through the profile's surrogate (a model served elsewhere; ``bench/attribution.py`` times it
  with a Keras SavedModel).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from drift import fill_log, scratch_database  # noqa: E402  (bench/drift.py)
from window_sample import bench_profile, timed  # noqa: E402  (bench/window_sample.py)


def line(label: str, wall: float, cpu: float, base: float | None = None) -> None:
    ratio = f"   {wall / base:5.2f} x today" if base else ""
    print(f"  {label:<52} {wall:7.3f} s   cpu {cpu:7.3f} s{ratio}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sample-rows", type=int, nargs="+", default=[20_000, 5_000])
    parser.add_argument("--request-rows", type=int, default=32)
    parser.add_argument("--labels", type=float, default=0.1)
    parser.add_argument("--drifted", type=int, default=8)
    parser.add_argument("--reference-rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()

    from core.database import open_database
    from monitors.attribution import attribute
    from monitors.config import MonitorConfig
    from monitors.engine import evaluate
    from monitors.explain import explain
    from monitors.horizon import run_alpha
    from monitors.log_window import SketchCache, read_window
    from monitors.predictors import predictor_for
    from predictions.windows import WindowSpec

    profile = bench_profile(args.reference_rows, 1)
    config = MonitorConfig()
    every_s = 300.0
    level = run_alpha(alpha=config.alpha, budget=config.false_alarms_per_30d, every_s=every_s)
    predictor = predictor_for(version_dir=None, profile=profile, schema=None)
    assert predictor is not None, "the bench profile has no surrogate"
    with scratch_database("postgresql", args.pg_url) as url:
        t0 = time.perf_counter()
        labelled = fill_log(url, args.rows, request_rows=args.request_rows, labels=args.labels)
        print(
            f"postgresql: wrote {args.rows} predictions, {args.request_rows} per request, "
            f"{labelled} labelled, in {time.perf_counter() - t0:.1f} s (not timed); "
            f"median of {args.repeat} warm runs"
        )
        db = open_database(url)
        cache = SketchCache(db.engine)
        read = partial(
            read_window,
            engine=db.engine,
            profile=profile,
            model_name="bench",
            spec=WindowSpec(rows=args.rows),
            cache=cache,
        )
        read()  # cold: fills the sketch cache

        def today() -> None:
            window = read()
            evaluate(profile=profile, sketch=window.sketch, config=config, every_s=every_s)

        base, cpu, _ = timed(today, args.repeat)
        line("today: read + sketch + report (warm cache)", base, cpu)
        window = None
        for rows in args.sample_rows:

            def explained(rows: int = rows) -> object:
                window = read(sample_rows=rows)
                report = evaluate(profile=profile, sketch=window.sketch, config=config, every_s=every_s)
                explain(
                    report,
                    profile=profile,
                    window=window.sample,
                    predictor=lambda: predictor,
                    config=config,
                    level=level,
                )
                return window

            wall, cpu, window = timed(explained, args.repeat)
            line(f"+ sample of {rows} rows, weak slices, segments", wall, cpu, base)
        assert window is not None and getattr(window, "sample", None) is not None
        sample = window.sample
        drifted = [name for name in sample.numeric()][: args.drifted]
        ask = partial(
            attribute,
            reference=profile.sample,
            window=sample,
            drifted=drifted,
            predictor=predictor,
            profile=profile,
        )
        wall, cpu, found = timed(ask, args.repeat)
        line(f"attribution alone, {len(drifted)} drifted (surrogate)", wall, cpu)
        assert found is not None
        print(f"  -> {found['rows']} rows, {found['evaluations']} coalitions, {found['resamples']} resamples")
        db.dispose()


if __name__ == "__main__":
    main()
