"""Ingest benchmark: predictions another stack answered, into the log on PostgreSQL.

Run: ``.venv/bin/python bench/ingest.py [--seconds 10] [--concurrency 16] [--batch 100] [--file-rows 1000000]
[--skip-route] [--skip-file] [--skip-cloudevents] [--ce-rows 1]``.

A scratch PostgreSQL database (dropped at the end) gets a model registered from a reference alone (served
elsewhere: 7 numeric and 3 categorical features, a probability column), then:

- **route**: ``driftwarden serve --workers 1`` (its log in ``fast`` mode, monitor off) takes
  ``POST /v1/models/bench/predictions`` from ``--concurrency`` clients (an asyncio httpx generator in this
  process, so the server shares the 2 cores with it and with PostgreSQL), each sending ``--batch`` records a
  request, with ids and times, for ``--seconds``. Prints records/s answered, and the records the log holds
  once the server stopped (they must equal the records answered).
- **cloudevents**: the same server takes KServe's logger events at ``POST /v1/cloudevents`` from
  ``--concurrency`` clients, each posting an inference's request event then its response event (binary mode,
  KServe's headers, ``--ce-rows`` rows a TF Serving v1 body): pairs/s logged (each pair is two events and one
  transaction that pairs, logs and settles), and the rows the log holds after.
- **file**: ``driftwarden predictions import`` of a Parquet file of ``--file-rows`` scored rows (ids, one
  scoring time per 10,000 rows, labels on every tenth row), run as its own process under ``/usr/bin/time``:
  wall time and peak RSS; then the log's count.

The issue's targets: >= 5,000 records/s through the route in batches of 100 at c=16; 1M rows imported in
<= 20 s with <= 400 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PG_ADMIN = os.environ.get("DW_BENCH_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
TOKEN = "bench-admin-token-0123456789abcdef0123456789"
NUMERIC = ("income", "age", "debt", "tenure", "score_a", "score_b", "balance")
CATEGORICAL = {
    "region": ("north", "south", "east", "west"),
    "plan": ("basic", "plus"),
    "channel": ("web", "app"),
}


def data(n: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded rows: 7 numeric and 3 categorical features, a probability, ids, labels."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {name: rng.normal(50, 10, n) for name in NUMERIC}
    for name, cats in CATEGORICAL.items():
        out[name] = rng.choice(np.array(cats, dtype=object), n)
    logit = (out["income"] - 50) / 10 + (out["region"] == "north") * 0.5
    out["p"] = 1 / (1 + np.exp(-logit))
    out["y"] = (rng.random(n) < out["p"]).astype(np.int64)
    return out


@contextlib.contextmanager
def scratch_database() -> Iterator[str]:
    from sqlalchemy import create_engine, text

    name = f"driftwarden_ingest_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def register(url: str, root: Path) -> None:
    from core.database import open_database
    from core.tabular import write_table
    from registry.schema import Task
    from registry.service import promote
    from training.imports import ImportSpec, import_reference

    write_table(data(5_000, seed=0), root / "reference.csv")
    db = open_database(url, upgrade=True)
    try:
        spec = ImportSpec(
            model_name="bench",
            path=None,
            reference=root / "reference.csv",
            target="y",
            task=Task.BINARY,
            prediction_column="p",
        )
        import_reference(spec=spec, db=db, registry=root / "registry")
        with db.session() as s:
            promote(session=s, model_name="bench", version=1)
    finally:
        db.dispose()


def env(url: str, root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DRIFTWARDEN_DATABASE_URL": url,
        "DRIFTWARDEN_REGISTRY_PATH": str(root / "registry"),
        "DRIFTWARDEN_SPOOL_PATH": str(root / "spool"),
        "DRIFTWARDEN_ADMIN_TOKEN": TOKEN,
        "DRIFTWARDEN_MONITOR_ENABLED": "false",
        "DRIFTWARDEN_RETENTION_INTERVAL_S": "0",
        "DRIFTWARDEN_LOG_DURABILITY": "fast",
    }


def count(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(text("select coalesce(sum(size), 0) from prediction_batches")).scalar_one()
            )
    finally:
        engine.dispose()


def bodies(n_bodies: int, batch: int) -> list[bytes]:
    import orjson

    rows = data(n_bodies * batch, seed=1)
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    out = []
    for b in range(n_bodies):
        records = []
        for i in range(b * batch, (b + 1) * batch):
            inputs = {k: float(rows[k][i]) for k in NUMERIC} | {k: str(rows[k][i]) for k in CATEGORICAL}
            records.append({"inputs": inputs, "prediction": float(rows["p"][i])})
        out.append(orjson.dumps({"records": records, "_t": (t0 + timedelta(seconds=b)).isoformat()}))
    return out


async def load(url: str, seconds: float, concurrency: int, batch: int, tag: str) -> tuple[int, int, float]:
    """Records answered, non-2xx answers, elapsed seconds; every request's records get fresh ids."""
    import orjson

    templates = [orjson.loads(b) for b in bodies(50, batch)]
    answered = failed = 0
    stop = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    async def client(k: int) -> None:
        nonlocal answered, failed
        n = 0
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as c:
            while time.monotonic() < stop:
                body = templates[(k + n) % len(templates)]
                records = [
                    {**r, "id": f"{tag}{k}-{n}-{j}", "time": body["_t"]}
                    for j, r in enumerate(body["records"])
                ]
                r = await c.post("/v1/models/bench/predictions", content=orjson.dumps({"records": records}))
                if r.status_code == 200:
                    answered += r.json()["stored"]
                else:
                    failed += 1
                n += 1

    started = time.monotonic()
    await asyncio.gather(*(client(k) for k in range(concurrency)))
    return answered, failed, time.monotonic() - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(url: str, root: Path) -> Iterator[str]:
    """``driftwarden serve --workers 1`` on a free port until the block ends (a graceful stop)."""
    port = free_port()
    log = (root / "serve.log").open("ab")
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/driftwarden"), "serve", "--workers", "1", "--port", str(port)],
        env=env(url, root),
        stdout=log,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()  # a graceful stop: the writer commits what it queued
        proc.wait(60)
        log.close()


def route(url: str, root: Path, args: argparse.Namespace) -> None:
    before = count(url)
    with serving(url, root) as base:
        warm, _, _ = asyncio.run(load(base, 2.0, args.concurrency, args.batch, "warm"))
        answered, failed, elapsed = asyncio.run(load(base, args.seconds, args.concurrency, args.batch, "run"))
    logged = count(url) - before - warm
    print(
        f"route: c={args.concurrency}, {args.batch} records a request, {elapsed:.1f} s: "
        f"{answered / elapsed:,.0f} records/s answered, {failed} non-2xx; log holds {logged} of {answered} "
        f"({'OK' if logged == answered else 'MISMATCH'})"
    )


def events(n_rows: int) -> tuple[bytes, bytes]:
    """A TF Serving v1 request and response body of ``n_rows`` rows, as KServe's logger carries them."""
    import orjson

    rows = data(n_rows, seed=3)
    instances = [
        {k: float(rows[k][i]) for k in NUMERIC} | {k: str(rows[k][i]) for k in CATEGORICAL}
        for i in range(n_rows)
    ]
    return orjson.dumps({"instances": instances}), orjson.dumps({"predictions": rows["p"].tolist()})


async def pair_load(
    url: str, seconds: float, concurrency: int, n_rows: int, tag: str
) -> tuple[int, int, float]:
    """Pairs logged, non-2xx answers, elapsed seconds: each client posts a request event, then its response
    event (binary mode, KServe's headers), for ``seconds``."""
    request, response = events(n_rows)
    logged = failed = 0
    stop = time.monotonic() + seconds
    common = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "ce-specversion": "1.0",
        "ce-source": "http://bench-predictor.default/",
        "ce-inferenceservicename": "bench",
        "ce-namespace": "default",
        "ce-component": "predictor",
        "ce-endpoint": "default",
    }

    async def client(k: int) -> None:
        nonlocal logged, failed
        n = 0
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=common) as c:
            while time.monotonic() < stop:
                event_id = f"{tag}{k}-{n}"
                for kind, body in (("request", request), ("response", response)):
                    headers = {
                        "ce-id": event_id,
                        "ce-type": f"org.kubeflow.serving.inference.{kind}",
                        "ce-time": datetime.now(UTC).isoformat(),
                    }
                    r = await c.post("/v1/cloudevents", content=body, headers=headers)
                    if r.status_code != 200:
                        failed += 1
                    elif r.json()["outcome"] == "logged":
                        logged += 1
                n += 1

    started = time.monotonic()
    await asyncio.gather(*(client(k) for k in range(concurrency)))
    return logged, failed, time.monotonic() - started


def cloudevents(url: str, root: Path, args: argparse.Namespace) -> None:
    before = count(url)
    with serving(url, root) as base:
        warm, _, _ = asyncio.run(pair_load(base, 2.0, args.concurrency, args.ce_rows, "warm"))
        pairs, failed, elapsed = asyncio.run(
            pair_load(base, args.seconds, args.concurrency, args.ce_rows, "ce")
        )
    logged = count(url) - before
    expected = (warm + pairs) * args.ce_rows
    print(
        f"cloudevents: c={args.concurrency}, {args.ce_rows} row(s) an inference, {elapsed:.1f} s: "
        f"{pairs / elapsed:,.0f} pairs/s logged ({2 * pairs / elapsed:,.0f} events/s), {failed} non-2xx; "
        f"log holds {logged} of {expected} rows ({'OK' if logged == expected else 'MISMATCH'})"
    )


def file_import(url: str, root: Path, args: argparse.Namespace) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = args.file_rows
    rows = data(n, seed=2)
    t0 = datetime(2026, 11, 5, tzinfo=UTC)
    table = {k: pa.array(rows[k].tolist()) for k in (*NUMERIC, *CATEGORICAL, "p")}
    table["row_id"] = pa.array([f"job-{i}" for i in range(n)])
    table["scored_at"] = pa.array(
        [t0 + timedelta(minutes=i // 10_000) for i in range(n)], type=pa.timestamp("us", tz="UTC")
    )
    labels = rows["y"].astype(float)
    labels[np.arange(n) % 10 != 0] = np.nan
    table["y"] = pa.array(labels, from_pandas=True)
    path = root / "scored.parquet"
    pq.write_table(pa.table(table), path, row_group_size=100_000)
    before = count(url)
    cmd = [
        "/usr/bin/time",
        "-v",
        str(ROOT / ".venv/bin/driftwarden"),
        "predictions",
        "import",
        str(path),
        "--model",
        "bench",
        "--prediction-column",
        "p",
        "--id-column",
        "row_id",
        "--time-column",
        "scored_at",
        "--label-column",
        "y",
    ]
    started = time.monotonic()
    done = subprocess.run(cmd, env=env(url, root), capture_output=True, text=True)
    wall = time.monotonic() - started
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    logged = count(url) - before
    print(done.stdout.strip())
    print(
        f"file: {n:,} rows, {path.stat().st_size / 1e6:.0f} MB Parquet: wall {wall:.1f} s, peak RSS "
        f"{int(rss.group(1)) / 1024 if rss else float('nan'):.0f} MB, exit {done.returncode}; log holds "
        f"{logged:,} ({'OK' if logged == n else 'MISMATCH'})"
    )
    if done.returncode != 0:
        print(done.stderr[-2000:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--file-rows", type=int, default=1_000_000)
    parser.add_argument("--skip-route", action="store_true")
    parser.add_argument("--skip-file", action="store_true")
    parser.add_argument("--skip-cloudevents", action="store_true")
    parser.add_argument("--ce-rows", type=int, default=1, help="rows per KServe inference (default 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url:
        root = Path(tmp)
        register(url, root)
        if not args.skip_route:
            route(url, root, args)
        if not args.skip_cloudevents:
            cloudevents(url, root, args)
        if not args.skip_file:
            file_import(url, root, args)


if __name__ == "__main__":
    main()
