"""Drift-report benchmark: 25 features (20 numeric, 5 categorical), windows of 10k/100k/1M predictions,
in memory and read from the prediction log (SQLite and PostgreSQL).

Run: ``.venv/bin/python bench/drift.py [--rows 10000 100000 1000000] [--reference-rows 100000]
[--db sqlite postgresql] [--pg-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
[--request-rows 1 32] [--labels 0.1] [--incremental] [--pg-schema NAME]``.
Prints wall seconds, the process's CPU seconds and peak memory growth (MB above the RSS at the start of
the stage, from the kernel's VmHWM after resetting it through /proc/self/clear_refs) for each stage; the
load average before each database window.

Database stages: the largest window's predictions are first written (bulk, not timed) to a scratch SQLite
file or a scratch PostgreSQL schema (dropped at the end) as the serving flow logs them: one row of
``prediction_batches`` per request of ``--request-rows`` predictions (1: every request a single prediction,
the log's worst case; 32: a batch client), with the inputs' typed copy, and with ``--labels`` a label for that
fraction of the predictions; one log per ``--request-rows`` value. Then each window (the last N predictions of
the model) is read in chunks into a sketch and evaluated: the path ``POST /v1/models/{name}/monitors:run``
takes. With ``--incremental`` (PostgreSQL), each window is then reported through the sketch cache
(``monitors.log_window.SketchCache``): cold (empty cache), warm (the same window again) and moving (1 % of
the window appended as new predictions, then the report again: a monitor's steady state), and without the
cache on the same window; then the summary and block statistics every cached run reads first, in one scan
and as two queries, in interleaved pairs (``bench_summary``). At the end, the targets beside the figures
measured (1M predictions, 10 % labelled, PostgreSQL: cold <= 0.8 s, uncached <= 0.7 s; 10M uncached <= 6 s,
with flat memory).

``bench/drift.py alibi [--rows 1000000 100000] [--repeat 3] [--alibi-python PATH]``: driftwarden's whole
path (schema inference + reference profile + compare at the defaults, text as text as ``read_table`` gives
it) against alibi-detect 0.13's ``TabularDrift`` (fit + predict, the 5 categorical columns as codes in
``categories_per_feature``) on the same data, in interleaved repeats (wall and CPU seconds of all threads:
the CPU varies less with the load of a shared machine); alibi-detect runs in a scratch virtualenv's
interpreter (never a dependency; the script says how to make one), each run in a subprocess on the data
saved to a file; both with numpy set as ``import driftwarden`` sets it (``core/numpy_settings.py``: one
OpenBLAS thread, no huge pages; the environment's values win). The medians are printed side by side with
their ratio (targets: 5x at 1M, 3x at 100k).
``bench/drift.py offline``: ``driftwarden drift`` on Parquet files (see :func:`offline_main`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from core.numpy_settings import numpy_settings

if sys.argv[1:2] == ["alibi"]:
    # both sides with numpy set as `import driftwarden` and `driftwarden drift` set it (one OpenBLAS thread,
    # no huge pages: core/numpy_settings.py), before numpy loads; alibi-detect's subprocess inherits them
    numpy_settings()

import numpy as np  # noqa: E402

from core.tabular import Columns  # noqa: E402
from monitors.engine import evaluate, sketch_columns  # noqa: E402
from monitors.profile import build_reference_profile, profile_from_dict  # noqa: E402
from registry.schema import ModelSchema, OutputSpec, infer_feature  # noqa: E402

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


def db_report(*, engine: Any, profile: Any, spec: Any, cache: Any = None) -> Any:
    """Read a window from the database and evaluate it: what one monitor run does."""
    from monitors.log_window import read_window

    window = read_window(engine=engine, profile=profile, model_name="bench", spec=spec, cache=cache)
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


DISTINCT_ROWS = 1_000_000  # PostgreSQL: a larger log repeats these predictions (copied in SQL, see fill_log)
FILL_STEP = 50_000  # predictions encoded and written per pass
LOG_TABLE = "prediction_batches"
FEEDBACK_TABLE = "prediction_feedback"


def _repeat_sql() -> tuple[str, str]:
    """INSERT ... SELECT of batches ``lo..hi`` (and their labels) again, ``shift`` ids and ``span`` seconds
    later (prefixes unchanged: the keys hold the time)."""
    from predictions.models import FEEDBACK_COLUMNS, LOG_TABLE_COLUMNS

    later = "{} + make_interval(secs => :span)"
    batches = ", ".join(later.format(c) if c == "logged_at" else c for c in LOG_TABLE_COLUMNS)
    labels = ", ".join(
        later.format(c) if c in ("logged_at", "received_at") else "log_id + :shift" if c == "log_id" else c
        for c in FEEDBACK_COLUMNS
    )
    return (
        f"INSERT INTO {LOG_TABLE} (id, {', '.join(LOG_TABLE_COLUMNS)}) OVERRIDING SYSTEM VALUE "
        f"SELECT id + :shift, {batches} FROM {LOG_TABLE} "
        "WHERE model_name = 'bench' AND id BETWEEN :lo AND :hi",
        f"INSERT INTO {FEEDBACK_TABLE} ({', '.join(FEEDBACK_COLUMNS)}) "
        f"SELECT {labels} FROM {FEEDBACK_TABLE} "
        "WHERE model_name = 'bench' AND log_id BETWEEN :lo AND :hi",
    )


def _sqlite_time(moment: Any) -> str:
    """A timestamp as SQLAlchemy stores it on SQLite (naive UTC text)."""
    from datetime import UTC

    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def fill_log(url: str, rows: int, *, request_rows: int, labels: float = 0.0, append: bool = False) -> int:
    """Write ``rows`` predictions of model ``bench`` as the serving flow logs them: one ``prediction_batches``
    row per request of ``request_rows`` predictions (the inputs' typed copy, the outputs; ids given here, in
    order), and a label for every ``round(1 / labels)``-th prediction (the feedback row ``record_feedback``
    writes: the label with the copies of its prediction); COPY on PostgreSQL. ``append``: predictions added to
    a filled log, logged now, unlabelled (no VACUUM after them: as new rows of a live log). On PostgreSQL a
    log of more than ``DISTINCT_ROWS`` predictions writes that many from Python and copies their batches (and
    labels) in SQL (``INSERT ... SELECT``: minutes instead of half an hour for 10M; the values repeat).
    Returns the labels written."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import text

    from core.database import open_database
    from predictions.models import FEEDBACK_COLUMNS, LOG_TABLE_COLUMNS
    from predictions.service import new_prediction_ids
    from predictions.typed import encode_columns, make_layout

    db = open_database(url, upgrade=True)  # a scratch database: create its schema
    pg = db.engine.dialect.name == "postgresql"
    total = rows
    if pg and not append:
        rows = min(rows, DISTINCT_ROWS)
    cols = window_columns(rows)
    p = predictions(rows, seed=4)
    chance = np.random.default_rng(6).random(rows)
    names = list(cols)
    categorical = [n for n in names if cols[n].dtype.kind not in "fi"]
    known = [sorted(set(cols[n].tolist()) - {None}) for n in categorical]  # as the contract lists them
    layout = make_layout([n for n in names if n not in categorical], categorical, known)
    every = max(round(1 / labels), 1) if labels > 0 and not append else 0
    with db.engine.begin() as conn:
        numeric_json, categorical_json, known_json = layout.as_json()
        conn.execute(
            text(
                "INSERT INTO prediction_log_layouts (id, numeric, categorical, categories) "
                "VALUES (:i, :n, :c, :k) ON CONFLICT DO NOTHING"
            ),
            {"i": layout.id, "n": numeric_json, "c": categorical_json, "k": known_json},
        )
        first_id = int(conn.execute(text(f"SELECT coalesce(max(id), 0) FROM {LOG_TABLE}")).scalar_one()) + 1
    t0 = datetime.now(UTC) - timedelta(seconds=0 if append else total / 1000)
    width = 8 * layout.width
    step = max(request_rows, FILL_STEP // request_rows * request_rows)
    batch_cols = ", ".join(("id", *LOG_TABLE_COLUMNS))
    feedback_cols = ", ".join(FEEDBACK_COLUMNS)
    next_id = first_id
    labelled = 0
    for lo in range(0, rows, step):
        hi = min(lo + step, rows)
        encoded = encode_columns(layout, {n: cols[n][lo:hi].tolist() for n in names}, hi - lo)
        assert encoded is not None
        outputs = p[lo:hi].astype("<f8").tobytes()
        batches: list[tuple[Any, ...]] = []
        feedback: list[tuple[Any, ...]] = []
        for start in range(0, hi - lo, request_rows):
            end = min(start + request_rows, hi - lo)
            first = new_prediction_ids(end - start)[0]
            prefix, low = first[:-3], int(first[-3:], 16)
            when = t0 + timedelta(milliseconds=lo + start)
            batches.append(
                (
                    next_id,
                    first,
                    end - start,
                    "bench",
                    "bench",
                    1,
                    when,
                    1.0,
                    "ok",
                    "v2",
                    "serve",
                    layout.id,
                    encoded.data[start * width : end * width],
                    encoded.categories(start, end),
                    outputs[start * 8 : end * 8],
                    None,
                    None,
                    None,
                )
            )
            if every:
                for pos in range(-(lo + start) % every, end - start, every):
                    i = lo + start + pos
                    feedback.append(
                        (
                            prefix + f"{low + pos:03x}",
                            when,
                            "bench",
                            float(chance[i] < p[i]),
                            when + timedelta(hours=1),
                            next_id,
                            pos,
                            float(p[i]),
                            1,
                            "ok",
                        )
                    )
            next_id += 1
        labelled += len(feedback)
        raw = db.engine.raw_connection()
        try:
            if pg:
                driver: Any = raw.driver_connection
                with driver.cursor() as cur:
                    with cur.copy(f"COPY {LOG_TABLE} ({batch_cols}) FROM STDIN") as copy:
                        for row in batches:
                            copy.write_row(row)
                    if feedback:
                        with cur.copy(f"COPY {FEEDBACK_TABLE} ({feedback_cols}) FROM STDIN") as copy:
                            for row in feedback:
                                copy.write_row(row)
            else:
                cur = raw.cursor()
                cur.executemany(
                    f"INSERT INTO {LOG_TABLE} ({batch_cols}) VALUES ({', '.join('?' * len(batches[0]))})",
                    [(*r[:6], _sqlite_time(r[6]), *r[7:]) for r in batches],
                )
                if feedback:
                    cur.executemany(
                        f"INSERT INTO {FEEDBACK_TABLE} ({feedback_cols}) VALUES ({', '.join('?' * 10)})",
                        [(r[0], _sqlite_time(r[1]), *r[2:4], _sqlite_time(r[4]), *r[5:]) for r in feedback],
                    )
                cur.close()
            raw.commit()
        finally:
            raw.close()
    with db.engine.connect() as conn:
        distinct = next_id - first_id  # the batches written from Python
        copied = rows
        repeat_batches, repeat_labels = _repeat_sql()
        while copied < total:  # whole batches of the distinct ones, ``shift`` ids and their time span later
            n = min(distinct, -(-(total - copied) // request_rows))
            shift = next_id - first_id
            params = {"shift": shift, "span": (copied / 1000), "lo": first_id, "hi": first_id + n - 1}
            conn.execute(text(repeat_batches), params)
            if every:
                labelled += conn.execute(text(repeat_labels), params).rowcount
            conn.commit()
            copied += int(
                conn.execute(
                    text(f"SELECT coalesce(sum(size), 0) FROM {LOG_TABLE} WHERE id BETWEEN :lo AND :hi"),
                    {"lo": first_id, "hi": first_id + n - 1},
                ).scalar_one()
            )
            next_id += n
        if pg:  # the ids were given: the sequence goes past them
            conn.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence('{LOG_TABLE}', 'id'), "
                    f"(SELECT max(id) FROM {LOG_TABLE}))"
                )
            )
            conn.commit()
    if not append:  # steady state, as autovacuum leaves a live table: statistics, hint bits, visibility map
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                text(f"VACUUM ANALYZE {LOG_TABLE}, {FEEDBACK_TABLE}" if pg else "ANALYZE")
            )
    db.dispose()
    return labelled


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


def bench_sketch_cache(
    *, db: Any, url: str, profile: Any, spec: Any, request_rows: int, uncached: bool = True
) -> None:
    """The sketch cache on one window (PostgreSQL): a cold run (empty cache), a warm run (the same window),
    then the steady state of a monitor: 1 % new predictions appended, the report again (a moving window);
    each a full report (read + evaluate), beside the same report without the cache."""
    from sqlalchemy import delete

    from core.config import Settings
    from monitors.log_window import SketchCache
    from monitors.models import WindowSketchBlock

    cache = SketchCache(db.engine, block_ids=Settings.model_fields["monitor_sketch_block_ids"].default)
    with db.session() as session:
        session.execute(delete(WindowSketchBlock))
    report = partial(db_report, engine=db.engine, profile=profile, spec=spec)
    stages = [("cold (empty cache)", None), ("warm (same window)", None), ("moving (+1 % rows)", spec.rows)]
    for label, append in stages:
        if append:
            t0 = time.perf_counter()
            n = max(append // 100, 1)
            fill_log(url, n, request_rows=request_rows, append=True)
            print(f"  appended {n} predictions in {time.perf_counter() - t0:.1f} s (not timed)")
        load = os.getloadavg()[0]
        window, result = measure(f"cached: {label}", partial(report, cache=cache))
        print(
            f"    load average {load:.1f}; blocks from the cache {window.cached_blocks}, read "
            f"{window.counted_blocks}, chunks {window.chunks}, labelled {window.labelled}; dataset "
            f"drifted={result.drifted}"
        )
        print(f"    seconds per step: {window.cache_seconds}")
    if uncached:
        load = os.getloadavg()[0]
        _, result = measure("no cache, same window", report)
        print(f"    load average {load:.1f}; dataset drifted={result.drifted}")
    with db.session() as session:
        stored = session.query(WindowSketchBlock).count()
    print(f"  sketch cache: {stored} blocks stored")
    bench_summary(db=db, spec=spec, block_ids=cache.block_ids, request_rows=request_rows)


def bench_summary(*, db: Any, spec: Any, block_ids: int, request_rows: int, pairs: int = 6) -> None:
    """What every cached run reads first: the window's summary and block statistics, in one scan
    (``summarize_blocks``) against the two queries apart (``summarize_window`` + ``block_stats``), in
    interleaved pairs on the same window (the medians printed; both give the same answer)."""
    import statistics

    from monitors.sketch_cache import block_span
    from predictions.windows import block_stats, mean_size, summarize_blocks, summarize_window

    engine = db.engine
    span = block_span(block_ids, mean_size(engine=engine, model_name="bench", spec=spec))
    one: list[float] = []
    two: list[float] = []
    for _ in range(pairs):
        t0 = time.perf_counter()
        summary, stats = summarize_blocks(engine=engine, model_name="bench", spec=spec, block_ids=span)
        one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        apart = summarize_window(engine=engine, model_name="bench", spec=spec)
        assert apart is not None
        apart_stats = block_stats(engine=engine, summary=apart, block_ids=span)
        two.append(time.perf_counter() - t0)
        assert (summary, stats) == (apart, apart_stats)
    print(
        f"  summary + block statistics ({request_rows} per request, blocks of {span} ids, {pairs} "
        f"interleaved pairs, load {os.getloadavg()[0]:.1f}): one scan {statistics.median(one):.3f} s, "
        f"two queries {statistics.median(two):.3f} s (medians)"
    )


# The targets (PostgreSQL, 10 % of the predictions labelled): window rows -> stage -> seconds
TARGETS: dict[int, dict[str, float]] = {
    1_000_000: {"cached: cold (empty cache)": 0.8, "full report from the database": 0.7},
    10_000_000: {"full report from the database": 6.0},
}
TARGET_LINES: list[str] = []


def _check_targets(kind: str, rows: int, request_rows: int, labels: float) -> None:
    """Each target of this window beside its measured figure (PostgreSQL only)."""
    if kind != "postgresql":
        return
    for stage, limit in TARGETS.get(rows, {}).items():
        took = SECONDS.get(stage)
        if took is None:
            continue
        verdict = "ok" if took <= limit else "MISSED"
        TARGET_LINES.append(
            f"  {rows:>10,} predictions, {request_rows:>3} per request, {labels:.0%} labelled: {stage} "
            f"{took:.3f} s (target <= {limit} s) {verdict}"
        )


def bench_database(
    kind: str,
    *,
    profile: Any,
    windows: list[int],
    pg_url: str,
    request_rows: int,
    incremental: bool = False,
    keep: str | None = None,
    labels: float = 0.0,
) -> None:
    from sqlalchemy import text

    from core.database import open_database
    from monitors.log_window import read_window
    from predictions.windows import WindowSpec

    keep = f"{keep}_r{request_rows}" if keep and kind == "postgresql" else None
    with scratch_database(kind, pg_url, keep) as url:
        db = open_database(url, upgrade=True)  # a scratch database: create its schema
        with db.engine.connect() as conn:
            logged = conn.execute(text(f"SELECT coalesce(sum(size), 0) FROM {LOG_TABLE}")).scalar_one()
            batches = conn.execute(text(f"SELECT count(*) FROM {LOG_TABLE}")).scalar_one()
            labelled = conn.execute(text(f"SELECT count(*) FROM {FEEDBACK_TABLE}")).scalar_one()
        if logged >= max(windows):
            print(
                f"{kind}: the kept schema {keep} holds {logged} predictions in {batches} batches already "
                f"({labelled} labelled)"
            )
        else:
            t0 = time.perf_counter()
            labelled = fill_log(url, max(windows), request_rows=request_rows, labels=labels)
            took = time.perf_counter() - t0
            print(
                f"{kind}: wrote {max(windows)} predictions, {request_rows} per request (batch row), "
                f"{labelled} labelled, in {took:.1f} s (not timed below)"
            )
        for rows in windows:
            spec = WindowSpec(rows=rows)
            load = os.getloadavg()[0]
            print(
                f"window from {kind}: last {rows} predictions, {request_rows} per request "
                f"(load average {load:.1f})"
            )
            window = measure(
                "read + sketch (from the log)",
                partial(read_window, engine=db.engine, profile=profile, model_name="bench", spec=spec),
            )
            assert window.rows == rows, (window.rows, rows)
            report = measure(
                "evaluate (all tests, report)", partial(evaluate, profile=profile, sketch=window.sketch)
            )
            measure(
                "full report from the database",
                partial(db_report, engine=db.engine, profile=profile, spec=spec),
            )
            if incremental and kind == "postgresql":
                bench_sketch_cache(db=db, url=url, profile=profile, spec=spec, request_rows=request_rows)
            print(
                f"  -> reader={window.reader}, chunks={window.chunks}, labelled={window.labelled}, dataset "
                f"drifted={report.drifted}, {report.dataset.n_drifted}/{report.dataset.n_features} features, "
                f"multivariate drifted={report.multivariate.drifted if report.multivariate else None}"
            )
            _check_targets(kind, rows, request_rows, labelled / max(logged, max(windows)))
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
        "--request-rows",
        type=int,
        nargs="+",
        default=[1, 32],
        metavar="N",
        help="Predictions per request, i.e. per row of prediction_batches, in the log written (one log per "
        "value, each read through every window).",
    )
    parser.add_argument(
        "--pg-schema",
        metavar="NAME",
        help="PostgreSQL: fill (once) and keep this schema (NAME_r<request rows>) instead of a scratch one "
        "dropped at the end; a later run reuses its log when it holds enough predictions.",
    )
    parser.add_argument(
        "--labels",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="Give this fraction of the log's predictions a label (feedback, written with the log).",
    )
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="PostgreSQL: also time the sketch cache on each window: a cold run (empty cache), a warm run, "
        "and a moving window (1 %% new predictions, then the report again).",
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
        for request_rows in args.request_rows:
            bench_database(
                kind,
                profile=profile,
                windows=sorted(args.rows),
                pg_url=args.pg_url,
                request_rows=request_rows,
                incremental=args.incremental,
                keep=args.pg_schema,
                labels=args.labels,
            )
    if TARGET_LINES:
        print("targets (PostgreSQL; the issue's are with 10 % labelled):")
        print("\n".join(TARGET_LINES))


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


def code_root() -> Path:
    """The folder holding the packages this benchmark imports (a worktree's, not the installed project's)."""
    import core

    return Path(core.__file__).resolve().parent.parent


def run_cli(args: list[str], *, bytecode: str | None = None) -> tuple[float, float, float, int, str]:
    """Run ``driftwarden ARGS`` (``python -m service.cli``, the console script's entry point, on the code
    of :func:`code_root`): wall and CPU seconds, its peak RSS in MB, exit code, verdict line. ``bytecode``:
    a folder where the child keeps its compiled modules (``PYTHONPYCACHEPREFIX``) even when the environment
    says not to write them (``PYTHONDONTWRITEBYTECODE``), as an installed package has them: else each run
    compiles the project's ~60 modules from source again (~0.15 CPU-seconds)."""
    import subprocess
    import sys
    import tempfile

    root = str(code_root())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    if bytecode is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = bytecode
    with tempfile.NamedTemporaryFile("r", suffix=".out") as out:
        t0 = time.perf_counter()
        launched = subprocess.run(
            # -P: the working directory is not put first on the path (else a worktree run from its root
            # would import that root's code whatever PYTHONPATH says)
            [sys.executable, "-c", LAUNCHER, out.name, sys.executable, "-P", "-m", "service.cli", *args],
            capture_output=True,
            text=True,
            check=True,
            env=env,
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
    parser.add_argument(
        "--compile-each-run",
        action="store_true",
        help="Let each CLI run compile the modules from source when PYTHONDONTWRITEBYTECODE is set (by "
        "default they are compiled once, by an untimed first run, into a scratch folder, as an installed "
        "package has them).",
    )
    args = parser.parse_args(argv)
    n = args.rows
    print(
        f"offline: {n} vs {n} rows, {N_NUMERIC} numeric + {N_CATEGORICAL} categorical features; the CLI "
        f"runs the code in {code_root()} (load {os.getloadavg()[0]:.1f})"
    )
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
            cache = None if args.compile_each_run else str(Path(tmp) / "bytecode")
            if cache is not None:
                run_cli(["drift", *map(str, paths)], bytecode=cache)  # untimed: compiles the modules once
            runs = [run_cli(["drift", *map(str, paths)], bytecode=cache) for _ in range(args.repeat)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            rss = statistics.median(r[2] for r in runs)
            print(
                f"  driftwarden drift ({fmt}, {mb:.0f} MB on disk): wall {wall:.2f} s (runs "
                f"{', '.join(f'{r[0]:.2f}' for r in runs)}), CPU {cpu:.2f} s (runs "
                f"{', '.join(f'{r[1]:.2f}' for r in runs)}), peak RSS {rss:.0f} MB, "
                f"exit {runs[-1][3]}: {runs[-1][4]}",
                flush=True,
            )
            for p in paths:
                p.unlink()


# ------------------------------------------------ against alibi-detect (`bench/drift.py alibi`)

ALIBI_PYTHON = "/work/scratch/alibi/bin/python"
ALIBI_VENV_HELP = (
    "alibi-detect is not a dependency of driftwarden: make a scratch virtualenv for it with\n"
    "  python3.11 -m venv /work/scratch/alibi && /work/scratch/alibi/bin/pip install 'alibi-detect==0.13.*'\n"
    "and pass its interpreter with --alibi-python (default {path})"
)

# Run by the scratch venv's interpreter: alibi-detect's TabularDrift (fit, then predict) on the same data,
# the categorical columns as integer codes named in categories_per_feature; prints seconds and the verdict.
ALIBI_SCRIPT = """
import sys, time
import numpy as np
from alibi_detect.cd import TabularDrift

data = np.load(sys.argv[1], allow_pickle=False)
x_ref, x_cur, n_cat = data["x_ref"], data["x_cur"], int(data["n_categorical"])
width = x_ref.shape[1]
categories = {j: None for j in range(width - n_cat, width)}
t0, c0 = time.perf_counter(), time.process_time()
detector = TabularDrift(x_ref, p_val=0.05, categories_per_feature=categories)
result = detector.predict(x_cur)
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
print(f"{dt:.4f} {cpu:.4f} {int(result['data']['is_drift'])}")
"""


def whole_path(*, reference: Columns, current: Columns) -> Any:
    """driftwarden's whole path at the defaults, from columns as ``core.tabular.read_table`` returns them
    (text as text): the reference's text coded once (``as_coded``), the schema inferred from it
    (``infer_features``), its profile, and the current columns compared with it (``compare`` codes their
    text)."""
    from core.tabular import as_coded
    from monitors.engine import compare
    from registry.schema import infer_features

    coded = {name: as_coded(values) for name, values in reference.items()}  # text coded once, shared
    schema = ModelSchema(features=infer_features(coded), outputs=(OutputSpec(name="p"),), target="")
    profile = profile_from_dict(build_reference_profile(coded, schema))
    return compare(profile=profile, columns=current)


def _as_matrix(cols: Columns, categories: dict[str, np.ndarray]) -> np.ndarray:
    """The columns as one float matrix, the numeric first, each text column as its index in ``categories``
    (the categories both sides share, so a code means the same value on both)."""
    out = np.empty((len(next(iter(cols.values()))), len(cols)))
    for j, (name, col) in enumerate(cols.items()):
        out[:, j] = np.searchsorted(categories[name], col) if name in categories else col
    return out


def alibi_main(argv: list[str]) -> None:
    """``bench/drift.py alibi``: driftwarden's whole path (schema inference + reference profile + compare)
    against alibi-detect's TabularDrift (fit + predict), on the same N x 25 reference and current data, in
    interleaved repeats; the medians side by side with their ratio."""
    import statistics
    import subprocess
    import tempfile

    parser = argparse.ArgumentParser(prog="bench/drift.py alibi", description=alibi_main.__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3, help="Runs of each side (medians are printed).")
    parser.add_argument(
        "--alibi-python",
        default=ALIBI_PYTHON,
        help=f"Interpreter of a scratch venv holding alibi-detect 0.13 (default {ALIBI_PYTHON}).",
    )
    parser.add_argument("--skip-alibi", action="store_true", help="Only driftwarden's side.")
    args = parser.parse_args(argv)
    if not args.skip_alibi and not Path(args.alibi_python).exists():
        raise SystemExit(f"{args.alibi_python} not found. " + ALIBI_VENV_HELP.format(path=ALIBI_PYTHON))
    targets = {1_000_000: 5.0, 100_000: 3.0}
    lines: list[str] = []
    whole_path(reference=make_columns(2_000, seed=1), current=window_columns(2_000))  # imports, untimed
    # (as alibi-detect's are: its script imports before its clock starts)
    for rows in args.rows:
        ref, cur = make_columns(rows, seed=1), window_columns(rows)
        print(
            f"{rows} vs {rows} rows, {N_NUMERIC} numeric + {N_CATEGORICAL} categorical features "
            f"(load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
        ours: list[float] = []
        theirs: list[float] = []
        our_cpu: list[float] = []
        their_cpu: list[float] = []
        with tempfile.TemporaryDirectory(prefix="dw-alibi-") as tmp:
            data = Path(tmp) / "data.npz"
            if not args.skip_alibi:
                cats = {n: np.unique(c) for n, c in ref.items() if c.dtype == object}
                cats = {n: np.unique(np.concatenate([v, np.unique(cur[n])])) for n, v in cats.items()}
                savez: Any = np.savez  # its stub types **kwds as the allow_pickle flag
                savez(
                    data,
                    x_ref=_as_matrix(ref, cats),
                    x_cur=_as_matrix(cur, cats),
                    n_categorical=np.array(len(cats)),
                )
            for k in range(args.repeat):
                gc.collect()
                t0, c0 = time.perf_counter(), time.process_time()
                report = whole_path(reference=ref, current=cur)
                ours.append(time.perf_counter() - t0)
                our_cpu.append(time.process_time() - c0)
                verdict = f"{report.dataset.n_drifted}/{report.dataset.n_features} features drifted"
                line = f"  run {k + 1}: driftwarden {ours[-1]:7.3f} s, cpu {our_cpu[-1]:6.3f} s ({verdict})"
                if not args.skip_alibi:
                    proc = subprocess.run(
                        [args.alibi_python, "-c", ALIBI_SCRIPT, str(data)],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if proc.returncode != 0:
                        tail = proc.stderr.strip().splitlines()[-1:]
                        raise SystemExit(
                            f"alibi-detect failed: {tail}. " + ALIBI_VENV_HELP.format(path=ALIBI_PYTHON)
                        )
                    seconds, cpu, drift = proc.stdout.split()[-3:]
                    theirs.append(float(seconds))
                    their_cpu.append(float(cpu))
                    line += f" | alibi-detect {theirs[-1]:7.3f} s, cpu {their_cpu[-1]:6.3f} s"
                    line += f" (drift={bool(int(drift))})"
                print(line, flush=True)
                del report
        mine = statistics.median(ours)
        if theirs:
            other = statistics.median(theirs)
            ratio = other / mine
            want = targets.get(rows)
            verdict = (
                "" if want is None else f" (target >= {want:.0f}x: {'ok' if ratio >= want else 'MISSED'})"
            )
            cpu_ratio = statistics.median(their_cpu) / statistics.median(our_cpu)
            lines.append(
                f"  {rows:>9} rows: driftwarden {mine:.3f} s, alibi-detect {other:.3f} s (medians of "
                f"{args.repeat}): {ratio:.2f}x{verdict}; CPU {statistics.median(our_cpu):.3f} s vs "
                f"{statistics.median(their_cpu):.3f} s: {cpu_ratio:.2f}x"
            )
        else:
            lines.append(f"  {rows:>9} rows: driftwarden {mine:.3f} s (median of {args.repeat})")
        del ref, cur
    print("side by side:")
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:2] == ["offline"]:
        offline_main(sys.argv[2:])
    elif sys.argv[1:2] == ["alibi"]:
        alibi_main(sys.argv[2:])
    else:
        main()
