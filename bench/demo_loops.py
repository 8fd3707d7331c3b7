"""``driftwarden demo`` N times in a row, in three settings: does it close the loop every time (issue 41)?

Three modes, each ``--runs`` demos one after another (``--modes`` picks some):

- ``same-folder``: in one fresh folder (one ``./var``: the same SQLite database, registry and checkpoints),
  as ``make demo`` run again in a checkout;
- ``shared-pg``: in one fresh folder against one PostgreSQL database, created for the bench on the server
  of ``DRIFTWARDEN_TEST_PG_ADMIN_URL`` (default postgres@127.0.0.1:5432; dropped at the end), as a user
  with ``DRIFTWARDEN_DATABASE_URL`` set would;
- ``busy``: in one fresh folder while ``--burners`` processes (default: one per core) spin on the CPU,
  as a machine busy with other work.

Each run's exit status, duration and the model it used (a run after another uses ``credit-2``, ...) are
printed as they end, then a table; a failed run's last lines are shown and its whole output is kept in its
folder (``--keep`` keeps every folder). Exit code 1 when a run did not exit 0. It asserts no timing.

    .venv/bin/python bench/demo_loops.py                                 # 3 runs per mode, small demo
    .venv/bin/python bench/demo_loops.py --runs 1 --rows 20000 --epochs 3 # make demo's own sizes
    .venv/bin/python bench/demo_loops.py --modes busy --runs 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve import ROOT, scratch_pg_database  # noqa: E402  (bench/serve.py: a scratch PostgreSQL database)

MODES = ("same-folder", "shared-pg", "busy")
USES = re.compile(r"this run uses (\S+),")


@dataclass
class Run:
    mode: str
    number: int
    exit_code: int
    seconds: float
    model: str
    last_lines: str


def demo_env(database_url: str | None) -> dict[str, str]:
    """The caller's environment without its DRIFTWARDEN_* settings (the demo's defaults), this checkout's
    code first; with ``database_url``, that database (its schema created or upgraded by the demo)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTWARDEN_")}
    env["PYTHONPATH"] = str(ROOT)
    if database_url is not None:
        env["DRIFTWARDEN_DATABASE_URL"] = database_url
        env["DRIFTWARDEN_DATABASE_AUTO_UPGRADE"] = "true"
    return env


def run_demo(*, folder: Path, env: dict[str, str], args: argparse.Namespace, mode: str, number: int) -> Run:
    out = folder / f"run-{number}.out"
    cmd = [
        sys.executable,
        "-m",
        "service.cli",
        "demo",
        "--rows",
        str(args.rows),
        "--epochs",
        str(args.epochs),
    ]
    t0 = time.monotonic()
    with out.open("w") as sink:
        proc = subprocess.run(cmd, cwd=folder, env=env, stdout=sink, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - t0
    text = out.read_text(errors="replace")
    used = USES.search(" ".join(text.split()))
    model = used.group(1) if used else "credit"
    tail = "\n".join(line for line in text.splitlines()[-8:] if line.strip())
    return Run(mode, number, proc.returncode, seconds, model, tail)


@contextlib.contextmanager
def burners(n: int) -> Iterator[None]:
    """``n`` processes that keep a core each busy for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


def run_mode(mode: str, args: argparse.Namespace, root: Path) -> list[Run]:
    folder = root / mode
    folder.mkdir()
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(scratch_pg_database("driftwarden_demo")) if mode == "shared-pg" else None
        if mode == "busy":
            stack.enter_context(burners(args.burners))
        env = demo_env(url)
        runs = []
        for number in range(1, args.runs + 1):
            run = run_demo(folder=folder, env=env, args=args, mode=mode, number=number)
            runs.append(run)
            print(
                f"{mode:<12} run {number}: exit {run.exit_code} in {run.seconds:6.1f}s (model {run.model})",
                flush=True,
            )
            if run.exit_code != 0:
                print("  " + run.last_lines.replace("\n", "\n  "), flush=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="demos per mode, one after another (1 to 20)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--rows", type=int, default=8000, help="the demo's --rows (make demo: 20000)")
    parser.add_argument("--epochs", type=float, default=2.0, help="the demo's --epochs (make demo: 3)")
    parser.add_argument(
        "--burners", type=int, default=os.cpu_count() or 2, help="busy mode: spinning processes"
    )
    parser.add_argument("--keep", action="store_true", help="keep every run's folder (failed ones are kept)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not 1 <= args.runs <= 20 or not 1 <= args.burners <= 64:
        parser.error(f"--modes of {', '.join(MODES)} (not {unknown}), --runs 1 to 20, --burners 1 to 64")
    root = Path(tempfile.mkdtemp(prefix="driftwarden-demo-loops-"))
    print(
        f"demo --rows {args.rows} --epochs {args.epochs:g}, {args.runs} run(s) per mode, in {root}",
        flush=True,
    )
    runs = [run for mode in modes for run in run_mode(mode, args, root)]
    print(f"\n{'mode':<12} {'run':>3} {'exit':>4} {'seconds':>8}  model")
    for r in runs:
        print(f"{r.mode:<12} {r.number:>3} {r.exit_code:>4} {r.seconds:>8.1f}  {r.model}")
    failed = [r for r in runs if r.exit_code != 0]
    print(f"{len(runs) - len(failed)} of {len(runs)} runs closed the loop (exit 0)")
    if failed or args.keep:
        print(f"the runs' folders and outputs: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
