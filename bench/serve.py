"""Serving benchmark: the real server over loopback under a concurrent load generator.

Configurations: (a) driftwarden with the prediction log and metrics on (SQLite and PostgreSQL, both
durability modes; a name ending in ``-nometrics``, e.g. ``a-pg-fast-nometrics``, is the same with the log on
and the Prometheus metrics off, to price the metrics), (b) the same with monitoring off, (c) a naive FastAPI
endpoint calling Keras
``model.predict`` per request. Each is measured at concurrency 1, 8 and 64 (bounded in requests and time),
reporting requests/s and p50/p99 latency; after each (a) run the server is stopped gracefully and the log
rows are counted (they must equal the answered rows, with zero rows dropped).

    .venv/bin/python bench/serve.py                 # everything, ~3 minutes
    .venv/bin/python bench/serve.py --seconds 3 --configs a-sqlite-durable,b,c
    .venv/bin/python bench/serve.py --seconds 5 --configs a-pg-fast,a-pg-fast-nometrics   # metrics' cost
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from core.network import free_port

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (1, 8, 64)
PG_ADMIN = os.environ.get(
    "DRIFTWARDEN_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


# -- load generator -------------------------------------------------------------------------------
@dataclass
class LevelResult:
    concurrency: int
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        data = sorted(self.latencies_ms)
        return data[min(len(data) - 1, int(q * len(data)))]


async def _worker(
    host: str,
    port: int,
    request: bytes,
    deadline: float,
    budget: list[int],
    out: list[float],
    errors: list[int],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < deadline and budget[0] > 0:
            budget[0] -= 1
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            out.append((time.perf_counter() - t0) * 1000.0)
            if not head.startswith(b"HTTP/1.1 200"):
                errors[0] += 1
    finally:
        writer.close()


async def run_level(
    url: str, path: str, body: bytes, concurrency: int, seconds: float, max_requests: int
) -> LevelResult:
    """Closed-loop load: ``concurrency`` keep-alive connections, each sending the next request on answer."""
    host, port = url.removeprefix("http://").split(":")
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    errors = [0]
    budget = [max_requests]
    t0 = time.perf_counter()
    await asyncio.gather(
        *(
            _worker(host, int(port), request, t0 + seconds, budget, latencies, errors)
            for _ in range(concurrency)
        )
    )
    return LevelResult(concurrency, len(latencies), errors[0], time.perf_counter() - t0, latencies)


# -- servers --------------------------------------------------------------------------------------
def wait_ready(url: str, probe: str, proc: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + probe, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become ready")


def start_driftwarden(env: dict[str, str], extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/driftwarden"), "serve", "--port", str(port), *extra],
        env={**os.environ, **env, "DRIFTWARDEN_LOG_LEVEL": "WARNING"},
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, "/v2/models/bench/ready", proc)
    return proc, url


def start_naive(model_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "naive-server", "--model", str(model_path), "--port", str(port)], cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, "/health", proc)
    return proc, url


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def naive_server(model: Path, port: int) -> None:
    """(c): what a user would write first: FastAPI + Keras ``model.predict`` per request."""
    import keras
    import numpy as np
    import uvicorn
    from fastapi import FastAPI

    schema = json.loads((model / "driftwarden" / "schema.json").read_text())
    layer = keras.layers.TFSMLayer(str(model), call_endpoint="serve")
    inputs = {
        f["name"]: keras.Input(
            shape=(), name=f["name"], dtype="float32" if f["kind"] == "numeric" else "string"
        )
        for f in schema["features"]
    }
    net = keras.Model(inputs, layer(inputs))
    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"ok": "yes"}

    @app.post("/v1/models/bench:predict")
    def predict(body: dict[str, Any]) -> dict[str, Any]:
        rows = body["instances"]
        x = {
            f["name"]: np.array(
                [np.nan if r[f["name"]] is None else r[f["name"]] for r in rows],
                dtype=np.float32 if f["kind"] == "numeric" else object,
            )
            for f in schema["features"]
        }
        out = net.predict(x, verbose=0)
        return {"predictions": out["probability"].tolist()}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- orchestration --------------------------------------------------------------------------------
def train_model(root: Path) -> tuple[Path, list[dict[str, Any]]]:
    from core.database import open_database
    from core.tabular import write_table
    from training.datagen import generate
    from training.flows import run_training
    from training.jobs import Mode, TrainJob
    from training.progress import Progress

    data = root / "train.parquet"
    write_table(generate(3000, seed=0), data)
    db = open_database(f"sqlite:///{root / 'train.db'}")
    result = run_training(
        job=TrainJob(model_name="bench", data=data, mode=Mode.LOCAL, epochs=1.0),
        db=db,
        registry=root / "models",
        checkpoint_root=root / "ckpt",
        progress=Progress("t", show_bar=False),
    )
    db.dispose()
    sample = generate(64, seed=3)
    rows = []
    for values in zip(*sample.values(), strict=True):
        row = {}
        for k, v in zip(sample, values, strict=True):
            if k == "default":
                continue
            v = v.item() if hasattr(v, "item") else v
            row[k] = None if isinstance(v, float) and v != v else v
        rows.append(row)
    return Path(result.version.path), rows


def prepare_db(url: str, model_path: Path) -> None:
    from core.database import open_database
    from registry.service import promote, register_version

    db = open_database(url, upgrade=True)  # a scratch database: create its schema
    with db.session() as s:
        register_version(session=s, model_name="bench", version=1, path=model_path, metrics={}, lineage={})
        promote(session=s, model_name="bench", version=1)
    db.dispose()


def count_log(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        n = int(conn.execute(text("select count(*) from prediction_log")).scalar_one())
    engine.dispose()
    return n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd")
    naive = sub.add_parser("naive-server")
    naive.add_argument("--model", type=Path, required=True)
    naive.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=6.0, help="Time per concurrency level and config.")
    parser.add_argument(
        "--rounds", type=int, default=3, help="Interleaved slices per level (evens out noise)."
    )
    parser.add_argument("--max-requests", type=int, default=40_000, help="Request cap per slice.")
    parser.add_argument("--configs", default="a-sqlite-durable,a-sqlite-fast,a-pg-durable,a-pg-fast,b,c")
    parser.add_argument("--json", type=Path, help="Also write the results here.")
    args = parser.parse_args()
    if args.cmd == "naive-server":
        naive_server(args.model, args.port)
        return
    from sqlalchemy import create_engine, text

    configs = args.configs.split(",")
    results: dict[str, list[LevelResult]] = {}
    checks: dict[str, dict[str, Any]] = {}
    servers: dict[str, tuple[subprocess.Popen[bytes], str, str]] = {}
    warmup = 300
    with tempfile.TemporaryDirectory(prefix="dw-bench-") as tmp:
        root = Path(tmp)
        print("training a model ...", flush=True)
        model_path, rows = train_model(root)
        gc.collect()
        gc.freeze()
        body = json.dumps({"instances": [rows[0]]}).encode()
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        pg_names: list[str] = []
        try:
            for config in configs:
                db_url = f"sqlite:///{root / (config + '.db')}"
                if "-pg" in config:
                    name = f"driftwarden_bench_{uuid.uuid4().hex[:8]}"
                    with admin.connect() as conn:
                        conn.execute(text(f'CREATE DATABASE "{name}"'))
                    pg_names.append(name)
                    db_url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
                if config == "c":
                    proc, url = start_naive(model_path)
                else:
                    prepare_db(db_url, model_path)
                    env = {
                        "DRIFTWARDEN_DATABASE_URL": db_url,
                        "DRIFTWARDEN_SPOOL_PATH": str(root / "spool" / config),
                        "DRIFTWARDEN_RETENTION_INTERVAL_S": "0",
                        "DRIFTWARDEN_MONITOR_ENABLED": "false",  # serving and logging only, no drift runs
                    }
                    base_config = config.removesuffix("-nometrics")
                    if base_config != config:
                        env["DRIFTWARDEN_METRICS_ENABLED"] = "false"  # log on, metrics off
                    extra = (
                        ["--no-log"] if config == "b" else ["--durability", base_config.rsplit("-", 1)[-1]]
                    )
                    proc, url = start_driftwarden(env, extra)
                servers[config] = (proc, url, db_url)
                asyncio.run(run_level(url, "/v1/models/bench:predict", body, 8, 2.0, warmup))
                print(f"started {config} at {url}", flush=True)
            slice_s = args.seconds / args.rounds
            for level in LEVELS:
                parts: dict[str, list[LevelResult]] = {c: [] for c in configs}
                for _ in range(args.rounds):
                    for config in configs:
                        if config == "c" and parts[config]:
                            continue  # the naive server is slow enough that one long slice is plenty
                        seconds = args.seconds if config == "c" else slice_s
                        r = asyncio.run(
                            run_level(
                                servers[config][1],
                                "/v1/models/bench:predict",
                                body,
                                level,
                                seconds,
                                args.max_requests,
                            )
                        )
                        parts[config].append(r)
                for config in configs:
                    merged = LevelResult(
                        level,
                        sum(p.requests for p in parts[config]),
                        sum(p.errors for p in parts[config]),
                        sum(p.seconds for p in parts[config]),
                        [x for p in parts[config] for x in p.latencies_ms],
                    )
                    results.setdefault(config, []).append(merged)
                    print(
                        f"{config:18s} c={level:<3d} {merged.rps:8.1f} req/s  p50 {merged.pct(0.5):7.2f} ms  "
                        f"p99 {merged.pct(0.99):7.2f} ms  n={merged.requests} errors={merged.errors}",
                        flush=True,
                    )
            for config, (proc, url, db_url) in servers.items():
                status = httpx.get(url + "/status").json()["prediction_log"] if config != "c" else {}
                stop(proc)
                if config.startswith("a"):
                    answered = sum(r.requests - r.errors for r in results[config]) + warmup
                    checks[config] = {
                        "answered_rows": answered,
                        "logged_rows": count_log(db_url),
                        "rows_dropped": status.get("rows_dropped"),
                        "rows_spooled": status.get("rows_spooled"),
                    }
                    print(f"{config:18s} log: {checks[config]}", flush=True)
        finally:
            for proc, _, _ in servers.values():
                if proc.poll() is None:
                    stop(proc)
            with admin.connect() as conn:
                for name in pg_names:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()
    _summary(results, checks)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "results": {
                        k: [
                            {
                                "concurrency": r.concurrency,
                                "rps": r.rps,
                                "p50_ms": r.pct(0.5),
                                "p99_ms": r.pct(0.99),
                                "requests": r.requests,
                                "errors": r.errors,
                            }
                            for r in v
                        ]
                        for k, v in results.items()
                    },
                    "log_checks": checks,
                },
                indent=2,
            )
        )


def _summary(results: dict[str, list[LevelResult]], checks: dict[str, dict[str, Any]]) -> None:
    print("\nsummary")
    print(f"{'config':18s} " + "  ".join(f"c={c:<3d} req/s   p50    p99" for c in LEVELS))
    for name, levels in results.items():
        print(
            f"{name:18s} " + "  ".join(f"{r.rps:9.1f} {r.pct(0.5):6.2f} {r.pct(0.99):6.2f}" for r in levels)
        )
    for name, levels in results.items():
        on = results.get(name.removesuffix("-nometrics"))
        if name.endswith("-nometrics") and on:
            print(
                f"{name.removesuffix('-nometrics')}: metrics on / off throughput "
                + ", ".join(
                    f"c={a.concurrency}: {a.rps / b.rps:.3f}" for a, b in zip(on, levels, strict=True)
                )
                + " (target at c=64: >= 0.97)"
            )
    base = results.get("b")
    naive = results.get("c")
    for name, levels in results.items():
        if not name.startswith("a"):
            continue
        if base:
            worst = min(a.rps / b.rps for a, b in zip(levels, base, strict=True) if b.rps)
            print(f"{name}: throughput vs (b) logging off: worst level {worst:.2f}x (target >= 0.9)")
        if naive:
            print(
                f"{name}: throughput vs (c) naive at c=64: {levels[-1].rps / max(naive[-1].rps, 1e-9):.1f}x "
                "(target >= 30)"
            )
        print(f"{name}: p99 at c=8: {levels[1].pct(0.99):.2f} ms (target < 10 ms)")
        if name in checks:
            c = checks[name]
            ok = c["logged_rows"] == c["answered_rows"] and c["rows_dropped"] == 0
            print(
                f"{name}: logged {c['logged_rows']} of {c['answered_rows']} answered rows, "
                f"dropped {c['rows_dropped']}: {'OK' if ok else 'MISMATCH'}"
            )


if __name__ == "__main__":
    main()
