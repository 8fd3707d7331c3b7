"""Sharded embedding benchmark (issue 45): one model whose embedding dominates, on 1 and 2 parameter servers.

Generates applications with a ``merchant_id`` of ``--levels`` values (default 200,000), trains it with
``driftwarden train --mode async --embed merchant_id:DIM`` on a local cluster of 1 and of 2 parameter
servers (2 workers each), and prints per run: steps/s (planned steps over the time from the chief's
``train.start`` to ``training done``), each worker's last steps/s, each parameter server's bytes of variables
(the chief's figure) and peak RSS (``VmHWM`` from ``/proc``, polled while it runs). Then the export's size,
and serving req/s (``driftwarden serve --no-log``, 1 row per request, ``--clients`` threads for
``--seconds``) of that version against the same model trained without the id (``--exclude merchant_id``).

    .venv/bin/python bench/sharded.py                   # ~5-10 minutes on 2 cores
    .venv/bin/python bench/sharded.py --levels 50000 --epochs 0.05 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from core.network import free_port  # noqa: E402
from core.tabular import read_table, write_table  # noqa: E402
from training.cluster.datagen import generate  # noqa: E402


def make_data(path: Path, *, rows: int, levels: int) -> Path:
    """Generated applications plus ``merchant_id`` with ``levels`` values."""
    columns = dict(generate(rows, seed=3))
    codes = np.random.default_rng(3).permutation(np.arange(rows) % levels)
    columns["merchant_id"] = np.array([f"m{c:06d}" for c in codes], dtype=object)
    write_table(columns, path)
    return path


def cli(env: dict[str, str], *args: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def peak_rss(pid: int) -> int | None:
    """VmHWM of a live process, bytes (None when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def train(env: dict[str, str], root: Path, args: list[str], *, name: str) -> dict[str, Any]:
    """Run one training, polling the parameter servers' peak RSS; returns its figures."""
    log = root / f"{name}.log"
    proc = cli(env, "train", *args, log=log)
    peaks: dict[str, int] = {}
    while proc.poll() is None:
        for pids_file in (root / "var" / "checkpoints").glob("*/nodes/pids.json"):
            try:
                nodes = json.loads(pids_file.read_text())
            except (OSError, ValueError):
                continue
            for node, pids in nodes.items():
                if node.startswith("ps:"):
                    rss = peak_rss(pids[-1])
                    if rss is not None:
                        peaks[node] = max(peaks.get(node, 0), rss)
        time.sleep(0.5)
    text = log.read_text(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{name}: train failed ({proc.returncode}):\n{text[-3000:]}")
    figures: dict[str, Any] = {
        "run": name,
        "ps_peak_rss_mib": {k: round(v / 2**20) for k, v in sorted(peaks.items())},
    }
    start = re.search(r"^(\S+ \S+) .*train\.start .*planned_steps=(\d+) start_step=(\d+)", text, re.M)
    done = re.search(r"^(\S+ \S+) .*training done: global_step=(\d+)", text, re.M)
    if start and done:
        t0, t1 = (
            time.mktime(time.strptime(m.group(1).split(",")[0], "%Y-%m-%d %H:%M:%S")) for m in (start, done)
        )
        ms0, ms1 = (int(m.group(1).split(",")[1]) / 1000 for m in (start, done))
        steps = int(done.group(2)) - int(start.group(3))
        figures["steps_per_s"] = round(steps / max(t1 + ms1 - t0 - ms0, 1e-3), 1)
    shares = re.findall(r"ps shares: (.*)", text)
    if shares:
        figures["ps_bytes_mib"] = {
            k: round(int(v) / 2**20, 1) for k, v in (item.split("=") for item in shares[-1].split())
        }
    rates = re.findall(r"worker steps/s: (.*)", text)
    if rates:
        figures["worker_steps_per_s_last"] = dict(item.split("=") for item in rates[-1].split())
    placed = re.findall(r"embedding merchant_id: (.*)", text)
    if placed:
        figures["embedding"] = placed[-1]
    version = re.search(r"registered (\S+):(\d+)", text)
    figures["version"] = f"{version.group(1)}:{version.group(2)}" if version else None
    return figures


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def req_per_s(url: str, model: str, rows: list[dict[str, Any]], *, clients: int, seconds: float) -> float:
    """Answered requests per second, 1 row each, ``clients`` threads."""
    done = [0] * clients
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            i = k
            while time.monotonic() < stop:
                r = c.post(f"/v1/models/{model}:predict", json={"instances": [rows[i % len(rows)]]})
                if r.status_code == 200:
                    done[k] += 1
                i += clients

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - t0)


def json_rows(path: Path, names: list[str], count: int = 200) -> list[dict[str, Any]]:
    cols = read_table(path)
    out = []
    for i in range(count):
        row: dict[str, Any] = {}
        for n in names:
            v = cols[n][i]
            v = v.item() if isinstance(v, np.generic) else v
            row[n] = None if isinstance(v, float) and v != v else v
        out.append(row)
    return out


def serve_bench(
    env: dict[str, str], root: Path, data: Path, *, clients: int, seconds: float
) -> dict[str, float]:
    port = free_port()
    proc = cli(env, "serve", "--no-log", "--host", "127.0.0.1", "--port", str(port), log=root / "serve.log")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/v1/models/shop", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"server did not start:\n{(root / 'serve.log').read_text()[-3000:]}")
            time.sleep(0.5)
        out = {}
        for model in ("shop", "plain"):
            schema = json.loads(
                next((root / "var" / "models" / model).glob("*/driftwarden/schema.json")).read_text()
            )
            rows = json_rows(data, [f["name"] for f in schema["features"]])
            req_per_s(url, model, rows, clients=clients, seconds=1.0)  # warm up
            out[model] = round(req_per_s(url, model, rows, clients=clients, seconds=seconds), 1)
        return out
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=0, help="rows of data (default: the levels)")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--epochs", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--ps", default="1,2", help="parameter-server counts to compare")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dw-sharded-") as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTWARDEN_")}
        env.update(
            DRIFTWARDEN_DATABASE_URL=f"sqlite:///{root / 'var' / 'dw.db'}",
            DRIFTWARDEN_REGISTRY_PATH=str(root / "var" / "models"),
            DRIFTWARDEN_CHECKPOINT_PATH=str(root / "var" / "checkpoints"),
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        data = make_data(root / "shops.csv", rows=a.rows or a.levels, levels=a.levels)
        print(
            f"data: {a.rows or a.levels} rows, merchant_id with {a.levels} levels, "
            f"--embed merchant_id:{a.dim}"
        )
        embed = ["--embed", f"merchant_id:{a.dim}", "--epochs", str(a.epochs), "--data", str(data)]
        for ps in (int(p) for p in a.ps.split(",")):
            args = ["--model", "shop", "--mode", "async", "--ps", str(ps), "--workers", "2", *embed]
            print(json.dumps(train(env, root, args, name=f"ps{ps}")))
        versions = sorted((root / "var" / "models" / "shop").glob("[0-9]*"), key=lambda p: int(p.name))
        latest = versions[-1]
        print(f"export {latest.name}: {dir_bytes(latest) / 2**20:.1f} MiB (SavedModel and driftwarden files)")
        plain = ["--model", "plain", "--mode", "local", "--exclude", "merchant_id", "--epochs", str(a.epochs)]
        print(json.dumps(train(env, root, [*plain, "--data", str(data)], name="plain")))
        print(f"export plain: {dir_bytes(root / 'var' / 'models' / 'plain' / '1') / 2**20:.1f} MiB")
        for model, version in (("shop", latest.name), ("plain", "1")):
            subprocess.run(
                [sys.executable, "-m", "service.cli", "models", "promote", model, version],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        rates = serve_bench(env, root, data, clients=a.clients, seconds=a.seconds)
        print(
            f"serving req/s (1 row, {a.clients} clients, --no-log): with the id {rates['shop']}, "
            f"without {rates['plain']}"
        )


if __name__ == "__main__":
    main()
