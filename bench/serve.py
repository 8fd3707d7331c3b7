"""Serving benchmark: the real server over loopback, driven by ``wrk`` (or the older Python generator).

The load generator is ``wrk`` by default, a C program (Debian's package; the bench installs it with
``apt-get install -y wrk`` when it is missing), so the load does not share the server's interpreter; a
Lua script written by the bench posts the TF Serving row format ``{"instances": [...]}`` with ``--rows``
rows per request (1 and 32 by default) and prints one JSON line (requests, non-2xx and socket errors,
duration, latency percentiles). ``--driver python`` keeps the earlier asyncio generator (it runs in this
process, one core's worth of Python beside the server's).

Configurations (``--configs``, comma-separated; ``-wN`` runs N worker processes):

- ``a-{sqlite,pg}-{fast,durable}[-nometrics][-wN]``: driftwarden with the prediction log on (that backend
  and durability; ``-nometrics``: Prometheus metrics off, to price them);
- ``b[-wN]``: driftwarden ``--no-log`` (no log, no metrics, no monitor);
- ``c``: a naive FastAPI endpoint calling Keras ``model.predict`` per request;
- ``f[-wN]``: the plain FastAPI endpoint of ``bench/plain_fastapi.py`` (the SavedModel's serving
  signature, no checks, no log), one uvicorn process or ``uvicorn --workers N``; ``--compare-fastapi``
  adds ``f`` and ``f-w2``;
- ``NAME@base`` (an ``a`` or ``b`` config): the same server run with the code of another checkout
  (``--baseline PATH``, e.g. a worktree of main, put first on the server's PYTHONPATH; the same
  virtualenv), so that a change and its baseline are measured side by side in one run; ``--baseline`` adds
  ``NAME@base`` for each ``a`` and ``b`` config, and the ratios add this tree / baseline.

A lone client's targets (issue 46: c=1, log on to PostgreSQL, ``a-pg-fast`` against ``f``: 1 row at least
1.0x the req/s and at most 1.5x the p99, 32 rows at least 1.0x the req/s) are printed as met or missed.

Servers run one at a time (this is a 2-core machine): start, wait for every worker, warm up (``--warmup``
seconds per size at c=8), then every rows-per-request size at concurrency 1, 8 and 64 (``--levels``) for
``--seconds`` each; ``--repeat N`` runs the whole sequence N times and the tables show medians. With
``--interleave``, every server is started once and stays up (one measured at a time, the others idle), and
the ``--repeat`` rounds run config by config within each cell, each round starting with the next config (so
that none always follows the others' writes): a log-on cell and its ``--no-log`` cell are then measured back
to back, and the log-on / ``--no-log`` ratios are also given as the median of the rounds' paired ratios
(req/s, and the server's CPU per request), which this VM's drifting speed moves far less than a ratio of two
medians taken minutes apart. ``wrk``
runs min(c, 2) threads; its latency percentiles are its own (with its correction for coordinated
omission), the Python generator's are raw. With the log on, the bench waits after every cell until no
request is in flight and the log's queue and spool are empty, so that a cell does not inherit the backlog
of the one before, and prints how long that took (a writer that keeps up drains within a second).

Every cell also prints the CPU time it cost per answered request (``cpu us/req: loop .. other .. pg ..
wrk ..``; per row too in ``--json``; the summary adds a CPU table, medians over repeats). On this VM the
CPU's speed varies up to ~1.7x from run to run and req/s moves with it; CPU time per request counts the
work a request costs, not how much of the machine the server got, so it is the steadier figure (time the
host steals is not charged to a process; a slower clock still shows). And PostgreSQL shares the two cores
with the server here, so the log's price includes the database's CPU, which req/s alone hides.

The figures come from ``/proc`` (utime + stime, read before the cell and after it, after the log has
drained when there is one): ``loop`` is the main thread (the event loop) of every process of the server's
process tree (the ``--workers N`` children included), ``other`` every other thread of it (the log writer,
TensorFlow's pools, ...; and a process that exited mid-cell, counted through its parent), ``pg`` every
process named ``postgres*`` (the whole server, other databases' work and its background processes
included), ``wrk`` the load generator (``--driver python``: this process); total = loop + other, + pg for
a config that logs to PostgreSQL (elsewhere pg is only noise). "log's CPU" is what the log costs the
machine per request: a log-on config's total minus that of ``b`` (``b-wN``) at the same size and
concurrency. Without ``/proc`` the figures print as n/a.

After each log-on configuration the server is stopped gracefully and the log rows are counted: they must
equal the rows the server answered (its ``driftwarden_predictions_total``, warm-up included; not
checkable with ``-nometrics``), lie between the rows of the requests the load generator read answers to
and those it sent (``wrk`` abandons the requests in flight when its time is up; the Python generator waits
for them, so there the three agree exactly), and none may be dropped. A mismatch prints MISMATCH and makes
the exit code 1.

    .venv/bin/python bench/serve.py                 # default configs, 1 and 32 rows, ~6 minutes
    .venv/bin/python bench/serve.py --seconds 5 --configs a-pg-fast,a-pg-durable,b --compare-fastapi
    .venv/bin/python bench/serve.py --seconds 4 --configs a-pg-fast,a-pg-durable,b --levels 64 \
        --interleave --repeat 8                     # log on / --no-log, paired rounds
    .venv/bin/python bench/serve.py --seconds 5 --configs a-pg-fast,b,a-pg-fast-w2,b-w2 --rows 1
    .venv/bin/python bench/serve.py --seconds 5 --configs a-pg-fast,a-pg-fast-nometrics   # metrics' cost
    git worktree add --detach ../dw-main main       # a change against main, side by side, c=1 and c=64:
    .venv/bin/python bench/serve.py --seconds 4 --configs a-pg-fast,b,f --baseline ../dw-main \
        --levels 1 64 --interleave --repeat 3
    .venv/bin/python bench/serve.py --driver python --seconds 3 --configs a-sqlite-durable,b,c --rows 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from core.network import free_port

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (1, 8, 64)
ROWS = (1, 32)
PREDICT = "/v1/models/bench:predict"
DEFAULT_CONFIGS = "a-sqlite-durable,a-sqlite-fast,a-pg-durable,a-pg-fast,a-pg-fast-w2,b,b-w2,c"
PG_ADMIN = os.environ.get(
    "DRIFTWARDEN_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
CONFIG_RE = re.compile(
    r"(?P<base>a-(?P<backend>sqlite|pg)-(?P<durability>fast|durable)(?P<nometrics>-nometrics)?|b|c|f)"
    r"(?:-w(?P<workers>[1-9][0-9]*))?(?P<baseline>@base)?"
)
CONFIG_RULE = "a-{sqlite,pg}-{fast,durable}[-nometrics][-wN][@base], b[-wN][@base], c or f[-wN]"
# the ratios with a target: (numerator, denominator, rows per request, target)
LOG_TARGETS = {("a-pg-fast", 1): 0.95, ("a-pg-fast", 32): 0.90, ("a-pg-durable", 1): 0.85}  # issue 27
# issue 27: the serving process's CPU per request with the log on (fast) at most 15 % above --no-log's
CPU_TARGETS = {"a-pg-fast": 1.15}
# issue 46: a lone client (c=1), log on to PostgreSQL, against plain FastAPI: (rows, what) -> (target, bound)
FASTAPI_TARGETS = {
    (1, "req/s"): (1.0, "at least"),
    (1, "p99"): (1.5, "at most"),
    (32, "req/s"): (1.0, "at least"),
}


# -- configurations -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    name: str
    kind: str  # a: log on, b: --no-log, c: naive Keras, f: plain FastAPI
    backend: str = "sqlite"
    durability: str = "fast"
    metrics: bool = True
    workers: int = 1
    baseline: bool = False  # NAME@base: the server's code from --baseline's checkout

    @property
    def logs(self) -> bool:
        return self.kind == "a"

    @property
    def uses_pg(self) -> bool:
        """Logs to PostgreSQL: its CPU is part of what serving costs."""
        return self.logs and self.backend == "pg"

    @property
    def single(self) -> str:
        """The same configuration in one process (``a-pg-fast`` for ``a-pg-fast-w2``)."""
        return re.sub(r"-w[0-9]+(?=(@base)?$)", "", self.name)

    @property
    def no_log(self) -> str:
        """Its ``--no-log`` configuration: as many workers, the same code (``a-pg-fast@base``: ``b@base``)."""
        return ("b" if self.workers == 1 else f"b-w{self.workers}") + ("@base" if self.baseline else "")


def parse_config(name: str) -> Config:
    """``a-pg-fast-w2`` -> Config; anything else is an error naming the rule."""
    m = CONFIG_RE.fullmatch(name)
    if m is None or (m["base"] == "c" and m["workers"]) or (m["base"] in "cf" and m["baseline"]):
        raise SystemExit(f"--configs: '{name}' is not a configuration (use {CONFIG_RULE})")
    base = m["base"]
    return Config(
        name=name,
        kind=base[0],
        backend=m["backend"] or "sqlite",
        durability=m["durability"] or "fast",
        metrics=not m["nometrics"],
        workers=int(m["workers"] or 1),
        baseline=bool(m["baseline"]),
    )


# -- measurements ---------------------------------------------------------------------------------
@dataclass
class Measure:
    """One configuration at one concurrency and one request size (one repeat)."""

    config: str
    rows: int
    concurrency: int
    answered: int  # 2xx answers
    errors: int  # non-2xx answers
    socket_errors: int  # connect/read/write errors and timeouts (wrk); 0 for the Python generator
    sent: int  # requests started (an upper bound: wrk abandons the ones in flight when the time is up)
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    repeat: int = 0
    drain_s: float = 0.0  # log on: seconds after the run until the log's queue and spool were empty
    cpu: CpuUse | None = None  # CPU seconds the cell cost (None: no /proc)

    @property
    def rps(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0

    def cpu_us(self, per_rows: bool = False) -> dict[str, float | None]:
        """CPU microseconds per answered request (or per row) by part; None values when unknown."""
        n = self.answered * (self.rows if per_rows else 1)
        parts = self.cpu.parts(parse_config(self.config).uses_pg) if self.cpu else dict.fromkeys(CPU_PARTS)
        return {k: per_unit(v, n) for k, v in parts.items()}

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "rps": self.rps,
            "rows_per_s": self.rps * self.rows,
            "cpu_us_per_req": self.cpu_us(),
            "cpu_us_per_row": self.cpu_us(per_rows=True),
        }


# -- CPU accounting -------------------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")
# loop: the servers' main threads; other: their other threads (and processes that exited mid-cell);
# pg: PostgreSQL; gen: the load generator; server: loop + other; total: server (+ pg when it logs there)
CPU_PARTS = ("loop", "other", "pg", "gen", "server", "total")


@dataclass(frozen=True)
class ProcStat:
    """The fields of one ``/proc/<pid>/stat`` (or ``/proc/<pid>/task/<tid>/stat``) line the bench uses."""

    comm: str
    ppid: int
    start: int  # start time after boot in clock ticks: with the pid, the identity of a process
    cpu_s: float  # utime + stime (fields 14 and 15)
    children_s: float  # cutime + cstime (fields 16 and 17): the children it waited for


def parse_stat(line: str) -> ProcStat:
    """One stat line; the command name may hold spaces and parentheses, so it ends at the last ')'."""
    head, paren, rest = line.rpartition(")")
    if not paren or "(" not in head:
        raise ValueError(f"not a /proc stat line: {line[:80]!r}")
    f = rest.split()  # f[0] is field 3 (state): field n is f[n - 3]
    return ProcStat(
        comm=head.partition("(")[2],
        ppid=int(f[1]),
        start=int(f[19]),
        cpu_s=(int(f[11]) + int(f[12])) / CLK_TCK,
        children_s=(int(f[13]) + int(f[14])) / CLK_TCK,
    )


def read_stat(path: str) -> ProcStat | None:
    """The stat file at ``path``, or None when it is gone (the process or thread exited)."""
    try:
        with open(path) as fh:
            return parse_stat(fh.read())
    except (OSError, ValueError, IndexError):
        return None


def processes() -> dict[int, ProcStat]:
    """Every process in /proc now (one that exits while this reads is left out)."""
    found: dict[int, ProcStat] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := read_stat(f"/proc/{name}/stat")) is not None:
            found[int(name)] = st
    return found


def descendants(procs: dict[int, ProcStat], root: int) -> set[int]:
    """``root`` and every process below it (uvicorn's workers, their helpers)."""
    children: dict[int, list[int]] = {}
    for pid, st in procs.items():
        children.setdefault(st.ppid, []).append(pid)
    tree: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in tree:
            tree.add(pid)
            todo += children.get(pid, [])
    return tree


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds used so far by the server's processes, PostgreSQL and the load generator."""

    server: dict[tuple[int, int], tuple[float, float]]  # (pid, start) -> (process + waited children, main)
    pg: float
    gen: float


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds one cell cost, by part."""

    loop_s: float
    other_s: float
    pg_s: float
    gen_s: float

    def parts(self, uses_pg: bool) -> dict[str, float | None]:
        """Seconds by part (``CPU_PARTS``); PostgreSQL's count in the total of a config that logs there."""
        server = self.loop_s + self.other_s
        return {
            "loop": self.loop_s,
            "other": self.other_s,
            "pg": self.pg_s,
            "gen": self.gen_s,
            "server": server,
            "total": server + (self.pg_s if uses_pg else 0.0),
        }


def generator_cpu_s(driver: str) -> float:
    """CPU seconds of the load generator so far: ``wrk`` runs as a child this process waits for; the
    Python generator runs in this process."""
    import resource

    use = resource.getrusage(resource.RUSAGE_CHILDREN if driver == "wrk" else resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def cpu_snapshot(server_pid: int, driver: str) -> CpuSnapshot | None:
    """Where the CPU clocks stand now (None without /proc)."""
    if not os.path.isdir("/proc/self/task"):
        return None
    procs = processes()
    server: dict[tuple[int, int], tuple[float, float]] = {}
    for pid in descendants(procs, server_pid):
        st, main = procs[pid], read_stat(f"/proc/{pid}/task/{pid}/stat")
        if main is not None:
            server[(pid, st.start)] = (st.cpu_s + st.children_s, main.cpu_s)
    pg = sum(st.cpu_s + st.children_s for st in procs.values() if st.comm.startswith("postgres"))
    return CpuSnapshot(server, pg, generator_cpu_s(driver))


def cpu_used(before: CpuSnapshot | None, after: CpuSnapshot | None) -> CpuUse | None:
    """CPU seconds between two snapshots. A process counts with its waited-for children, so the time of
    one that exits mid-cell reaches its parent's total (as "other": its thread split is lost)."""
    if before is None or after is None:
        return None
    server = sum(v[0] for v in after.server.values()) - sum(v[0] for v in before.server.values())
    loop = sum(main - before.server.get(key, (0.0, 0.0))[1] for key, (_, main) in after.server.items())
    return CpuUse(loop, server - loop, after.pg - before.pg, after.gen - before.gen)


def per_unit(seconds: float | None, n: int) -> float | None:
    """Microseconds per unit for ``n`` units (requests or rows); None when unknown or ``n`` is 0."""
    return None if seconds is None or n <= 0 else seconds * 1e6 / n


def cpu_line(m: Measure, driver: str) -> str:
    """The progress line's CPU part: ``cpu us/req: loop 283 other 50 pg 18 wrk 40``."""
    us = m.cpu_us()
    if all(v is None for v in us.values()):
        return "cpu us/req: n/a"
    return "cpu us/req: " + " ".join(
        f"{label} {fmt_us(us[part])}"
        for part, label in (("loop", "loop"), ("other", "other"), ("pg", "pg"), ("gen", driver))
    )


def fmt_us(value: float | None, width: int = 0) -> str:
    """A figure in microseconds, or n/a."""
    return f"{value:{width}.0f}" if value is not None else f"{'n/a':>{width}s}"


# -- the Python load generator (--driver python) --------------------------------------------------
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


# -- wrk (--driver wrk) ---------------------------------------------------------------------------
WRK_LUA = """-- written by bench/serve.py: POST the bodies of a file (one a line) in turn, report a JSON line
local bodies = {}
for line in io.lines("%(body)s") do
  if #line > 0 then table.insert(bodies, line) end
end
wrk.method = "POST"
wrk.body = bodies[1]
wrk.headers["Content-Type"] = "application/json"

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

sent = 0
local reqs = nil
function request()
  sent = sent + 1
  if reqs == nil then
    reqs = {}
    for i, b in ipairs(bodies) do reqs[i] = wrk.format(nil, nil, nil, b) end
  end
  return reqs[(sent - 1) %% #reqs + 1]
end

function done(summary, latency, requests)
  local n = 0
  for _, t in ipairs(threads) do n = n + t:get("sent") end
  local e = summary.errors
  io.write(string.format(
    '{"requests": %%d, "sent": %%d, "duration_us": %%d, "status_errors": %%d, "connect": %%d, ' ..
    '"read": %%d, "write": %%d, "timeout": %%d, "p50_us": %%d, "p90_us": %%d, "p99_us": %%d}\\n',
    summary.requests, n, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99)))
end
"""


def write_wrk_script(root: Path, name: str, bodies: list[bytes]) -> Path:
    """A ``wrk`` Lua script posting ``bodies`` in turn (each one JSON document on one line)."""
    body_path = root / f"{name}.jsonl"
    body_path.write_bytes(b"\n".join(bodies) + b"\n")
    script = root / f"{name}.lua"
    script.write_text(WRK_LUA % {"body": str(body_path)})
    return script


def ensure_wrk() -> str:
    """The path of ``wrk``; installs Debian's package first when it is missing."""
    path = shutil.which("wrk")
    if path:
        return path
    print("wrk is not installed: installing Debian's package (apt-get install -y wrk) ...", flush=True)
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "-q", "wrk"]
    if subprocess.run(install, env=env).returncode != 0:  # an old package list: update once, retry
        subprocess.run([*sudo, "apt-get", "update", "-q"], env=env)
        subprocess.run(install, env=env)
    path = shutil.which("wrk")
    if not path:
        raise SystemExit("--driver wrk: could not install wrk (apt-get install wrk); or use --driver python")
    return path


def run_wrk(
    wrk: str, url: str, script: Path, concurrency: int, seconds: float, timeout_s: float
) -> dict[str, Any]:
    """One ``wrk`` run; returns the JSON line its ``done()`` printed."""
    cmd = [
        wrk,
        "-t",
        str(min(concurrency, 2)),
        "-c",
        str(concurrency),
        "-d",
        f"{max(1, round(seconds))}s",
        "--timeout",
        f"{max(1, round(timeout_s))}s",
        "-s",
        str(script),
        url + PREDICT,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@dataclass
class Driver:
    """Sends one request size to one server at one concurrency, as ``wrk`` or the Python generator."""

    kind: str
    root: Path
    timeout_s: float
    max_requests: int
    wrk: str = ""
    scripts: dict[int, Path] = field(default_factory=dict)
    bodies: dict[int, bytes] = field(default_factory=dict)

    def add_body(self, rows: int, body: bytes) -> None:
        self.bodies[rows] = body
        if self.kind == "wrk":
            self.scripts[rows] = write_wrk_script(self.root, f"post-{rows}", [body])

    def measure(self, config: str, url: str, rows: int, concurrency: int, seconds: float) -> Measure:
        if self.kind == "wrk":
            r = run_wrk(self.wrk, url, self.scripts[rows], concurrency, seconds, self.timeout_s)
            return Measure(
                config=config,
                rows=rows,
                concurrency=concurrency,
                answered=r["requests"] - r["status_errors"],
                errors=r["status_errors"],
                socket_errors=r["connect"] + r["read"] + r["write"] + r["timeout"],
                sent=r["sent"],
                seconds=r["duration_us"] / 1e6,
                p50_ms=r["p50_us"] / 1000.0,
                p90_ms=r["p90_us"] / 1000.0,
                p99_ms=r["p99_us"] / 1000.0,
            )
        lr = asyncio.run(run_level(url, PREDICT, self.bodies[rows], concurrency, seconds, self.max_requests))
        return Measure(
            config=config,
            rows=rows,
            concurrency=concurrency,
            answered=lr.requests - lr.errors,
            errors=lr.errors,
            socket_errors=0,
            sent=lr.requests,
            seconds=lr.seconds,
            p50_ms=lr.pct(0.5),
            p90_ms=lr.pct(0.9),
            p99_ms=lr.pct(0.99),
        )

    def warm_up(self, config: str, url: str, rows: int, seconds: float) -> Measure:
        """A few hundred requests or more at c=8 (their rows are logged too, so they are counted)."""
        if self.kind == "wrk":
            return self.measure(config, url, rows, 8, seconds)
        saved, self.max_requests = self.max_requests, 300
        try:
            return self.measure(config, url, rows, 8, seconds)
        finally:
            self.max_requests = saved


# -- servers --------------------------------------------------------------------------------------
@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path


def wait_ready(server: Server, probe: str, workers: int, timeout: float = 180) -> None:
    """Until ``probe`` answers 200 and every uvicorn worker has logged its startup (``--workers N``:
    a worker still loading TensorFlow does not accept yet, and the measurement must not start without it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited with {server.proc.returncode}:\n{tail(server.log)}")
        started = server.log.read_text(errors="replace").count("Application startup complete")
        try:
            if started >= workers and httpx.get(server.url + probe, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server did not become ready:\n{tail(server.log)}")


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def spawn(cmd: list[str], env: dict[str, str], log: Path) -> Server:
    """Start ``cmd`` on a free port (``--port`` appended), its output to ``log``."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*cmd, "--port", str(port)], env={**os.environ, **env}, cwd=ROOT, stdout=out, stderr=out
        )
    return Server(proc, f"http://127.0.0.1:{port}", log)


def start_server(
    config: Config, root: Path, model_path: Path, db_url: str, baseline: Path | None = None
) -> Server:
    """Start ``config``'s server and wait until every worker answers (``NAME@base``: ``baseline``'s code)."""
    log = root / f"{config.name}.log"
    if config.kind == "c":
        server = spawn([sys.executable, __file__, "naive-server", "--model", str(model_path)], {}, log)
        wait_ready(server, "/health", 1)
        return server
    if config.kind == "f":
        cmd = [
            str(ROOT / ".venv/bin/uvicorn"),
            "bench.plain_fastapi:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--workers",
            str(config.workers),
            "--log-level",
            "info",
            "--no-access-log",
        ]
        server = spawn(cmd, {"DW_BENCH_MODEL_PATH": str(model_path)}, log)
        wait_ready(server, "/health", config.workers)
        return server
    env = {
        "DRIFTWARDEN_DATABASE_URL": db_url,
        "DRIFTWARDEN_SPOOL_PATH": str(root / "spool" / config.name),
        "DRIFTWARDEN_RETENTION_INTERVAL_S": "0",
        "DRIFTWARDEN_MONITOR_ENABLED": "false",  # serving and logging only, no drift runs
        "DRIFTWARDEN_LOG_LEVEL": "INFO",  # uvicorn's "Application startup complete" per worker
    }
    if not config.metrics:
        env["DRIFTWARDEN_METRICS_ENABLED"] = "false"  # log on, metrics off
    if config.baseline:
        if baseline is None:
            raise SystemExit(f"{config.name}: a @base configuration needs --baseline PATH")
        env["PYTHONPATH"] = str(baseline)  # its packages before the virtualenv's editable install of ROOT
    extra = ["--no-log"] if config.kind == "b" else ["--durability", config.durability]
    cmd = [str(ROOT / ".venv/bin/driftwarden"), "serve", "--workers", str(config.workers), *extra]
    server = spawn(cmd, env, log)
    wait_ready(server, "/v2/models/bench/ready", config.workers)
    return server


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def metric_sum(text: str, name: str) -> float:
    """The sum of every series of ``name`` in a Prometheus text exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def served_rows(url: str) -> tuple[int, int]:
    """(rows the server answered, log rows it dropped) from /metrics, once no request is in flight."""
    last = None
    for _ in range(100):
        text = httpx.get(url + "/metrics", timeout=30).text
        now = (
            int(metric_sum(text, "driftwarden_predictions_total")),
            int(metric_sum(text, "driftwarden_prediction_log_rows_dropped_total")),
        )
        if metric_sum(text, "driftwarden_requests_in_flight") == 0 and now == last:
            return now
        last = now
        time.sleep(0.3)
    raise RuntimeError("the server's request counters did not settle")


def wait_drained(url: str, timeout_s: float = 300.0) -> float:
    """Seconds until no request is in flight and the log's queue and spool are empty (-1: not within
    ``timeout_s``): how far the log writer fell behind the run. Each cell then starts from an empty log."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        text = httpx.get(url + "/metrics", timeout=30).text
        backlog = sum(
            metric_sum(text, name)
            for name in (
                "driftwarden_requests_in_flight",
                "driftwarden_prediction_log_queue_rows",
                "driftwarden_prediction_log_spool_rows",
            )
        )
        if backlog == 0:
            return time.monotonic() - t0
        time.sleep(0.1)
    return -1.0


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

    @app.post(PREDICT)
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

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="info", access_log=False)


# -- orchestration --------------------------------------------------------------------------------
def train_model(root: Path, n_rows: int, task: str = "binary") -> tuple[Path, list[dict[str, Any]]]:
    """The bench's model (the built-in MLP of ``task``: binary, multiclass or regression) and request rows."""
    from core.database import open_database
    from core.tabular import write_table
    from registry.schema import Task
    from training.cluster.datagen import TARGETS, generate
    from training.cluster.flows import run_training
    from training.cluster.progress import Progress
    from training.cluster.run_spec import Mode, TrainingRunSpec

    data = root / "train.parquet"
    write_table(generate(3000, seed=0, task=task), data)
    db = open_database(f"sqlite:///{root / 'train.db'}")
    target = TARGETS[Task.parse(task)]
    result = run_training(
        job=TrainingRunSpec(
            model_name="bench", data=data, mode=Mode.LOCAL, epochs=1.0, task=task, target=target
        ),
        db=db,
        registry=root / "models",
        checkpoint_root=root / "ckpt",
        progress=Progress("t", show_bar=False),
    )
    db.dispose()
    return Path(result.version.path), request_rows(generate(max(64, n_rows), seed=3, task=task), target)


def request_rows(columns: dict[str, Any], target: str = "default") -> list[dict[str, Any]]:
    """Columns of ``training.cluster.datagen.generate`` as request rows (JSON values, no target, NaN as
    null)."""
    rows = []
    for values in zip(*columns.values(), strict=True):
        row = {}
        for k, v in zip(columns, values, strict=True):
            if k == target:
                continue
            v = v.item() if hasattr(v, "item") else v
            row[k] = None if isinstance(v, float) and v != v else v
        rows.append(row)
    return rows


@contextlib.contextmanager
def scratch_pg_database(prefix: str = "driftwarden_bench") -> Iterator[str]:
    """A fresh PostgreSQL database on the server of ``PG_ADMIN``: yields its URL, drops it after."""
    from sqlalchemy import create_engine, text

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
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


def prepare_db(url: str, model_path: Path) -> None:
    from core.database import open_database
    from registry.service import promote, register_version

    db = open_database(url, upgrade=True)  # a scratch database: create its schema
    with db.session() as s:
        register_version(session=s, model_name="bench", version=1, path=model_path, metrics={}, lineage={})
        promote(session=s, model_name="bench", version=1)
    db.dispose()


def count_log(url: str) -> int:
    """Predictions in the log (one row of ``prediction_batches`` per request: their sizes summed)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        n = int(conn.execute(text("select coalesce(sum(size), 0) from prediction_batches")).scalar_one())
    engine.dispose()
    return n


def run_config(
    config: Config,
    *,
    repeat: int,
    root: Path,
    model_path: Path,
    driver: Driver,
    args: argparse.Namespace,
) -> tuple[list[Measure], dict[str, Any] | None]:
    """Start one server, warm it up, measure every size and level, stop it, check its log."""
    with contextlib.ExitStack() as stack:
        started = start_config(
            config, stack=stack, repeat=repeat, root=root, model_path=model_path, driver=driver, args=args
        )
        measures = [
            measure_cell(started, rows=rows, level=level, repeat=repeat, driver=driver, args=args)
            for rows in args.rows
            for level in args.levels
        ]
        return measures, finish_config(started, measures, repeat=repeat)


@dataclass
class Started:
    """A configuration's server, up and warmed, with its database and its warm-up measures."""

    config: Config
    server: Server
    db_url: str
    warm: list[Measure]


def start_config(
    config: Config,
    *,
    stack: contextlib.ExitStack,
    repeat: int,
    root: Path,
    model_path: Path,
    driver: Driver,
    args: argparse.Namespace,
) -> Started:
    """Make the configuration's database (a scratch PostgreSQL database dropped when ``stack`` closes), start
    its server (stopped when ``stack`` closes, if still running), wait for it and warm it up."""
    db_url = f"sqlite:///{root / f'{config.name}-{repeat}.db'}"
    if config.backend == "pg" and config.kind == "a":
        db_url = stack.enter_context(scratch_pg_database())
    if config.kind in ("a", "b"):
        prepare_db(db_url, model_path)
    server = start_server(config, root, model_path, db_url, args.baseline)

    def stop_if_running() -> None:
        if server.proc.poll() is None:
            stop(server.proc)

    stack.callback(stop_if_running)
    print(f"started {config.name} at {server.url} (workers: {config.workers})", flush=True)
    warm = [driver.warm_up(config.name, server.url, rows, args.warmup) for rows in args.rows]
    if config.logs and config.metrics:
        wait_drained(server.url)
    return Started(config, server, db_url, warm)


def measure_cell(
    started: Started, *, rows: int, level: int, repeat: int, driver: Driver, args: argparse.Namespace
) -> Measure:
    """One size at one concurrency on a started server, its CPU counted until its log drained."""
    config, server = started.config, started.server
    before = cpu_snapshot(server.proc.pid, args.driver)
    m = driver.measure(config.name, server.url, rows, level, args.seconds)
    m.repeat = repeat
    if config.logs and config.metrics:
        m.drain_s = wait_drained(server.url)
    m.cpu = cpu_used(before, cpu_snapshot(server.proc.pid, args.driver))
    print(
        f"{config.name:20s} rows={rows:<3d} c={level:<3d} {m.rps:8.1f} req/s "
        f"{m.rps * rows:9.1f} rows/s  p50 {m.p50_ms:7.2f} ms  p99 {m.p99_ms:7.2f} ms  "
        f"n={m.answered} non-2xx={m.errors} socket-errors={m.socket_errors}  "
        + cpu_line(m, args.driver)
        + (f"  log drained {m.drain_s:.1f} s later" if m.drain_s else ""),
        flush=True,
    )
    return m


def finish_config(started: Started, measures: list[Measure], *, repeat: int) -> dict[str, Any] | None:
    """Stop a log-on server and check its log against what it answered (``measures``: its cells); None for
    a configuration without a log (its server is stopped when the stack closes)."""
    config, server = started.config, started.server
    if not config.logs:
        return None
    served, dropped = served_rows(server.url) if config.metrics else (-1, -1)
    stop(server.proc)
    everything = started.warm + measures
    low = sum(m.answered * m.rows for m in everything)
    high = sum(m.sent * m.rows for m in everything)
    logged = count_log(started.db_url)
    ok = low <= logged <= high and (not config.metrics or (logged == served and dropped == 0))
    print(
        f"{config.name:20s} log: {logged} rows logged, server answered {served}, load generator "
        f"read {low} and sent {high}, dropped {dropped}: {'OK' if ok else 'MISMATCH'}",
        flush=True,
    )
    return {
        "config": config.name,
        "repeat": repeat,
        "logged_rows": logged,
        "served_rows": served,  # driftwarden_predictions_total (-1: metrics off)
        "answered_rows": low,  # 2xx answers the load generator read x rows per request
        "sent_rows": high,  # requests it sent x rows per request
        "rows_dropped": dropped,
        "ok": ok,
    }


def run_interleaved(
    configs: list[Config], *, root: Path, model_path: Path, driver: Driver, args: argparse.Namespace
) -> tuple[list[Measure], list[dict[str, Any]]]:
    """``--interleave``: every configuration's server started once and kept up; then ``--repeat`` rounds,
    each measuring every size and level on every configuration in turn, so that a log-on cell and its
    ``--no-log`` cell are measured minutes apart at most, on the same machine speed (each round starts with
    the next configuration, so that none always follows the others' writes); then each log is checked (one
    check per configuration, over all its rounds)."""
    measures: list[Measure] = []
    checks: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        started = [
            start_config(c, stack=stack, repeat=0, root=root, model_path=model_path, driver=driver, args=args)
            for c in configs
        ]
        for repeat in range(args.repeat):
            print(f"round {repeat + 1} of {args.repeat}", flush=True)
            turn = repeat % len(started)  # each round starts with the next config
            for rows in args.rows:
                for level in args.levels:
                    for s in started[turn:] + started[:turn]:
                        measures.append(
                            measure_cell(s, rows=rows, level=level, repeat=repeat, driver=driver, args=args)
                        )
        for s in started:
            check = finish_config(s, [m for m in measures if m.config == s.config.name], repeat=0)
            if check is not None:
                checks.append(check)
    return measures, checks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd")
    naive = sub.add_parser("naive-server")
    naive.add_argument("--model", type=Path, required=True)
    naive.add_argument("--port", type=int, required=True)
    parser.add_argument("--driver", choices=("wrk", "python"), default="wrk", help="Load generator.")
    parser.add_argument("--seconds", type=float, default=5.0, help="Time per level, size and config.")
    parser.add_argument(
        "--rows", type=int, nargs="+", default=list(ROWS), help="Rows per request (one or more sizes)."
    )
    parser.add_argument(
        "--levels", type=int, nargs="+", default=list(LEVELS), help="Concurrency levels (connections)."
    )
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="Comma-separated, see above.")
    parser.add_argument(
        "--compare-fastapi", action="store_true", help="Add f and f-w2 (bench/plain_fastapi.py)."
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="Run every config N times in turn; tables show medians."
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="Start every config's server once and run the --repeat rounds config by config within each "
        "cell; the log-on / --no-log ratios are then also the median of the rounds' paired ratios.",
    )
    parser.add_argument("--warmup", type=float, default=2.0, help="Warm-up seconds per size, at c=8.")
    parser.add_argument("--timeout", type=float, default=5.0, help="wrk's request timeout (seconds).")
    parser.add_argument(
        "--max-requests", type=int, default=40_000, help="Python driver: request cap per level."
    )
    parser.add_argument("--json", type=Path, help="Also write every result here.")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="A checkout of driftwarden (e.g. a worktree of main): each driftwarden config (a..., b...) also "
        "runs as NAME@base with that checkout's code (through PYTHONPATH, in the same virtualenv), side by "
        "side with this tree's; the ratios add this tree / baseline.",
    )
    parser.add_argument(
        "--task",
        choices=("binary", "multiclass", "regression"),
        default="binary",
        help="The served model's task (the built-in MLP trained on `data generate --task`).",
    )
    args = parser.parse_args()
    if args.cmd == "naive-server":
        naive_server(args.model, args.port)
        return
    for name, values in (("--rows", args.rows), ("--levels", args.levels)):
        if any(v < 1 for v in values):
            raise SystemExit(f"{name}: every value must be at least 1 (got {values})")
    if args.repeat < 1:
        raise SystemExit(f"--repeat: must be at least 1 (got {args.repeat})")
    names = [c for c in args.configs.split(",") if c]
    if args.compare_fastapi:
        names += [c for c in ("f", "f-w2") if c not in names]
    if args.baseline is not None:
        if not (args.baseline / "service" / "serving" / "app.py").is_file():
            raise SystemExit(f"--baseline: {args.baseline} is not a driftwarden checkout")
        args.baseline = args.baseline.resolve()
        names += [f"{n}@base" for n in names if n[0] in "ab" and not n.endswith("@base")]
    configs = [parse_config(c) for c in names]

    measures: list[Measure] = []
    checks: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dw-bench-") as tmp:
        root = Path(tmp)
        driver = Driver(args.driver, root, args.timeout, args.max_requests)
        if args.driver == "wrk":
            driver.wrk = ensure_wrk()
        print(f"training a {args.task} model ...", flush=True)
        model_path, sample = train_model(root, max(args.rows), args.task)
        gc.collect()
        gc.freeze()
        for rows in args.rows:
            driver.add_body(rows, json.dumps({"instances": sample[:rows]}).encode())
        if args.interleave:
            measures, checks = run_interleaved(
                configs, root=root, model_path=model_path, driver=driver, args=args
            )
        else:
            for repeat in range(args.repeat):
                for config in configs:
                    got, check = run_config(
                        config, repeat=repeat, root=root, model_path=model_path, driver=driver, args=args
                    )
                    measures += got
                    if check is not None:
                        checks.append(check)
    ratios, log_cpu = summary(measures, checks, args)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "driver": args.driver,
                    "seconds": args.seconds,
                    "repeat": args.repeat,
                    "measures": [m.as_dict() for m in measures],
                    "log_checks": checks,
                    "ratios": ratios,
                    "log_cpu_us_per_req": log_cpu,
                },
                indent=2,
            )
        )
    if not all(c["ok"] for c in checks):
        sys.exit(1)


# -- summary --------------------------------------------------------------------------------------
@dataclass
class Cell:
    rps: float
    p50_ms: float
    p99_ms: float
    n: int  # repeats
    cpu: dict[str, float | None] = field(default_factory=dict)  # CPU_PARTS -> us per request


def median_or_none(values: list[float | None]) -> float | None:
    """The median of the known values (None when there are none)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def cells(measures: list[Measure]) -> dict[tuple[str, int, int], Cell]:
    """Median over the repeats of each (config, rows, concurrency)."""
    groups: dict[tuple[str, int, int], list[Measure]] = {}
    for m in measures:
        groups.setdefault((m.config, m.rows, m.concurrency), []).append(m)
    return {
        k: Cell(
            statistics.median(m.rps for m in ms),
            statistics.median(m.p50_ms for m in ms),
            statistics.median(m.p99_ms for m in ms),
            len(ms),
            {part: median_or_none([m.cpu_us()[part] for m in ms]) for part in CPU_PARTS},
        )
        for k, ms in groups.items()
    }


def summary(
    measures: list[Measure], checks: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Print the tables and the ratios with a target; return the ratios and the log's CPU."""
    table = cells(measures)
    configs = list(dict.fromkeys(m.config for m in measures))
    levels = args.levels
    top, low = max(levels), min(levels)
    how = f"{args.driver}, {args.seconds:g} s per cell" + (
        f", median of {args.repeat} runs" if args.repeat > 1 else ""
    )
    for rows in args.rows:
        print(f"\n{rows} row{'s' if rows > 1 else ''} per request ({how}):")
        heading = f"{'req/s':>8s} {'rows/s':>9s} {'p50':>6s} / {'p99 ms':6s}"
        print_grid(table, configs, levels, rows, 34, heading, partial(speed_cell, rows=rows))

    log_cpu = cpu_tables(table, configs, args)
    ratios: list[dict[str, Any]] = []

    def ratio(
        label: str,
        num: str,
        den: str,
        rows: int,
        c: int,
        what: str,
        target: float | None,
        bound: str = "at least",
    ) -> None:
        a, b = table.get((num, rows, c)), table.get((den, rows, c))
        if a is None or b is None:
            return
        x, y = {"req/s": (a.rps, b.rps), "p50": (a.p50_ms, b.p50_ms), "p99": (a.p99_ms, b.p99_ms)}[what]
        value = x / y if y else float("nan")
        met = target is not None and (value >= target if bound == "at least" else value <= target)
        sign = ">=" if bound == "at least" else "<="
        goal = "" if target is None else f"  (target {sign} {target:.2f}: {'met' if met else 'missed'})"
        print(
            f"  {label:34s} {num} / {den}, {rows} row(s), c={c}, {what}: "
            f"{x:.2f} / {y:.2f} = {value:.3f}{goal}"
        )
        ratios.append(
            {
                "ratio": label,
                "num": num,
                "den": den,
                "rows": rows,
                "concurrency": c,
                "what": what,
                "num_value": x,
                "den_value": y,
                "value": value,
                "target": target,
            }
        )

    print("\nratios")
    for name in configs:  # log on / --no-log, at the top level
        cfg = parse_config(name)
        if cfg.logs and cfg.metrics:
            base = cfg.no_log
            for rows in args.rows:
                target = LOG_TARGETS.get((name, rows)) if top == 64 else None
                ratio("log on / --no-log", name, base, rows, top, "req/s", target)
                if args.interleave:
                    cpu_target = CPU_TARGETS.get(name) if top == 64 else None
                    ratios.extend(paired(measures, name, base, rows, top, target, cpu_target))
    for name in configs:  # metrics on / off
        if name.endswith("-nometrics") or "-nometrics-" in name:
            on = name.replace("-nometrics", "")
            for rows in args.rows:
                ratio("metrics on / off", on, name, rows, top, "req/s", None)
    for dw in ("a-pg-fast", "b", "a-pg-fast@base", "b@base"):  # driftwarden / plain FastAPI
        for rows in args.rows:
            for c in dict.fromkeys((low, top)):
                ratio(
                    "driftwarden / plain FastAPI",
                    dw,
                    "f",
                    rows,
                    c,
                    "req/s",
                    *fastapi_goal(dw, rows, c, "req/s"),
                )
            ratio("driftwarden / plain FastAPI", dw, "f", rows, low, "p50", None)
            ratio(
                "driftwarden / plain FastAPI", dw, "f", rows, low, "p99", *fastapi_goal(dw, rows, low, "p99")
            )
    for name in configs:  # this tree / --baseline's
        if name.endswith("@base"):
            for rows in args.rows:
                for c in levels:
                    ratio("this tree / baseline", name.removesuffix("@base"), name, rows, c, "req/s", None)
                ratio("this tree / baseline", name.removesuffix("@base"), name, rows, low, "p99", None)
    for name in configs:  # N workers / one
        cfg = parse_config(name)
        if cfg.workers > 1:
            for rows in args.rows:
                ratio(f"w{cfg.workers} / single", name, cfg.single, rows, top, "req/s", None)
    for name in configs:  # driftwarden -wN / plain FastAPI -wN
        cfg = parse_config(name)
        if cfg.workers > 1 and cfg.kind in ("a", "b"):
            for rows in args.rows:
                ratio(
                    "driftwarden-wN / plain FastAPI-wN",
                    name,
                    f"f-w{cfg.workers}",
                    rows,
                    top,
                    "req/s",
                    None,
                )
    if "c" in configs:
        for name in configs:
            if name.startswith("a"):
                ratio("driftwarden / naive Keras", name, "c", args.rows[0], top, "req/s", None)
    backlog = [m for m in measures if m.drain_s >= 0.5 or m.drain_s < 0]
    if backlog:
        print("\nlog backlog: seconds after a run until the log's queue and spool were empty (-1: > 300 s)")
        for m in backlog:
            print(f"  {m.config} (run {m.repeat + 1}), {m.rows} row(s), c={m.concurrency}: {m.drain_s:.1f} s")
    print()
    for check in checks:
        print(
            f"  log check {check['config']} (run {check['repeat'] + 1}): {check['logged_rows']} logged, "
            f"{check['served_rows']} answered by the server: {'OK' if check['ok'] else 'MISMATCH'}"
        )
    return ratios, log_cpu


def fastapi_goal(config: str, rows: int, c: int, what: str) -> tuple[float | None, str]:
    """Issue 46's target of ``config`` / plain FastAPI (a lone client, log on to PostgreSQL) and its bound."""
    if config != "a-pg-fast" or c != 1:
        return None, "at least"
    return FASTAPI_TARGETS.get((rows, what), (None, "at least"))


def paired(
    measures: list[Measure],
    num: str,
    den: str,
    rows: int,
    c: int,
    target: float | None,
    cpu_target: float | None,
) -> list[dict[str, Any]]:
    """``--interleave``: the ratios of each round's two cells (req/s against ``target``, and the server's CPU
    per request, loop + other, against ``cpu_target``), printed as their median and range; returned as ratio
    entries."""

    def by_round(config: str) -> dict[int, Measure]:
        return {m.repeat: m for m in measures if (m.config, m.rows, m.concurrency) == (config, rows, c)}

    a, b = by_round(num), by_round(den)
    rounds = sorted(set(a) & set(b))
    speed = [a[r].rps / b[r].rps for r in rounds if b[r].rps]
    cpu = [
        x / y for r in rounds if (x := a[r].cpu_us()["server"]) is not None and (y := b[r].cpu_us()["server"])
    ]
    found: list[dict[str, Any]] = []
    for what, values, goal, better in (
        ("req/s", speed, target, "higher"),
        ("server CPU us/req", cpu, cpu_target, "lower"),
    ):
        if not values:
            continue
        mid = statistics.median(values)
        verdict = ""
        if goal is not None:
            met = mid >= goal if better == "higher" else mid <= goal
            sign = ">=" if better == "higher" else "<="
            verdict = f"  (target {sign} {goal:.2f}: {'met' if met else 'missed'})"
        print(
            f"  {'  paired rounds':34s} {num} / {den}, {rows} row(s), c={c}, {what}: median {mid:.3f} "
            f"(min {min(values):.3f}, max {max(values):.3f}, {len(values)} rounds){verdict}"
        )
        found.append(
            {
                "ratio": "log on / --no-log, paired rounds",
                "num": num,
                "den": den,
                "rows": rows,
                "concurrency": c,
                "what": what,
                "values": values,
                "value": mid,
                "target": goal,
            }
        )
    return found


def print_grid(
    table: dict[tuple[str, int, int], Cell],
    configs: list[str],
    levels: list[int],
    rows: int,
    width: int,
    heading: str,
    show: Callable[[Cell], str],
) -> None:
    """One table of a rows-per-request size: a line per config, a column of ``width`` per level (``heading``
    over each, ``show(cell)`` in it, ``-`` for a cell not measured)."""
    print(f"{'':20s} " + " | ".join(f"{'c=' + str(c):^{width}s}" for c in levels))
    print(f"{'config':20s} " + " | ".join(heading for _ in levels))
    for name in configs:
        parts = []
        for c in levels:
            cell = table.get((name, rows, c))
            parts.append(show(cell) if cell else f"{'-':^{width}s}")
        print(f"{name:20s} " + " | ".join(parts))


def cpu_tables(
    table: dict[tuple[str, int, int], Cell], configs: list[str], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Print the CPU microseconds per request of every cell and the log's CPU per rows size; return
    the latter."""
    levels, width = args.levels, 23
    found: list[dict[str, Any]] = []
    for rows in args.rows:
        print(
            f"\nCPU us per request, {rows} row{'s' if rows > 1 else ''} per request (loop: the server's "
            "event-loop threads, other: its other threads, pg: PostgreSQL, total: loop + other, + pg for a "
            "config that logs to PostgreSQL):"
        )
        heading = f"{'loop':>5s} {'other':>5s} {'pg':>4s} {'total':>6s}"
        print_grid(table, configs, levels, rows, width, heading, lambda cell: cpu_cell(cell.cpu))
        for name in configs:
            found += log_cpu_line(table, parse_config(name), rows, levels)
    return found


def speed_cell(cell: Cell, *, rows: int) -> str:
    """One cell of a throughput table: req/s, rows/s, p50 and p99 milliseconds."""
    return f"{cell.rps:8.1f} {cell.rps * rows:9.1f} {cell.p50_ms:6.2f} / {cell.p99_ms:6.1f}"


def cpu_cell(us: dict[str, float | None]) -> str:
    """One cell of the CPU table: loop, other, pg and total microseconds per request."""
    return " ".join(
        fmt_us(us.get(part), width) for part, width in (("loop", 5), ("other", 5), ("pg", 4), ("total", 6))
    )


def log_cpu_line(
    table: dict[tuple[str, int, int], Cell], config: Config, rows: int, levels: list[int]
) -> list[dict[str, Any]]:
    """What the log costs the machine per request: a log-on config's total (its server, + PostgreSQL when
    it logs there) minus that of ``b`` with as many workers; printed on one line, returned per level."""
    if not config.logs:
        return []
    base = config.no_log
    found: list[dict[str, Any]] = []
    for c in levels:
        a, b = table.get((config.name, rows, c)), table.get((base, rows, c))
        if a is None or b is None:
            continue
        spent, saved = a.cpu.get("total"), b.cpu.get("total")
        value = None if spent is None or saved is None else spent - saved
        found.append(
            {"config": config.name, "base": base, "rows": rows, "concurrency": c, "us_per_req": value}
        )
    if found:
        pg = " + pg" if config.uses_pg else ""
        print(
            f"  log's CPU, {rows} row(s): {config.name} (loop + other{pg}) - {base} (loop + other): "
            + ", ".join(f"c={f['concurrency']} {fmt_us(f['us_per_req'])}" for f in found)
            + " us/req"
        )
    return found


if __name__ == "__main__":
    main()
