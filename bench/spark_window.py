"""Spark engine benchmark: a window of N predictions x 25 features sketched from a Parquet lake on a Spark
standalone cluster (a master and two workers of one core each on 127.0.0.1, as the tests start it), and side
by side the PostgreSQL path and ``driftwarden drift`` on the same rows.

Run: ``.venv/bin/python bench/spark_window.py [--rows 10000000 30000000] [--file-rows 500000] [--hours 10]
[--side-rows 10000000] [--lake /tmp/dw-lake] [--pg-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]``.

The rows are ``bench/drift.py``'s window (20 numeric and 5 categorical features, its predictions): its first
million distinct rows, repeated (as ``fill_log`` repeats them on PostgreSQL), written per the lake's layout
(``predictions/lake/layout.py``) in files of ``--file-rows`` over ``--hours`` hour partitions. For each
``--rows`` it prints the cold window (every hour counted: wall seconds, rows/s, rows/s per executor core,
the driver's peak RSS: this process and its JVM, sampled every 0.2 s) and the warm moving window one hour
newer (one more hour of files: seconds, files read). ``--side-rows``: the same window read by the
PostgreSQL path (``fill_log``'s log, no sketch cache) and by ``driftwarden drift`` on the same rows as one
Parquet file, beside the Spark figure. Speed is never asserted by a test: it is printed here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from drift import DISTINCT_ROWS, fill_log, make_columns, predictions, scratch_database, window_columns  # noqa: E402

from core.database import open_database  # noqa: E402
from monitors.profile import Profile, build_reference_profile, profile_from_dict  # noqa: E402
from predictions.lake import layout  # noqa: E402
from predictions.windows import WindowSpec  # noqa: E402
from registry.schema import ModelSchema, OutputSpec, infer_feature  # noqa: E402

START = datetime(2026, 11, 1, tzinfo=UTC)
CORES = 2  # the cluster's executor cores (two workers of one core)


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def driver_jvms(pid: int) -> list[int]:
    """The driver's JVMs among ``pid``'s children (``SparkSubmit``: not the cluster's master and workers,
    which this benchmark starts too)."""
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except OSError:
        return []
    jvms = []
    for child in out.split():
        with contextlib.suppress(OSError):
            if b"SparkSubmit" in Path(f"/proc/{child}/cmdline").read_bytes():
                jvms.append(int(child))
    return jvms


class Peak:
    """The driver's peak RSS (this process and its JVM), sampled every 0.2 s."""

    def __init__(self) -> None:
        self.python = self.jvm = 0.0
        self.before = rss_mb(os.getpid())  # what the benchmark itself holds (its generated tables) before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.python = max(self.python, rss_mb(os.getpid()))
            self.jvm = max(self.jvm, sum(rss_mb(c) for c in driver_jvms(os.getpid())))

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def size_gb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*.parquet")) / 1e9


def distinct_table(rows: int) -> pa.Table:
    """``rows`` distinct predictions of ``bench/drift.py``'s window as the layout's predictions table."""
    cols = window_columns(rows)
    p = predictions(rows, seed=4)
    fields, names = [], []
    for name, values in cols.items():
        if values.dtype.kind in "fi":
            fields.append(pa.array(values))
        else:
            fields.append(pa.array(values.tolist(), pa.string()).dictionary_encode())
        names.append(name)
    n = rows
    return pa.table(
        {
            "prediction_id": pa.array([f"{i:032x}" for i in range(n)], pa.string()),
            "request_id": pa.nulls(n, pa.string()),
            "model_version": pa.array(np.ones(n, np.int64)),
            "logged_at": pa.array(np.zeros(n, np.int64), pa.timestamp("us", tz="UTC")),
            "latency_ms": pa.array(np.ones(n)),
            "status": pa.array(["ok"] * n, pa.string()),
            "protocol": pa.array(["v1"] * n, pa.string()),
            "source": pa.array(["serve"] * n, pa.string()),
            "output": pa.array(p),
            "vector": pa.nulls(n, pa.list_(pa.float64())),
            "flags": pa.nulls(n, pa.list_(pa.string())),
            "inputs": pa.nulls(n, pa.string()),
            layout.FEATURES: pa.StructArray.from_arrays(fields, names=names),
        }
    )


def write_lake(lake: Path, rows: int, *, file_rows: int, hours: int, first_hour: int = 0) -> int:
    """:func:`generate_lake` in a process of its own, so that the driver's RSS holds none of its tables."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(
            generate_lake, lake, rows, file_rows=file_rows, hours=hours, first_hour=first_hour
        ).result()


def generate_lake(lake: Path, rows: int, *, file_rows: int, hours: int, first_hour: int = 0) -> int:
    """``rows`` predictions of model ``bench`` over ``hours`` hours from ``START + first_hour``, in files of
    ``file_rows`` (the distinct million repeated); returns the files written."""
    base = distinct_table(min(DISTINCT_ROWS, rows))
    per_hour = rows // hours
    seq = at = 0
    for h in range(first_hour, first_hour + hours):
        hour = START + timedelta(hours=h)
        left = per_hour
        while left > 0:
            k = min(file_rows, left, base.num_rows - at % base.num_rows)
            part = base.slice(at % base.num_rows, k)
            micros = int(hour.timestamp() * 1e6) + np.linspace(0, 3_599_000_000, k).astype(np.int64)
            part = part.set_column(3, "logged_at", pa.array(micros, pa.timestamp("us", tz="UTC")))
            ids = pa.array([f"{h:08x}{seq:08x}{i:016x}" for i in range(k)], pa.string())
            part = part.set_column(0, "prediction_id", ids)
            folder = lake / layout.partition(layout.PREDICTIONS, "bench", hour)
            folder.mkdir(parents=True, exist_ok=True)
            seq += 1
            name = layout.file_name(seq)
            pq.write_table(part, folder / layout.temporary_name(name), compression="snappy")
            (folder / layout.temporary_name(name)).rename(folder / name)
            at, left = at + k, left - k
    return seq


def reference() -> tuple[Profile, dict[str, np.ndarray]]:
    cols = make_columns(100_000, seed=1)
    schema = ModelSchema(
        features=tuple(infer_feature(n, c) for n, c in cols.items()),
        outputs=(OutputSpec(name="p"),),
        target="",
    )
    raw = build_reference_profile(cols, schema, predictions=predictions(100_000, seed=5))
    return profile_from_dict(raw), cols


def spark_window(spark: Any, lake: Path, profile: Profile, *, hours: int, shift: int, cache: Any) -> Any:
    from monitors.spark.window import LakeRead, read_lake_window

    read = LakeRead()
    now = START + timedelta(hours=hours + shift)
    with Peak() as peak:
        t0 = time.perf_counter()
        window = read_lake_window(
            spark=spark,
            lake=str(lake),
            profile=profile,
            model_name="bench",
            spec=WindowSpec(minutes=60 * hours),
            now=now,
            cache=cache,
            read=read,
        )
        wall = time.perf_counter() - t0
    return window, read, wall, peak


def bench_spark(spark: Any, args: argparse.Namespace, profile: Profile) -> dict[int, float]:
    walls: dict[int, float] = {}
    for rows in args.rows:
        lake = Path(args.lake) / f"rows-{rows}"
        shutil.rmtree(lake, ignore_errors=True)
        t0 = time.perf_counter()
        files = write_lake(lake, rows, file_rows=args.file_rows, hours=args.hours)
        print(
            f"\n{rows:,} predictions x 25 features: {files} files over {args.hours} hours written in "
            f"{time.perf_counter() - t0:.1f} s ({size_gb(lake):.2f} GB)",
            flush=True,
        )
        with tempfile.TemporaryDirectory() as tmp:
            db = open_database(f"sqlite:///{tmp}/cache.db", upgrade=True)
            window, read, wall, peak = spark_window(
                spark, lake, profile, hours=args.hours, shift=0, cache=db.engine
            )
            assert window.rows == rows, (window.rows, rows)
            walls[rows] = wall
            print(
                f"  cold window   {wall:8.2f} s   {rows / wall:12,.0f} rows/s   "
                f"{rows / wall / CORES:11,.0f} rows/s/core"
                f"   driver RSS peak: python {peak.python:6.0f} MB (before {peak.before:.0f}) + JVM "
                f"{peak.jvm:6.0f} MB   "
                f"hours counted {read.counted_hours}, files {len(read.files_read)}",
                flush=True,
            )
            write_lake(lake, rows // args.hours, file_rows=args.file_rows, hours=1, first_hour=args.hours)
            moved, read2, wall2, peak2 = spark_window(
                spark, lake, profile, hours=args.hours, shift=1, cache=db.engine
            )
            print(
                f"  moved 1 hour  {wall2:8.2f} s   hours from cache {read2.cached_hours}, counted "
                f"{read2.counted_hours}, files read {len(read2.files_read)}   driver RSS peak: python "
                f"{peak2.python:6.0f} MB + JVM {peak2.jvm:6.0f} MB",
                flush=True,
            )
            db.dispose()
        if not args.keep:
            shutil.rmtree(lake, ignore_errors=True)
    return walls


def side_by_side(
    spark: Any, args: argparse.Namespace, profile: Profile, ref_cols: dict[str, np.ndarray]
) -> None:
    rows = args.side_rows
    print(f"\nside by side, {rows:,} predictions x 25 features (the same rows):", flush=True)
    lake = Path(args.lake) / "side"
    shutil.rmtree(lake, ignore_errors=True)
    write_lake(lake, rows, file_rows=args.file_rows, hours=args.hours)
    window, read, wall, peak = spark_window(spark, lake, profile, hours=args.hours, shift=0, cache=None)
    print(
        f"  spark (2 executor cores)      {wall:8.2f} s   {rows / wall:12,.0f} rows/s   rows {window.rows:,}",
        flush=True,
    )
    from drift import db_report

    with scratch_database("postgresql", args.pg_url) as url:
        t0 = time.perf_counter()
        fill_log(url, rows, request_rows=32)
        print(f"  (PostgreSQL log filled in {time.perf_counter() - t0:.0f} s)", flush=True)
        db = open_database(url)
        t0 = time.perf_counter()
        got, _ = db_report(engine=db.engine, profile=profile, spec=WindowSpec(rows=rows))
        pg_wall = time.perf_counter() - t0
        print(
            f"  PostgreSQL path (no cache)    {pg_wall:8.2f} s   {rows / pg_wall:12,.0f} rows/s   "
            f"rows {got.rows:,}",
            flush=True,
        )
        db.dispose()
    with tempfile.TemporaryDirectory() as tmp:
        tables = [
            pq.read_table(f).column(layout.FEATURES).combine_chunks().flatten()
            for f in sorted(lake.rglob("*.parquet"))
        ]
        names = list(ref_cols)
        flat = pa.Table.from_batches(
            [
                pa.RecordBatch.from_arrays(
                    [a.dictionary_decode() if pa.types.is_dictionary(a.type) else a for a in t], names=names
                )
                for t in tables
            ]
        )
        pq.write_table(flat, f"{tmp}/current.parquet")
        del flat, tables
        pq.write_table(
            pa.table({k: pa.array(v.tolist() if v.dtype.kind == "O" else v) for k, v in ref_cols.items()}),
            f"{tmp}/reference.parquet",
        )
        exe = str(Path(sys.executable).parent / "driftwarden")
        t0 = time.perf_counter()
        proc = subprocess.run(
            [exe, "drift", f"{tmp}/reference.parquet", f"{tmp}/current.parquet", "--quiet"],
            capture_output=True,
            text=True,
        )
        drift_wall = time.perf_counter() - t0
        print(
            f"  driftwarden drift (Parquet)   {drift_wall:8.2f} s   {rows / drift_wall:12,.0f} rows/s   exit "
            f"{proc.returncode}",
            flush=True,
        )
    shutil.rmtree(lake, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000_000])
    parser.add_argument("--file-rows", type=int, default=500_000)
    parser.add_argument("--hours", type=int, default=10)
    parser.add_argument("--side-rows", type=int, default=0)
    parser.add_argument("--lake", default=f"{tempfile.gettempdir()}/dw-bench-lake")
    parser.add_argument("--keep", action="store_true", help="keep the lakes written")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--master", help="an existing master (default: a cluster started here)")
    args = parser.parse_args()
    from monitors.spark.session import spark_session, stop_sessions
    from tests.spark.cluster import start_cluster

    profile, ref_cols = reference()
    logs = Path(tempfile.mkdtemp(prefix="dw-spark-"))
    cluster = None if args.master else start_cluster(logs)
    master = args.master or cluster.master  # type: ignore[union-attr]
    try:
        spark = spark_session(master)
        bench_spark(spark, args, profile)
        if args.side_rows:
            side_by_side(spark, args, profile, ref_cols)
    finally:
        stop_sessions()
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
