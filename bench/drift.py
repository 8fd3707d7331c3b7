"""Drift-report benchmark: 25 features (20 numeric, 5 categorical), windows of 10k/100k/1M rows,
in memory and read from the prediction log (SQLite and PostgreSQL).

Run: ``.venv/bin/python bench/drift.py [--rows 10000 100000 1000000] [--reference-rows 100000]
[--db sqlite postgresql] [--pg-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
[--readers auto typed blocks aggregate generic] [--legacy-log] [--incremental]``.
Prints wall seconds, the process's CPU seconds and peak memory growth (MB above the RSS at the start of
the stage, from the kernel's VmHWM after resetting it through /proc/self/clear_refs) for each stage; the
load average before each database window.

Database stages: the largest window's rows are first written (bulk, not timed) to a scratch SQLite file
or a scratch PostgreSQL schema (dropped at the end), then each window (the last N rows of the model) is
read in chunks into a sketch and evaluated: the path ``POST /v1/models/{name}/monitors:run`` takes.
With ``--incremental`` (PostgreSQL), each window is then reported through the sketch cache
(``monitors.log_window.SketchCache``): cold (empty cache), warm (the same window again) and moving (1 % of
the window appended as new rows, then the report again: a monitor's steady state), and without the cache on
the same window.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from core.tabular import Columns
from monitors.engine import evaluate, sketch_columns
from monitors.profile import build_reference_profile, profile_from_dict
from registry.schema import ModelSchema, OutputSpec, infer_feature

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


SECONDS: dict[str, float] = {}  # last wall time per stage label


def measure(label: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` once; print wall seconds, this process's CPU seconds (all threads; on a shared machine the
    CPU a stage needs varies less than its wall time) and peak RSS growth in MB."""
    gc.collect()
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS counter (Linux)
    start_rss = _rss_kb("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = max(_rss_kb("VmHWM") - start_rss, 0) / 1024
    print(f"  {label:<34} {dt:8.3f} s   cpu {cpu:7.3f} s   peak +{peak:7.1f} MB", flush=True)
    SECONDS[label] = dt
    return out


# Run by the interpreter of a throwaway venv holding evidently (never a dependency of driftwarden).
EVIDENTLY_SCRIPT = """
import gc, sys, time
from pathlib import Path
import numpy as np, pandas as pd
from evidently import Report
from evidently.presets import DataDriftPreset

def rss(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0

ref = pd.DataFrame(dict(np.load(sys.argv[1])))
cur = pd.DataFrame(dict(np.load(sys.argv[2])))
gc.collect()
Path("/proc/self/clear_refs").write_text("5")
start = rss("VmRSS")
t0 = time.perf_counter()
snapshot = Report([DataDriftPreset()]).run(cur, ref)
result = snapshot.dict()
dt = time.perf_counter() - t0
print(f"{dt:.3f} {max(rss('VmHWM') - start, 0) / 1024:.1f}")
"""


def bench_evidently(python: str, *, reference_rows: int, windows: list[int], ours: dict[int, float]) -> None:
    """Evidently's DataDriftPreset on the same in-memory data, in its own interpreter; side by side."""
    import subprocess
    import tempfile

    def save(cols: Columns, path: Path) -> None:
        arrays = {k: v.astype(str) if v.dtype == object else v for k, v in cols.items()}
        savez: Any = np.savez  # its stub types **kwds as the allow_pickle flag
        savez(path, **arrays)

    print(f"evidently DataDriftPreset ({python}), same reference ({reference_rows} rows) and windows:")
    with tempfile.TemporaryDirectory(prefix="dw-evidently-") as tmp:
        ref_path = Path(tmp) / "reference.npz"
        save(make_columns(reference_rows, seed=1), ref_path)
        for rows in windows:
            cur_path = Path(tmp) / "current.npz"
            save(window_columns(rows), cur_path)
            proc = subprocess.run(
                [python, "-c", EVIDENTLY_SCRIPT, str(ref_path), str(cur_path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                print(f"  {rows} rows: evidently failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            seconds, peak = (float(v) for v in proc.stdout.split()[-2:])
            mine = ours.get(rows)
            ratio = f"{seconds / mine:6.0f} x" if mine else "   -"
            print(
                f"  window {rows:>8}: evidently {seconds:8.3f} s peak +{peak:7.1f} MB | driftwarden "
                f"{mine if mine is not None else float('nan'):6.3f} s (full report, in memory) | {ratio}",
                flush=True,
            )


def full_report(*, profile: Any, columns: Columns) -> Any:
    """Sketch in-memory columns and evaluate them."""
    return evaluate(profile=profile, sketch=sketch_columns(profile=profile, columns=columns))


def report_json(report: Any) -> str:
    return json.dumps(report.as_dict())


def db_report(*, engine: Any, profile: Any, spec: Any, reader: str = "auto", cache: Any = None) -> Any:
    """Read a window from the database and evaluate it: what one monitor run does."""
    from monitors.log_window import read_window

    window = read_window(
        engine=engine, profile=profile, model_name="bench", spec=spec, reader=reader, cache=cache
    )
    return window, evaluate(profile=profile, sketch=window.sketch)


def window_columns(rows: int) -> Columns:
    """The benchmark's current window: every other feature shifted a little."""
    cur = make_columns(rows, seed=2, shift=0.0)
    shifted = make_columns(rows, seed=3, shift=0.05)
    for name in list(cur)[::2]:
        cur[name] = shifted[name]
    return cur


def predictions(rows: int, *, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).beta(2, 5, rows)


DISTINCT_ROWS = 1_000_000  # PostgreSQL: a larger log repeats these rows (copied in SQL, see _fill_log)

# the newest DISTINCT_ROWS rows again, with new ids, new prediction ids and later times (1 ms apart)
_REPEAT_SQL = """
INSERT INTO prediction_log (prediction_id, request_id, model_name, model_version, logged_at, inputs,
    probability, latency_ms, status, protocol, layout, numbers, categories)
SELECT gen_random_uuid()::text, request_id, model_name, model_version,
    logged_at + make_interval(secs => :span), inputs, probability, latency_ms, status, protocol, layout,
    numbers, categories
FROM prediction_log WHERE model_name = 'bench' AND id > :after ORDER BY id LIMIT :n
"""


def _fill_log(url: str, rows: int, *, typed: bool = True, append: bool = False) -> None:
    """Write ``rows`` prediction-log rows of model ``bench`` in bulk (COPY on PostgreSQL); ``typed``: with
    the typed copy of the inputs on PostgreSQL, as the serving flow writes them (predictions/typed.py).
    ``append``: rows added to a filled log, logged now (no VACUUM after them: as new rows of a live log).
    On PostgreSQL a log of more than ``DISTINCT_ROWS`` rows writes that many from Python and copies them
    in SQL (``INSERT ... SELECT``: minutes instead of half an hour for 10M rows; the values repeat)."""
    from datetime import UTC, datetime, timedelta

    import orjson
    from sqlalchemy import text

    from core.database import open_database
    from predictions.service import new_prediction_id
    from predictions.typed import encode_rows, make_layout

    db = open_database(url, upgrade=True)  # a scratch database: create its schema
    total = rows
    if db.engine.dialect.name == "postgresql" and not append:
        rows = min(rows, DISTINCT_ROWS)
    cols = window_columns(rows)
    p = predictions(rows, seed=4).tolist()
    names = list(cols)
    categorical = [n for n in names if cols[n].dtype.kind not in "fi"]
    known = [sorted(set(cols[n].tolist()) - {None}) for n in categorical]  # as the contract lists them
    layout = make_layout([n for n in names if n not in categorical], categorical, known)
    typed = typed and db.engine.dialect.name == "postgresql"
    if typed:
        with db.engine.begin() as conn:
            numeric_json, categorical_json, known_json = layout.as_json()
            conn.execute(
                text(
                    "INSERT INTO prediction_log_layouts (id, numeric, categorical, categories) "
                    "VALUES (:i, :n, :c, :k) ON CONFLICT DO NOTHING"
                ),
                {"i": layout.id, "n": numeric_json, "c": categorical_json, "k": known_json},
            )
    t0 = datetime.now(UTC) - timedelta(seconds=0 if append else total / 1000)
    step = 50_000
    for lo in range(0, rows, step):
        hi = min(lo + step, rows)
        docs = [
            {n: None if isinstance(v, float) and v != v else v for n, v in zip(names, vals, strict=True)}
            for vals in zip(*(cols[n][lo:hi].tolist() for n in names), strict=True)
        ]
        copies = encode_rows(layout, docs) if typed else None
        batch: list[tuple[Any, ...]] = [
            (
                new_prediction_id(),
                "bench",
                "bench",
                1,
                t0 + timedelta(milliseconds=lo + j),
                orjson.dumps(doc).decode(),
                p[lo + j],
                1.0,
                "ok",
                "v1",
            )
            + (() if copies is None else (layout.id, bytes.fromhex(copies[j][0]), copies[j][1]))
            for j, doc in enumerate(docs)
        ]
        cols_sql = "prediction_id, request_id, model_name, model_version, logged_at, inputs, probability, "
        cols_sql += "latency_ms, status, protocol" + (", layout, numbers, categories" if copies else "")
        raw = db.engine.raw_connection()
        try:
            if db.engine.dialect.name == "postgresql":
                pg: Any = raw.driver_connection
                with pg.cursor() as cur, cur.copy(f"COPY prediction_log ({cols_sql}) FROM STDIN") as copy:
                    for row in batch:
                        copy.write_row(row)
            else:
                cur = raw.cursor()
                cur.executemany(
                    f"INSERT INTO prediction_log ({cols_sql}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(*r[:4], r[4].strftime("%Y-%m-%d %H:%M:%S.%f"), *r[5:]) for r in batch],
                )
                cur.close()
            raw.commit()
        finally:
            raw.close()
    with db.engine.connect() as conn:
        copied = rows
        while copied < total:
            n = min(rows, total - copied)
            after = conn.execute(text("SELECT max(id) FROM prediction_log")).scalar_one() - rows
            conn.execute(text(_REPEAT_SQL), {"span": rows / 1000, "after": after, "n": n})
            conn.commit()
            copied += n
    if not append:  # steady state, as autovacuum leaves a live table: statistics, hint bits, visibility map
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                text("VACUUM ANALYZE prediction_log" if db.engine.dialect.name == "postgresql" else "ANALYZE")
            )
    db.dispose()


@contextlib.contextmanager
def scratch_database(kind: str, pg_url: str, keep: str | None = None) -> Any:
    """A migrated scratch database URL: a SQLite file, or a PostgreSQL schema dropped afterwards (``keep``:
    the schema of that name, made when missing and left in place)."""
    import tempfile
    import uuid

    from sqlalchemy import create_engine, text

    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="dw-bench-") as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    schema = keep or f"bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    try:
        yield f"{pg_url}?options=-csearch_path%3D{schema}"
    finally:
        if keep is None:
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def _label_log(db: Any, fraction: float) -> None:
    """Feedback for every ``round(1 / fraction)``-th row of the log (label 1 with the row's probability as
    chance), unless the log has labels already; then VACUUM ANALYZE (as autovacuum leaves the tables)."""
    from sqlalchemy import text

    every = max(round(1 / fraction), 1)
    with db.engine.connect() as conn:
        if conn.execute(text("SELECT count(*) FROM prediction_feedback")).scalar_one():
            print("  the log has labels already")
            return
        t0 = time.perf_counter()
        n = conn.execute(
            text(
                # what record_feedback stores: the label and the copies of its log row (migration 0015)
                "INSERT INTO prediction_feedback (prediction_id, logged_at, model_name, label, received_at, "
                "log_id, probability, model_version, status) "
                "SELECT prediction_id, logged_at, model_name, (random() < probability)::int, "
                "logged_at + interval '1 hour', id, probability, model_version, status "
                "FROM prediction_log WHERE id % :every = 0"
            ),
            {"every": every},
        ).rowcount
        conn.commit()
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("VACUUM ANALYZE prediction_feedback")
        )
    print(f"  labelled {n} rows (every {every}th) in {time.perf_counter() - t0:.1f} s (not timed)")


def bench_sketch_cache(
    *, db: Any, url: str, profile: Any, spec: Any, reader: str, typed: bool, uncached: bool = True
) -> None:
    """The sketch cache on one window (PostgreSQL): a cold run (empty cache), a warm run (the same window),
    then the steady state of a monitor: 1 % new rows appended, the report again (a moving window); each a
    full report (read + evaluate), beside the same report without the cache."""
    from sqlalchemy import delete

    from core.config import Settings
    from monitors.log_window import SketchCache
    from monitors.models import WindowSketchBlock

    cache = SketchCache(db.engine, block_ids=Settings.model_fields["monitor_sketch_block_ids"].default)
    with db.session() as session:
        session.execute(delete(WindowSketchBlock))
    report = partial(db_report, engine=db.engine, profile=profile, spec=spec, reader=reader)
    stages = [("cold (empty cache)", None), ("warm (same window)", None), ("moving (+1 % rows)", spec.rows)]
    for label, append in stages:
        if append:
            t0 = time.perf_counter()
            _fill_log(url, max(append // 100, 1), typed=typed, append=True)
            print(f"  appended {max(append // 100, 1)} rows in {time.perf_counter() - t0:.1f} s (not timed)")
        load = os.getloadavg()[0]
        window, result = measure(f"cached: {label}", partial(report, cache=cache))
        print(
            f"    load average {load:.1f}; blocks from the cache {window.cached_blocks}, read "
            f"{window.counted_blocks}, chunks {window.chunks}; dataset drifted={result.drifted}"
        )
        print(f"    seconds per step: {window.cache_seconds}")
    if uncached:
        load = os.getloadavg()[0]
        _, result = measure("no cache, same window", report)
        print(f"    load average {load:.1f}; dataset drifted={result.drifted}")
    with db.session() as session:
        stored = session.query(WindowSketchBlock).count()
    print(f"  sketch cache: {stored} blocks stored")


def bench_database(
    kind: str,
    *,
    profile: Any,
    windows: list[int],
    pg_url: str,
    readers: list[str] | None = None,
    typed: bool = True,
    incremental: bool = False,
    keep: str | None = None,
    labels: float = 0.0,
) -> None:
    from sqlalchemy import text

    from core.database import open_database
    from monitors.log_window import read_window
    from predictions.windows import WindowSpec

    with scratch_database(kind, pg_url, keep if kind == "postgresql" else None) as url:
        db = open_database(url, upgrade=True)  # a scratch database: create its schema
        with db.engine.connect() as conn:
            logged = conn.execute(text("SELECT count(*) FROM prediction_log")).scalar_one()
        if logged >= max(windows):
            print(f"{kind}: the kept schema {keep} holds {logged} log rows already")
        else:
            t0 = time.perf_counter()
            _fill_log(url, max(windows), typed=typed)
            how = "with the typed copy" if typed and kind == "postgresql" else "JSON documents only"
            took = time.perf_counter() - t0
            print(f"{kind}: wrote {max(windows)} log rows ({how}) in {took:.1f} s (not timed below)")
        if labels > 0:
            _label_log(db, labels)
        for rows in windows:
            spec = WindowSpec(rows=rows)
            for reader in readers or ["auto"]:
                if kind == "sqlite" and reader in ("blocks", "typed", "aggregate"):
                    continue
                load = os.getloadavg()[0]
                print(f"window from {kind}: last {rows} rows, reader {reader} (load average {load:.1f})")
                window = measure(
                    "read + sketch (from the log)",
                    partial(
                        read_window,
                        engine=db.engine,
                        profile=profile,
                        model_name="bench",
                        spec=spec,
                        reader=reader,
                    ),
                )
                assert window.rows == rows, (window.rows, rows)
                report = measure(
                    "evaluate (all tests, report)", partial(evaluate, profile=profile, sketch=window.sketch)
                )
                measure(
                    "full report from the database",
                    partial(db_report, engine=db.engine, profile=profile, spec=spec, reader=reader),
                )
                if incremental and kind == "postgresql" and reader in ("auto", "typed", "blocks"):
                    bench_sketch_cache(db=db, url=url, profile=profile, spec=spec, reader=reader, typed=typed)
                print(
                    f"  -> reader={window.reader}, chunks={window.chunks}, dataset drifted={report.drifted}, "
                    f"{report.dataset.n_drifted}/{report.dataset.n_features} features, multivariate drifted="
                    f"{report.multivariate.drifted if report.multivariate else None}"
                )
                del window, report
        db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--reference-rows", type=int, default=100_000)
    parser.add_argument("--db", nargs="*", choices=["sqlite", "postgresql"], default=["sqlite", "postgresql"])
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--skip-memory", action="store_true", help="Only the database stages.")
    parser.add_argument(
        "--readers",
        nargs="+",
        choices=["auto", "generic", "blocks", "typed", "aggregate"],
        default=["auto"],
        help="Window readers to time on each database (blocks, typed and aggregate: PostgreSQL only).",
    )
    parser.add_argument(
        "--pg-schema",
        metavar="NAME",
        help="PostgreSQL: fill (once) and keep this schema instead of a scratch one dropped at the end; a "
        "later run reuses its log when it holds enough rows.",
    )
    parser.add_argument(
        "--labels",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="PostgreSQL: give this fraction of the log's rows a label (feedback) before reading windows.",
    )
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="PostgreSQL: also time the sketch cache on each window: a cold run (empty cache), a warm run, "
        "and a moving window (1 %% new rows, then the report again).",
    )
    parser.add_argument(
        "--legacy-log",
        action="store_true",
        help="Write the log as before migration 0010 (JSON documents only, no typed copy): the typed reader "
        "then reads every range as blocks.",
    )
    parser.add_argument(
        "--evidently",
        metavar="PYTHON",
        help="Interpreter of a throwaway venv with evidently, pandas<3 (e.g. /tmp/evidently-venv/bin/python)"
        ": run its DataDriftPreset on the same in-memory data, side by side.",
    )
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
    raw: dict[str, Any] = measure(
        "build profile",
        partial(build_reference_profile, ref, schema, predictions=predictions(args.reference_rows, seed=5)),
    )
    size = len(json.dumps(raw))
    profile = measure("parse profile", lambda: profile_from_dict(json.loads(json.dumps(raw))))
    print(f"  profile.json: {size / 1e6:.2f} MB")
    ref.clear()
    ours: dict[int, float] = {}
    for rows in [] if args.skip_memory else args.rows:
        print(f"window: {rows} rows (numeric columns shifted in half of the features)")
        cur = window_columns(rows)
        gc.collect()
        sketch = measure(
            "sketch (count on reference grids)", partial(sketch_columns, profile=profile, columns=cur)
        )
        report = measure("evaluate (all tests, report)", partial(evaluate, profile=profile, sketch=sketch))
        measure(
            "full report (sketch + evaluate)",
            partial(full_report, profile=profile, columns=cur),
        )
        ours[rows] = SECONDS["full report (sketch + evaluate)"]
        measure("report as JSON", partial(report_json, report))
        print(
            f"  -> dataset drifted={report.drifted}, {report.dataset.n_drifted}/{report.dataset.n_features} "
            f"features, multivariate drifted={report.multivariate.drifted if report.multivariate else None}"
        )
        del cur, sketch, report
    if args.evidently:
        bench_evidently(args.evidently, reference_rows=args.reference_rows, windows=args.rows, ours=ours)
    for kind in args.db:
        bench_database(
            kind,
            profile=profile,
            windows=sorted(args.rows),
            pg_url=args.pg_url,
            readers=args.readers,
            typed=not args.legacy_log,
            incremental=args.incremental,
            keep=args.pg_schema,
            labels=args.labels,
        )


# ------------------------------------------------------- offline stage (`driftwarden drift` on files)


def coded_columns(cols: Columns) -> dict[str, Any]:
    """The columns as the offline path holds them: text as dictionary codes, numbers unchanged."""
    from core.tabular import CodedColumn

    out: dict[str, Any] = {}
    for name, col in cols.items():
        if col.dtype == object:
            cats, codes = np.unique(col, return_inverse=True)
            out[name] = CodedColumn(codes=codes.astype(np.int32), categories=cats.astype(object))
        else:
            out[name] = col
    return out


def profile_and_compare(*, reference: Any, schema: ModelSchema, current: Any) -> Any:
    """Reference profile, then sketch + evaluate of the current columns: the offline work, in memory."""
    from monitors.engine import compare

    profile = profile_from_dict(build_reference_profile(reference, schema))
    return compare(profile=profile, columns=current)


# A small interpreter starts the command and reports its rusage: a child forked straight from this process
# would count this process's pages (the benchmark's columns) in its peak RSS until it execs.
LAUNCHER = """
import json, os, subprocess, sys
with open(sys.argv[1], "w") as out:
    proc = subprocess.Popen(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime,
                  "rss_mb": usage.ru_maxrss / 1024}))
"""


def run_cli(args: list[str]) -> tuple[float, float, float, int, str]:
    """Run ``driftwarden ARGS``: wall and CPU seconds, its peak RSS in MB, exit code, verdict line."""
    import subprocess
    import sys
    import tempfile

    exe = Path(sys.executable).with_name("driftwarden")
    with tempfile.NamedTemporaryFile("r", suffix=".out") as out:
        t0 = time.perf_counter()
        launched = subprocess.run(
            [sys.executable, "-c", LAUNCHER, out.name, str(exe), *args],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - t0  # includes the launcher's start (~20 ms)
        text = Path(out.name).read_text()
    usage = json.loads(launched.stdout)
    lines = [line for line in text.splitlines() if "features drifted" in line] or text.splitlines()[-1:]
    return wall, usage["cpu"], usage["rss_mb"], usage["code"], lines[-1] if lines else ""


def offline_main(argv: list[str]) -> None:
    """``bench/drift.py offline``: `driftwarden drift` on two Parquet (or CSV) files of N rows x 25 features,
    and the same work (reference profile + compare) on in-memory columns."""
    import statistics
    import tempfile

    from core.tabular import write_table

    parser = argparse.ArgumentParser(prog="bench/drift.py offline", description=offline_main.__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="Rows of REFERENCE and of CURRENT.")
    parser.add_argument("--format", choices=["parquet", "csv"], nargs="+", default=["parquet"])
    parser.add_argument("--repeat", type=int, default=3, help="CLI runs per format (the median is printed).")
    parser.add_argument("--skip-memory", action="store_true", help="Only the CLI runs.")
    args = parser.parse_args(argv)
    n = args.rows
    print(f"offline: {n} vs {n} rows, {N_NUMERIC} numeric + {N_CATEGORICAL} categorical features")
    ref, cur = make_columns(n, seed=1), window_columns(n)
    schema = ModelSchema(
        features=tuple(infer_feature(k, c) for k, c in ref.items()),
        outputs=(OutputSpec(name="p"),),
        target="",
    )
    if not args.skip_memory:
        for label, (r, c) in (
            ("text as objects", (ref, cur)),
            ("text as codes (the offline path)", (coded_columns(ref), coded_columns(cur))),
        ):
            report = measure(
                f"profile + compare, {label}",
                partial(profile_and_compare, reference=r, schema=schema, current=c),
            )
            print(f"    -> {report.dataset.n_drifted}/{report.dataset.n_features} features drifted")
    with tempfile.TemporaryDirectory(prefix="dw-offline-") as tmp:
        for fmt in args.format:
            paths = [
                write_table(cols, Path(tmp) / f"{name}.{fmt}") for name, cols in (("ref", ref), ("cur", cur))
            ]
            mb = sum(p.stat().st_size for p in paths) / 1e6
            runs = [run_cli(["drift", *map(str, paths)]) for _ in range(args.repeat)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            rss = statistics.median(r[2] for r in runs)
            print(
                f"  driftwarden drift ({fmt}, {mb:.0f} MB on disk): wall {wall:.2f} s (runs "
                f"{', '.join(f'{r[0]:.2f}' for r in runs)}), CPU {cpu:.2f} s, peak RSS {rss:.0f} MB, "
                f"exit {runs[-1][3]}: {runs[-1][4]}",
                flush=True,
            )
            for p in paths:
                p.unlink()


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["offline"]:
        offline_main(sys.argv[2:])
    else:
        main()
