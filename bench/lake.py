"""Lake sink benchmark: serving with the prediction log going to a Parquet lake vs ``--no-log``.

Run: ``.venv/bin/python bench/lake.py [--seconds 10] [--rows 1 32] [--concurrency 64] [--repeat 3]
[--durability fast|durable] [--mode only|also] [--driver wrk|python]``.

Two ``driftwarden serve --workers 1`` processes on loopback (one at a time measured, the other idle): ``a``
with ``lake_mode`` (``only`` by default: the log goes to a local lake folder alone; the database keeps the
registry) and ``b`` with ``--no-log``. Each round measures, for each rows-per-request size, the two back to
back (alternating which goes first) at ``--concurrency`` for ``--seconds``, with the load generator of
``bench/serve.py`` (``wrk`` by default, installed from Debian's package when missing). Printed per size:
requests/s both ways (medians over the rounds) and the median of the rounds' paired ratios (log on /
``--no-log``; targets of issue 44: >= 0.95 at 1 row, >= 0.90 at 32 rows). At the end the log-on server is
stopped (SIGTERM: its sink commits what its spool holds) and the predictions it answered
(``driftwarden_predictions_total``) are compared with the rows in the lake's files (distinct ids too).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import (  # noqa: E402  (bench/serve.py: servers, load generator, scratch database)
    ROOT,
    Driver,
    ensure_wrk,
    prepare_db,
    scratch_pg_database,
    served_rows,
    spawn,
    stop,
    train_model,
    wait_ready,
)

sys.path.insert(0, str(ROOT))

TARGETS = {1: 0.95, 32: 0.90}


def lake_rows(folder: Path) -> tuple[int, int]:
    """(rows, distinct prediction ids) in the lake's committed prediction files."""
    import pyarrow.parquet as pq

    from predictions.lake.files import committed_files, open_lake

    target = open_lake(str(folder))
    ids: list[str] = []
    for path in committed_files(target, "predictions"):
        ids += pq.read_table(target.path(path), columns=["prediction_id"])["prediction_id"].to_pylist()
    return len(ids), len(set(ids))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--durability", choices=["fast", "durable"], default="fast")
    parser.add_argument("--mode", choices=["only", "also"], default="only")
    parser.add_argument("--driver", choices=["wrk", "python"], default="wrk")
    parser.add_argument("--warmup", type=float, default=3.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dw-lake-bench-"))
    print(f"work folder {root}", flush=True)
    model_path, rows = train_model(root, max(args.rows))
    driver = Driver(args.driver, root, timeout_s=30.0, max_requests=10**9)
    if args.driver == "wrk":
        driver.wrk = ensure_wrk()
    for n in args.rows:
        driver.add_body(n, json.dumps({"instances": rows[:n]}).encode())
    lake = root / "lake"
    lake.mkdir()
    with scratch_pg_database("driftwarden_lakebench") as db_url:
        prepare_db(db_url, model_path)
        base = {
            "DRIFTWARDEN_DATABASE_URL": db_url,
            "DRIFTWARDEN_RETENTION_INTERVAL_S": "0",
            "DRIFTWARDEN_MONITOR_ENABLED": "false",
            "DRIFTWARDEN_LOG_LEVEL": "INFO",
        }
        cli = str(Path(sys.executable).parent / "driftwarden")  # the venv's, on this checkout's code:
        base["PYTHONPATH"] = str(ROOT)
        on_env = {
            **base,
            "DRIFTWARDEN_SPOOL_PATH": str(root / "spool-a"),
            "DRIFTWARDEN_LAKE_URL": str(lake),
            "DRIFTWARDEN_LAKE_MODE": args.mode,
        }
        on = spawn([cli, "serve", "--workers", "1", "--durability", args.durability], on_env, root / "a.log")
        off = spawn(
            [cli, "serve", "--workers", "1", "--no-log"],
            {**base, "DRIFTWARDEN_SPOOL_PATH": str(root / "spool-b")},
            root / "b.log",
        )
        try:
            for server in (on, off):
                wait_ready(server, "/v2/models/bench/ready", 1)
                for n in args.rows:
                    driver.warm_up("warm", server.url, n, args.warmup)
            rps: dict[tuple[str, int], list[float]] = {}
            ratios: dict[int, list[float]] = {}
            for r in range(args.repeat):
                for n in args.rows:
                    order = [("a", on), ("b", off)] if r % 2 == 0 else [("b", off), ("a", on)]
                    got = {}
                    for name, server in order:
                        m = driver.measure(name, server.url, n, args.concurrency, args.seconds)
                        got[name] = m.rps
                        rps.setdefault((name, n), []).append(m.rps)
                    ratios.setdefault(n, []).append(got["a"] / got["b"] if got["b"] else 0.0)
                    print(f"round {r + 1} rows {n}: lake {got['a']:.0f} req/s, --no-log {got['b']:.0f} req/s")
            answered, dropped = served_rows(on.url)
        finally:
            stop(off.proc)
            stop(on.proc)
        in_lake, distinct = lake_rows(lake)
    report(args, rps, ratios)
    print(
        f"answered {answered} predictions, {dropped} dropped; in the lake {in_lake} rows, {distinct} distinct"
    )
    print("N answered == N in the lake" if answered == in_lake == distinct else "MISMATCH")
    return 0 if answered == in_lake == distinct else 1


def report(
    args: argparse.Namespace, rps: dict[tuple[str, int], list[float]], ratios: dict[int, list[float]]
) -> None:
    """The table: req/s both ways (medians) and the median paired ratio, per size."""
    print(
        f"\nlake sink (lake_mode={args.mode}, {args.durability}) vs --no-log, c={args.concurrency}, 1 worker"
    )
    print(f"{'rows/req':>8} {'lake req/s':>11} {'no-log req/s':>13} {'ratio':>6} {'target':>7}")
    for n in args.rows:
        ratio = statistics.median(ratios[n])
        target = TARGETS.get(n)
        mark = "" if target is None else (f">= {target:.2f}" + (" ok" if ratio >= target else " MISSED"))
        print(
            f"{n:>8} {statistics.median(rps[('a', n)]):>11.0f} {statistics.median(rps[('b', n)]):>13.0f} "
            f"{ratio:>6.3f} {mark:>7}"
        )


if __name__ == "__main__":
    sys.exit(main())
