"""Alert backtest benchmark: how often the alert rules cry wolf on traffic without drift, and how many runs
they take to catch planted shifts, over windows of 5k, 10k, 100k and 1M predictions and runs every 1, 5 and 60
minutes (``driftwarden alerts backtest`` on each cell).

Self-contained: a seeded reference of 25 features (20 numeric of varied shapes, 5 categorical: the columns of
``bench/drift.py``) with a fixed calibrated binary model (its probability is the true one, every row
labelled) is registered with ``training.imports.import_reference`` in a scratch SQLite database in a
temporary folder (removed at the end), with the default alert rules. Each cell replays ``--days`` of runs at
``--rate`` predictions a minute (the last N predictions each run) through the real monitor engine and the real
rules (:mod:`alerts.backtest`), and prints the warnings on its windows, per rule its false notifications per
30 days and its detection delay per shift (runs and time; ``never``: not caught), the share of runs without
drift whose headline is green, and the wall seconds of the cell, then each rule's verdict
(:mod:`alerts.backtest_advice`) and why it never caught a shift.

Run: ``.venv/bin/python bench/alert_backtest.py [--windows 5000 10000 100000 1000000] [--intervals 1 5 60]
[--days 30] [--rate 100] [--reference-rows 50000] [--shift abrupt_mean ...] [--workers 1] [--seed 0]
[--json FILE]``; e.g. ``--windows 10000 --intervals 5`` for one cell.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent))

from drift import make_columns  # noqa: E402  (bench/drift.py: the same 25 columns)

from alerts.backtest import BacktestResult  # noqa: E402
from alerts.backtest_advice import never_lines  # noqa: E402
from alerts.backtest_flows import BacktestRequest, run_backtest  # noqa: E402
from core.config import Settings  # noqa: E402
from core.database import Database, open_database  # noqa: E402
from core.tabular import write_table  # noqa: E402
from registry.schema import Task  # noqa: E402
from registry.service import promote  # noqa: E402
from training.imports import ImportSpec, import_reference  # noqa: E402

MODEL = "bench_backtest"


def reference(rows: int, *, seed: int) -> dict[str, np.ndarray]:
    """The 25 columns, the model's probability ``score`` (a fixed logistic model of four features) and a label
    ``y`` drawn from it (so the model is calibrated)."""
    cols = make_columns(rows, seed=seed)
    rng = np.random.default_rng(seed + 1)
    logit = (
        0.8 * (cols["num_00"] - 50) / 10
        + 0.6 * (np.log(cols["num_01"]) - 10) / 0.5
        - 0.3 * (cols["num_02"] - 4) / 2
        + 0.5 * (cols["cat_0"] == "c0_0")
        - 1.0
    )
    score = 1.0 / (1.0 + np.exp(-logit))
    return {**cols, "score": score, "y": (rng.random(rows) < score).astype(np.int64)}


def register(root: Path, *, rows: int, seed: int) -> Settings:
    """The bench's model registered from its reference in a scratch database under ``root`` (and served)."""
    settings = Settings(
        database_url=SecretStr(f"sqlite:///{root / 'bench.db'}"), registry_path=root / "models"
    )
    path = write_table(reference(rows, seed=seed), root / "reference.parquet")
    spec = ImportSpec(
        model_name=MODEL, path=None, reference=path, target="y", task=Task.BINARY, prediction_column="score"
    )
    db = open_database(settings.database_url.get_secret_value(), upgrade=True)
    try:
        import_reference(spec=spec, db=db, registry=settings.registry_path)
        with db.session() as session:
            promote(session=session, model_name=MODEL, version=1)
    finally:
        db.dispose()
    return settings


def cell(
    db: Database, settings: Settings, args: argparse.Namespace, window: int, minutes: int
) -> dict[str, Any]:
    """One backtest: its result and wall seconds."""
    request = BacktestRequest(
        model_name=MODEL,
        days=args.days,
        interval=f"{minutes}m",
        window=window,
        rate=args.rate,
        shifts=tuple(args.shift or ()),
        seed=args.seed,
        workers=args.workers,
    )
    began = time.perf_counter()
    result = run_backtest(db=db, settings=settings, request=request)
    seconds = time.perf_counter() - began
    show(result, window=window, minutes=minutes, seconds=seconds)
    return {"window": window, "interval_minutes": minutes, "seconds": round(seconds, 1), **result.as_dict()}


def show(result: BacktestResult, *, window: int, minutes: int, seconds: float) -> None:
    """The cell's table: the warnings, a line per rule, the totals, then the verdicts and why-never lines."""
    plan, shifts = result.plan, [s.kind.value for s in result.shifts]
    print(f"\nwindow {window}, every {minutes} min: {plan.runs} runs of {plan.step} new rows, ", end="")
    print(f"{seconds:.1f} s wall")
    for warning in result.warnings:
        print(f"  warning: {warning}")
    print(f"  {'rule':28} {'false/30d':>9}  " + "  ".join(f"{s:>28}" for s in shifts))
    for r in result.rules:
        delays = {s: r.detection_delay_runs[s] for s in shifts}
        shown = "  ".join(
            f"{'never' if d is None else result.delay_text(d, s):>28}" for s, d in delays.items()
        )
        print(f"  {r.name:28} {r.false_notifications_per_30d:>9g}  {shown}")
    for label, at in (
        ("(one-off test sees it)", result.visible_at_run),
        ("(one-off test finds harm)", result.harmful_at_run),
    ):
        print(f"  {label:28} {'':>9}  " + "  ".join(f"{result.delay_text(at.get(s), s):>28}" for s in shifts))
    print(
        f"  {'total':28} {result.total_false_notifications_per_30d:>9g}  headline green in "
        f"{result.headline_green_fraction:.2%} of the runs without drift"
    )
    for r in result.rules:
        print(f"  {r.name}: {r.verdict}")
    for line in never_lines({r.name: r.not_caught for r in result.rules}, shifts):
        print(f"  never: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--windows", type=int, nargs="+", default=[5_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--intervals", type=int, nargs="+", default=[1, 5, 60], help="minutes between runs")
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=100.0, help="predictions a minute")
    parser.add_argument("--reference-rows", type=int, default=50_000)
    parser.add_argument("--shift", nargs="+", help="only these shifts (default: all four)")
    parser.add_argument("--workers", type=int, default=1, help="processes per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the cells' figures to this file")
    args = parser.parse_args()
    cells = []
    with tempfile.TemporaryDirectory(prefix="dw-backtest-") as tmp:
        settings = register(Path(tmp), rows=args.reference_rows, seed=args.seed)
        db = open_database(settings.database_url.get_secret_value())
        try:
            for window in args.windows:
                for minutes in args.intervals:
                    cells.append(cell(db, settings, args, window, minutes))
                    if args.json is not None:
                        args.json.write_text(json.dumps(cells, indent=2))
        finally:
            db.dispose()


if __name__ == "__main__":
    main()
