"""Soak: the real server on PostgreSQL under sustained, drifted load, with its monitors and alerts running.

One bounded run (``--minutes``, 3 by default): the bench trains a small model, creates a fresh PostgreSQL
database on the server of ``DRIFTWARDEN_TEST_PG_ADMIN_URL`` (default postgres@127.0.0.1:5432; dropped at
the end), registers and promotes the model there, subscribes a local webhook receiver (it verifies each
delivery's Standard Webhooks signature and counts them), and starts ``driftwarden serve --workers N`` with
the drift monitor on a short interval (``--monitor-interval``, over the last ``--window-rows``
predictions) and the default alert rules. ``wrk`` (Debian's package; installed with ``apt-get install -y
wrk`` when missing) posts drifted rows (``training.cluster.datagen``'s ``covariate_shift`` and
``new_category`` scenarios, ``--rows`` rows per request, 512 different bodies in turn) over
``--connections`` keep-alive connections, one ``wrk`` run per ``--interval`` seconds, so the bench prints,
every interval: throughput, wrk's p50/p99 latency, non-2xx answers and socket errors, the server's RSS (the
sum over every process of its tree: the supervisor and the workers, sampled every second), monitor runs so
far, alerts firing, and signed webhook deliveries received.

At the end the server is stopped gracefully and the bench prints:

- rows logged (the predictions of ``prediction_batches``, one row per request) against rows answered (the
  server's ``driftwarden_predictions_total``) and the rows of the requests ``wrk`` read answers to and sent
  (it abandons the requests in flight when its time is up), and the rows the log dropped: ``0 dropped`` and
  logged == answered, else LOST ROWS;
- monitor runs done, alerts fired (reached ``firing``) by rule, webhook deliveries (stored and received);
- the RSS trend, for the server and for each of its processes: the slope of a least-squares line through
  the RSS of the second half of the run (MB/min; the first half is warm-up: TensorFlow's, the allocator's
  and the monitor's first runs), fitted on the means of ``--interval`` blocks (RSS moves in steps, so
  neighbouring samples are not independent), with its 95 % interval and a verdict line: ``no growth
  trend`` when the whole interval is below ``--rss-slope-limit`` MB/min, ``GROWING`` when it is above,
  else ``inconclusive`` (run longer: a few minutes cannot tell 1 MB/min from the ~10 MB the monitor's
  runs move the RSS by).

It asserts no timing. Exit code 1 only on lost rows (a mismatch or a dropped row) or a crash (the server
exiting during the run, or not stopping cleanly, or ``wrk`` failing); a growing RSS is a figure to read,
not a failure.

    .venv/bin/python bench/soak.py                       # 3 minutes, 2 workers, 8 connections
    .venv/bin/python bench/soak.py --minutes 1 --interval 10 --workers 1 --connections 4
    .venv/bin/python bench/soak.py --minutes 10 --durability durable --rows 8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from serve import (
    ROOT,
    Server,
    count_log,
    ensure_wrk,
    metric_sum,
    prepare_db,
    request_rows,
    run_wrk,
    scratch_pg_database,
    served_rows,
    spawn,
    stop,
    tail,
    train_model,
    wait_drained,
    wait_ready,
    write_wrk_script,
)

MODEL = "bench"
BODIES = 512  # different request bodies wrk posts in turn


# -- process memory -------------------------------------------------------------------------------
def process_tree(root_pid: int) -> list[int]:
    """``root_pid`` and every descendant (from /proc; Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past the command name
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def rss_mb(pid: int) -> float:
    """VmRSS of one process in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class RssSampler:
    """Samples the RSS summed over a process tree every ``every_s`` seconds, in a thread."""

    pid: int
    every_s: float = 1.0
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (monotonic s, MB, processes)
    by_pid: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # (monotonic s, MB)
    names: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> tuple[float, float, int]:
        pids = process_tree(self.pid)
        now = time.monotonic()
        sizes = {pid: rss_mb(pid) for pid in pids}
        for pid, mb in sizes.items():
            if pid not in self.names:
                self.names[pid] = command(pid)
            self.by_pid.setdefault(pid, []).append((now, mb))
        point = (now, sum(sizes.values()), len(pids))
        self.samples.append(point)
        return point

    def run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    @contextlib.contextmanager
    def running(self) -> Iterator[RssSampler]:
        self.sample()
        thread = threading.Thread(target=self.run, name="rss-sampler", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()


def command(pid: int) -> str:
    """A short name for a process: its executable's base name and first argument, or its role."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    joined = " ".join(argv)
    if "multiprocessing" in joined:
        return "resource tracker" if "resource_tracker" in joined else "worker"
    return " ".join(Path(a).name for a in argv[:2] if a)


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per minute (0 for fewer than two)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    sxy = sum((t - mx) * (y - my) for t, y in points)
    return sxy / sxx * 60.0 if sxx else 0.0


@dataclass(frozen=True)
class Trend:
    """An RSS slope with its 95 % interval (MB/min), fitted on block means."""

    slope: float
    low: float
    high: float
    blocks: int

    def verdict(self, limit: float) -> str:
        if self.blocks < 4:
            return f"inconclusive ({self.blocks} blocks: run longer)"
        if self.high < limit:
            return "no growth trend"
        if self.low > limit:
            return "GROWING"
        return "inconclusive (the interval holds the limit: run longer)"


def trend(points: list[tuple[float, float]], block_s: float) -> Trend:
    """The slope of (seconds, MB) points fitted on their means per ``block_s`` seconds (RSS moves in steps,
    so neighbouring samples are not independent; block means much less so), with a 95 % interval
    (Student's t on the residuals)."""
    from scipy.stats import t as student

    if not points:
        return Trend(0.0, float("nan"), float("nan"), 0)
    t0 = points[0][0]
    blocks: dict[int, list[tuple[float, float]]] = {}
    for t, y in points:
        blocks.setdefault(int((t - t0) // block_s), []).append((t, y))
    means = [(sum(t for t, _ in b) / len(b), sum(y for _, y in b) / len(b)) for b in blocks.values()]
    k = len(means)
    slope = slope_per_min(means)
    if k < 3:
        return Trend(slope, float("nan"), float("nan"), k)
    mx = sum(t for t, _ in means) / k
    my = sum(y for _, y in means) / k
    sxx = sum((t - mx) ** 2 for t, _ in means)
    b = slope / 60.0
    residual = sum((y - my - b * (t - mx)) ** 2 for t, y in means) / (k - 2)
    half_width = float(student.ppf(0.975, k - 2)) * (residual / sxx) ** 0.5 * 60.0
    return Trend(slope, slope - half_width, slope + half_width, k)


# -- the webhook receiver -------------------------------------------------------------------------
@dataclass
class Received:
    """Deliveries the receiver got: signature verified or not, and the verified ones by event type."""

    secret: str
    verified: int = 0
    rejected: int = 0
    events: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def webhook_receiver(received: Received) -> ThreadingHTTPServer:
    """A local HTTP server answering 204 to a delivery whose signature verifies, 401 otherwise."""
    from standardwebhooks import Webhook

    hook = Webhook(received.secret)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                doc = hook.verify(body, {k.lower(): v for k, v in self.headers.items()})
            except Exception:  # a bad or missing signature, an old timestamp, a body that is not JSON
                with received.lock:
                    received.rejected += 1
                self.send_response(401)
            else:
                kind = str(doc.get("type", "?")) if isinstance(doc, dict) else "?"
                with received.lock:
                    received.verified += 1
                    received.events[kind] = received.events.get(kind, 0) + 1
                self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True).start()
    return server


# -- the database's view ---------------------------------------------------------------------------
@dataclass
class Progress:
    monitor_runs: int
    firing: int  # alerts firing now
    fired: dict[str, int]  # alerts that reached firing, by rule
    deliveries: dict[str, int]  # stored webhook messages by state


def read_progress(db: Any) -> Progress:
    """Monitor runs, alerts and webhook messages of the soak's database (through their services)."""
    from alerts.service import delivery_counts, list_alerts
    from monitors.service import list_runs

    with db.session() as s:
        runs = len(list_runs(session=s, model_name=MODEL, limit=1_000_000))
        alerts = list_alerts(session=s, model_name=MODEL, limit=100_000)
        fired: dict[str, int] = {}
        for a in alerts:
            if a.fired_at is not None:
                fired[a.rule_name] = fired.get(a.rule_name, 0) + 1
        firing = sum(1 for a in alerts if a.state == "firing")
        return Progress(runs, firing, fired, dict(delivery_counts(session=s)))


# -- the run ----------------------------------------------------------------------------------------
def drifted_bodies(rows_per_request: int) -> list[bytes]:
    """``BODIES`` request bodies of drifted rows: half covariate shift, half a new category."""
    from training.cluster.datagen import generate

    half = BODIES * rows_per_request // 2  # BODIES is even
    shifted = request_rows(generate(half, scenario="covariate_shift", seed=11))
    new_category = request_rows(generate(half, scenario="new_category", seed=12))
    rows = [r for pair in zip(shifted, new_category, strict=True) for r in pair]
    return [
        json.dumps({"instances": rows[i : i + rows_per_request]}).encode()
        for i in range(0, len(rows), rows_per_request)
    ]


def start(args: argparse.Namespace, root: Path, db_url: str) -> Server:
    """``driftwarden serve`` on the soak's database, monitors on a short interval; waits for every worker."""
    env = {
        "DRIFTWARDEN_DATABASE_URL": db_url,
        "DRIFTWARDEN_SPOOL_PATH": str(root / "spool"),
        "DRIFTWARDEN_REGISTRY_PATH": str(root / "models"),
        "DRIFTWARDEN_MONITOR_ENABLED": "true",
        "DRIFTWARDEN_MONITOR_INTERVAL_S": str(args.monitor_interval),
        "DRIFTWARDEN_MONITOR_WINDOW_ROWS": str(args.window_rows),
        "DRIFTWARDEN_WEBHOOK_SEND_INTERVAL_S": "1",
        "DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS": "true",  # the receiver is on loopback
        "DRIFTWARDEN_LOG_LEVEL": "INFO",  # uvicorn's "Application startup complete" per worker
    }
    cmd = [
        str(ROOT / ".venv/bin/driftwarden"),
        "serve",
        "--workers",
        str(args.workers),
        "--durability",
        args.durability,
    ]
    server = spawn(cmd, env, root / "server.log")
    wait_ready(server, f"/v2/models/{MODEL}/ready", args.workers)
    return server


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class Totals:
    answered: int = 0  # 2xx answers wrk read
    sent: int = 0  # requests wrk sent
    errors: int = 0  # non-2xx
    socket_errors: int = 0
    seconds: float = 0.0


def soak(
    args: argparse.Namespace, wrk: str, root: Path, db_url: str, received: Received, hook_url: str
) -> int:
    """Run the server under load for ``--minutes``; print the figures; 1 on lost rows or a crash."""
    from alerts.flows import add_webhook
    from alerts.specs import WebhookSpec
    from core.database import open_database

    print("training a model ...", flush=True)
    model_path, _ = train_model(root, 64)
    prepare_db(db_url, model_path)
    db = open_database(db_url)
    with db.session() as s:
        add_webhook(session=s, spec=WebhookSpec(url=hook_url, secret=received.secret, description="soak"))
    script = write_wrk_script(root, "drifted", drifted_bodies(args.rows))
    crashed: list[str] = []
    totals = Totals()
    server = start(args, root, db_url)
    print(
        f"server {server.url}: {args.workers} worker(s), {args.durability} log, monitor every "
        f"{args.monitor_interval:g} s over the last {args.window_rows} rows; wrk {args.connections} "
        f"connection(s), {args.rows} drifted row(s) per request; load average {loadavg()}",
        flush=True,
    )
    print(
        f"{'t s':>6} {'req/s':>8} {'rows/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'non2xx':>6} {'sockerr':>7} "
        f"{'RSS MB':>8} {'procs':>5} {'runs':>4} {'firing':>6} {'hooks':>5}  load",
        flush=True,
    )
    sampler = RssSampler(server.proc.pid)
    started = time.monotonic()
    try:
        with sampler.running():
            end = started + args.minutes * 60.0
            while time.monotonic() < end - 1.0:
                seconds = min(args.interval, end - time.monotonic())
                try:
                    r = run_wrk(wrk, server.url, script, args.connections, seconds, args.timeout)
                except RuntimeError as exc:
                    crashed.append(f"wrk: {exc}")
                    break
                if server.proc.poll() is not None:
                    crashed.append(f"the server exited with {server.proc.returncode} during the run")
                    break
                answered = r["requests"] - r["status_errors"]
                socket = r["connect"] + r["read"] + r["write"] + r["timeout"]
                secs = r["duration_us"] / 1e6
                totals.answered += answered
                totals.sent += r["sent"]
                totals.errors += r["status_errors"]
                totals.socket_errors += socket
                totals.seconds += secs
                _, mb, procs = sampler.samples[-1]
                p = read_progress(db)
                rps = answered / secs if secs else 0.0
                print(
                    f"{time.monotonic() - started:6.0f} {rps:8.1f} {rps * args.rows:8.1f} "
                    f"{r['p50_us'] / 1000:7.2f} {r['p99_us'] / 1000:7.1f} {r['status_errors']:6d} "
                    f"{socket:7d} {mb:8.1f} {procs:5d} {p.monitor_runs:4d} {p.firing:6d} "
                    f"{received.verified:5d}  {loadavg()}",
                    flush=True,
                )
        return finish(args, server, db, db_url, sampler, totals, received, crashed, started)
    finally:
        if server.proc.poll() is None:
            stop(server.proc)
        db.dispose()


def finish(
    args: argparse.Namespace,
    server: Server,
    db: Any,
    db_url: str,
    sampler: RssSampler,
    totals: Totals,
    received: Received,
    crashed: list[str],
    started: float,
) -> int:
    """Drain, stop the server, count the log; print the summary; the exit code."""
    served = dropped = -1
    drain_s = -1.0
    if server.proc.poll() is None:
        drain_s = wait_drained(server.url)
        served, dropped = served_rows(server.url)
        text = httpx_get(server.url + "/metrics")
        in_flight = metric_sum(text, "driftwarden_requests_in_flight")
        if in_flight:
            print(f"  {in_flight:g} request(s) still in flight at the end", flush=True)
        time.sleep(2.0)  # the webhook sender's next pass (1 s interval) for the last alerts
        print(f"  PostgreSQL connections of the server at the end: {connections(db)}", flush=True)
        stop(server.proc)
        if server.proc.returncode != 0:
            crashed.append(f"the server exited with {server.proc.returncode} on SIGTERM")
    elapsed = time.monotonic() - started
    logged = count_log(db_url)
    progress = read_progress(db)
    low, high = totals.answered * args.rows, totals.sent * args.rows
    rows_ok = served >= 0 and logged == served and dropped == 0 and low <= logged <= high

    print(f"\nsummary ({elapsed / 60:.1f} min, load average at the end {loadavg()})")
    rps = totals.answered / totals.seconds if totals.seconds else 0.0
    print(
        f"  load: {totals.answered} answers read by wrk in {totals.seconds:.0f} s ({rps:.1f} req/s, "
        f"{rps * args.rows:.1f} rows/s), {totals.errors} non-2xx, {totals.socket_errors} socket errors"
    )
    print(
        f"  log: {logged} rows logged, {served} answered by the server, wrk read {low} and sent {high}, "
        f"{dropped} dropped; queue and spool empty {drain_s:.1f} s after the load: "
        + ("OK (0 lost)" if rows_ok else "LOST ROWS")
    )
    fired = ", ".join(f"{k} {v}" for k, v in sorted(progress.fired.items())) or "none"
    print(f"  monitor runs: {progress.monitor_runs}")
    print(f"  alerts fired: {sum(progress.fired.values())} ({fired}); firing at the end: {progress.firing}")
    events = ", ".join(f"{k} {v}" for k, v in sorted(received.events.items())) or "none"
    print(
        f"  webhooks: stored {progress.deliveries or {}}; received {received.verified} with a valid "
        f"signature ({events}), {received.rejected} rejected"
    )
    samples = sampler.samples
    half = (samples[0][0] + samples[-1][0]) / 2 if samples else 0.0  # the middle of the load
    second = [(t, mb) for t, mb, _ in samples if t >= half]
    fit = trend(second, args.interval)
    first_mb, last_mb = (samples[0][1], samples[-1][1]) if samples else (0.0, 0.0)
    peak = max((mb for _, mb, _ in samples), default=0.0)
    print(
        f"  RSS (all {samples[-1][2] if samples else 0} processes): {first_mb:.1f} MB after start, "
        f"{last_mb:.1f} MB at the end, peak {peak:.1f} MB; {len(samples)} samples"
    )
    for pid, points in sampler.by_pid.items():
        late = trend([(t, mb) for t, mb in points if t >= half], args.interval)
        print(
            f"    {pid} {sampler.names.get(pid, '?')}: {points[0][1]:.1f} -> {points[-1][1]:.1f} MB, "
            f"second half {late.slope:+.2f} MB/min [{late.low:+.2f}, {late.high:+.2f}]"
        )
    print(
        f"  RSS trend over the second half ({len(second)} samples in {fit.blocks} blocks of "
        f"{args.interval:g} s): {fit.slope:+.2f} MB/min, 95 % interval [{fit.low:+.2f}, {fit.high:+.2f}]: "
        f"{fit.verdict(args.rss_slope_limit)} (limit {args.rss_slope_limit:g} MB/min)"
    )
    for why in crashed:
        print(f"  CRASH: {why}")
    if crashed:
        print(f"  server log (tail):\n{tail(server.log)}")
    return 0 if rows_ok and not crashed else 1


def connections(db: Any) -> int:
    """Connections to the soak's database other than this process's own (``pg_stat_activity``)."""
    from sqlalchemy import text

    with db.session() as s:
        return int(
            s.execute(
                text(
                    "select count(*) from pg_stat_activity "
                    "where datname = current_database() and pid <> pg_backend_pid()"
                )
            ).scalar_one()
        )


def httpx_get(url: str) -> str:
    import httpx

    return httpx.get(url, timeout=30).text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="Length of the load (default 3).")
    parser.add_argument(
        "--interval", type=float, default=10.0, help="Seconds per printed line (one wrk run)."
    )
    parser.add_argument("--connections", type=int, default=8, help="wrk's keep-alive connections.")
    parser.add_argument("--rows", type=int, default=1, help="Drifted rows per request.")
    parser.add_argument("--workers", type=int, default=2, help="Server worker processes (serve --workers).")
    parser.add_argument("--durability", choices=("fast", "durable"), default="fast", help="Log durability.")
    parser.add_argument(
        "--monitor-interval",
        type=float,
        default=5.0,
        help="DRIFTWARDEN_MONITOR_INTERVAL_S (seconds; short, so that the monitor's first runs, which grow "
        "the worker running it by ~120 MB, are over before the second half the RSS trend is fitted on).",
    )
    parser.add_argument(
        "--window-rows",
        type=int,
        default=20_000,
        help="DRIFTWARDEN_MONITOR_WINDOW_ROWS (last N predictions).",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="wrk's request timeout (seconds).")
    parser.add_argument(
        "--rss-slope-limit",
        type=float,
        default=1.0,
        help="RSS slope (MB/min) of the verdict: 'no growth trend' when the slope's 95 %% interval over the "
        "second half is below it, 'GROWING' when above, else 'inconclusive'.",
    )
    args = parser.parse_args()
    for name in ("minutes", "interval", "monitor_interval", "timeout"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')}: must be positive (got {getattr(args, name)})")
    for name in ("connections", "rows", "workers", "window_rows"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')}: must be at least 1 (got {getattr(args, name)})")
    if args.interval < 1:
        raise SystemExit(f"--interval: must be at least 1 second (wrk's unit; got {args.interval})")

    wrk = ensure_wrk()
    from alerts.webhooks import new_secret

    received = Received(secret=new_secret())
    receiver = webhook_receiver(received)
    hook_url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    try:
        with (
            tempfile.TemporaryDirectory(prefix="dw-soak-") as tmp,
            scratch_pg_database("driftwarden_soak") as url,
        ):
            code = soak(args, wrk, Path(tmp), url, received, hook_url)
    finally:
        receiver.shutdown()
    sys.exit(code)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
