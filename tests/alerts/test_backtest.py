"""``driftwarden alerts backtest``: the replayed lifecycle counts exactly the transitions to firing (by hand,
and as ``alerts.flows.evaluate_model`` makes them), each run's window is counted as a whole read of it would
be, a planted shift is caught at the run it enters the window, and bad input is one line and exit 2
(SQLite)."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from alerts import flows, service
from alerts.backtest import (
    GRADUAL_DAYS,
    Plan,
    Replay,
    RunOutcome,
    horizon,
    rule_findings,
    rules_view,
    summarize,
)
from alerts.backtest_flows import BacktestRequest, prepare
from alerts.backtest_traffic import Pool, Shift, ShiftKind, Traffic
from alerts.backtest_window import Layout, SlidingWindow
from alerts.models import Alert
from alerts.rules import DEFAULT_RULES
from alerts.specs import MONITOR_KINDS, Kind, RuleSpec
from core.bounds import (
    BACKTEST_MAX_COUNTED_ROWS,
    BACKTEST_MAX_RUNS,
    BACKTEST_MAX_WINDOW,
    MAX_PROCESSES,
    MAX_SEED,
)
from core.config import Settings, get_settings
from core.database import Database, open_database
from core.errors import Invalid
from core.tabular import write_table
from monitors.engine import compare, sketch_columns
from monitors.profile import Profile, build_reference_profile, profile_from_dict
from monitors.sketch import WindowSketch
from registry.schema import Task, infer_schema
from registry.service import promote
from tests.alerts.backtest_model import (
    FEATURES,
    MODEL,
    alerts_cli,
    open_test_database,
    reference,
    register_backtest_model,
)
from tests.alerts.conftest import register_model
from training.imports import ImportSpec, import_reference


@pytest.fixture
def database() -> Database:
    return open_test_database()


@pytest.fixture
def registered(database: Database, tmp_path: Path) -> Path:
    """Model ``bt`` registered from its reference (served elsewhere) and serving; the reference's path."""
    return register_backtest_model(database, tmp_path)


@pytest.fixture
def cli() -> typer.Typer:
    return alerts_cli()


def run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# --- the replayed lifecycle ---------------------------------------------------------------------------------


T, F, N = True, False, None  # active, inactive, the report cannot say


def outcome(now: bool | None, three: bool, each: dict[str, bool]) -> RunOutcome:
    return RunOutcome(
        green=not (now or three or any(each.values())),
        findings={
            "now": None if now is None else (("fp-now", now),),
            "three": (("fp-three", three),),
            "each": tuple(each.items()),
        },
    )


def test_false_notifications_are_the_transitions_to_firing_counted_by_hand() -> None:
    rules = (
        RuleSpec(name="now", kind=Kind.DATASET_DRIFT),
        RuleSpec(name="three", kind=Kind.DATASET_DRIFT, for_runs=3),
        RuleSpec(name="each", kind=Kind.FEATURE_DRIFT),
    )
    now = [T, T, F, T, N, T, F, T, F, F, F]  # fires at 0, 3 and 7 (a run that cannot say keeps it firing)
    three = [T, T, F, T, T, T, T, F, T, T, T]  # pending 0-1, resolved 2; fires at 5 and 10
    x = [T, T, T, F, F, F, F, F, F, F, F]  # fires at 0
    y = [F, T, F, T, N, T, F, F, F, F, T]  # fires at 1, 3 (N: absent from the findings: resolved), 5, 10
    runs = []
    for i in range(11):
        yi = y[i]
        each = {"fp-x": x[i]} | ({} if yi is None else {"fp-y": yi})
        runs.append(outcome(now[i], three[i], each))
    replay = Replay(rules)
    for r in runs:
        replay.step(r)
    assert replay.fired == Counter({"now": 3, "three": 2, "each": 5})
    assert replay.first == {"now": 0, "three": 5, "each": 0}

    plan = Plan(window=1000, step=500, runs=11, days=15.0, rate=100.0)
    result = summarize(plan=plan, rules=rules, replays={"no_drift": replay}, outcomes=runs, shifts=[])
    doc = result.as_dict()
    assert set(doc) == {
        "interval_seconds",
        "warnings",
        "shifts",
        "rules",
        "total_false_notifications_per_30d",
        "headline_green_fraction",
        "visible_at_run",
        "harmful_at_run",
    }
    assert [(r["name"], r["false_notifications_per_30d"]) for r in doc["rules"]] == [
        ("now", 6.0),
        ("three", 4.0),
        ("each", 10.0),
    ]  # counts x 30 / 15 days
    assert doc["total_false_notifications_per_30d"] == 20.0
    assert doc["headline_green_fraction"] == round(sum(r.green for r in runs) / 11, 4)
    keys = {"name", "kind", "for", "false_notifications_per_30d", "detection_delay_runs"}
    keys |= {"detection_delay_seconds", "not_caught", "verdict", "alternatives"}
    assert all(set(r) == keys for r in doc["rules"])


def drift_doc(dataset: bool, features: dict[str, bool]) -> dict[str, Any]:
    """A report's document as the rules read it: the dataset verdict and each feature's."""
    drifted = [name for name, d in features.items() if d]
    return {
        "dataset": {
            "drifted": dataset,
            "share": len(drifted) / len(features),
            "n_drifted": len(drifted),
            "n_features": len(features),
            "drift_share": 0.25,
        },
        "features": [
            {"name": name, "drifted": d, "result": {"test": "ks", "statistic": 0.3 if d else 0.01}}
            for name, d in features.items()
        ],
    }


def test_the_replay_fires_as_the_alert_lifecycle_does(database: Database, tmp_path: Path) -> None:
    register_model(database, tmp_path)  # model credit: features age, income, ...
    settings = get_settings()
    rules_in = [
        {"name": "drift", "kind": "dataset_drift", "for": 2},
        {"name": "each", "kind": "feature_drift", "params": {"feature": "*"}},
        {"name": "age", "kind": "feature_drift", "params": {"feature": "age"}, "for": 3},
    ]
    pattern = [
        (T, {"age": T, "income": F}),
        (T, {"age": T, "income": T}),
        (F, {"age": T, "income": F}),
        (T, {"age": F, "income": T}),
        (T, {"age": T, "income": T}),
        (T, {"age": T, "income": F}),
        (F, {"age": T, "income": F}),
        (F, {"age": F, "income": F}),
        (T, {"age": T, "income": T}),
    ]
    docs = [drift_doc(d, f) for d, f in pattern]
    fired: Counter[str] = Counter()
    try:
        with database.session() as session:
            flows.put_model_rules(session=session, model_name="credit", rules_in=rules_in)
        with database.session() as session:
            specs = tuple(service.effective_rules(session=session, model_name="credit").rules)
        start = datetime(2027, 1, 1, tzinfo=UTC)
        for i, doc in enumerate(docs):
            with database.session() as session:
                done = flows.evaluate_model(
                    session=session,
                    settings=settings,
                    model_name="credit",
                    report=doc,
                    now=start + timedelta(minutes=5 * i),
                )
                for alert_id in done.fired:
                    alert = session.get(Alert, alert_id)
                    assert alert is not None, alert_id
                    fired[alert.rule_name] += 1
    finally:
        database.dispose()
    replay = Replay(specs)
    for doc in docs:
        replay.step(RunOutcome(green=True, findings=rule_findings(specs, "credit", doc)))
    assert replay.fired == fired
    # by hand: drift at 1 and 4; each: age at 0, 4, 8 and income at 1, 3, 8; age (for 3) at 2 and 6
    assert fired == Counter({"drift": 2, "each": 6, "age": 2})


# --- the windows --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool_and_profile() -> tuple[Pool, Profile]:
    data = reference()
    columns = {name: data[name] for name in FEATURES}
    schema = infer_schema({**columns, "y": data["y"]}, target="y")
    profile = build_reference_profile(columns, schema, predictions=data["score"], labels=data["y"])
    pool = Pool(columns=columns, predictions=data["score"], labels=data["y"].astype(float), task=Task.BINARY)
    return pool, profile_from_dict(profile)


def same_counts(got: WindowSketch, want: WindowSketch) -> None:
    assert got.rows == want.rows
    for name, counts in want.numeric.items():
        assert np.array_equal(got.numeric[name].cells, counts.cells), name
        assert np.allclose(got.numeric[name].sums, counts.sums), name
        assert got.numeric[name].missing == counts.missing
    assert got.categorical == want.categorical
    assert got.prediction is not None and want.prediction is not None
    assert np.array_equal(got.prediction.cells, want.prediction.cells)
    assert (got.labels.rows, got.labels.true_pos, got.labels.false_pos) == (
        want.labels.rows,
        want.labels.true_pos,
        want.labels.false_pos,
    )
    assert (got.errors.seen, got.errors.alarms) == (want.errors.seen, want.errors.alarms)


@pytest.mark.parametrize(
    ("window", "step", "first"),
    [(1_000, 100, 0), (1_000, 300, 7), (1_234, 97, 5), (600, 500, 2), (250, 400, 3)],
)
@pytest.mark.parametrize("kind", [None, ShiftKind.NEW_CATEGORY, ShiftKind.PERFORMANCE_DROP])
def test_each_window_counts_as_a_whole_read_of_it(
    pool_and_profile: tuple[Pool, Profile], window: int, step: int, first: int, kind: ShiftKind | None
) -> None:
    pool, profile = pool_and_profile
    shift = None if kind is None else Shift(kind, "color" if kind is ShiftKind.NEW_CATEGORY else None)
    traffic = Traffic(pool, seed=3, rate=10.0, shift=shift, start=window)
    layout = Layout.of(window=window, step=step)
    sliding = SlidingWindow(profile=profile, traffic=traffic, layout=layout, threshold=0.5, first=first)
    for run in range(first, first + 20):
        rows = traffic.rows(layout.start(run), layout.end(run))
        whole = sketch_columns(
            profile=profile, columns=rows.columns, predictions=rows.predictions, labels=rows.labels
        )
        same_counts(sliding.next(), whole)


def test_the_rules_read_the_lean_document_as_the_whole_one(pool_and_profile: tuple[Pool, Profile]) -> None:
    pool, profile = pool_and_profile
    traffic = Traffic(pool, seed=4, rate=10.0, shift=Shift(ShiftKind.ABRUPT_MEAN, "a", 1.0), start=0)
    rows = traffic.rows(0, 2_000)
    report = compare(profile=profile, columns=rows.columns, predictions=rows.predictions, labels=rows.labels)
    rules = tuple(r for r in DEFAULT_RULES if r.kind in MONITOR_KINDS)
    lean = rule_findings(rules, MODEL, rules_view(report))
    assert lean == rule_findings(rules, MODEL, report.as_dict())
    assert any(active for _, active in lean["feature_drift"] or ())  # the shifted feature is found


# --- the command --------------------------------------------------------------------------------------------


def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yml"
    path.write_text(
        f"models:\n  {MODEL}:\n"
        "    - {name: a_now, kind: feature_drift, params: {feature: a}}\n"
        "    - {name: a_three, kind: feature_drift, params: {feature: a}, for: 3}\n"
        "    - {name: perf, kind: performance}\n"
    )
    return path


def test_an_abrupt_shift_is_caught_at_the_run_it_enters_the_window(
    cli: typer.Typer, registered: Path, tmp_path: Path
) -> None:
    # 500 new rows a run, a window of 1000: run 0's window holds 500 rows shifted by one sd
    args = ["--window", "1000", "--days", "0.25", "--rules", str(rules_file(tmp_path)), "--json"]
    code, out, err = run(cli, "alerts", "backtest", "--model", MODEL, "--shift", "abrupt_mean", *args)
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {
        "interval_seconds",
        "warnings",
        "shifts",
        "rules",
        "total_false_notifications_per_30d",
        "headline_green_fraction",
        "visible_at_run",
        "harmful_at_run",
    }
    assert doc["visible_at_run"] == {"abrupt_mean": 0}  # a one-off comparison of run 0's window sees it
    delays = {r["name"]: r["detection_delay_runs"] for r in doc["rules"]}
    assert delays == {
        "a_now": {"abrupt_mean": 0},
        "a_three": {"abrupt_mean": 2},
        "perf": {"abrupt_mean": None},
    }
    assert 0.0 <= doc["headline_green_fraction"] <= 1.0

    table_args = [a for a in args if a != "--json"]
    code, out, err = run(cli, "alerts", "backtest", "--model", MODEL, "--shift", "abrupt_mean", *table_args)
    assert code == 0, err
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 2}
    assert lines["a_three"].split("│")[-2].strip() == "2 runs (10 min)"  # the delay of the rule with for: 3
    assert lines["(a one-off test sees it)"].split("│")[-2].strip() == "0 runs (at once)"

    code, out, err = run(cli, "alerts", "backtest", "--model", MODEL, "--shift", "performance_drop", *args)
    assert code == 0, err
    perf = next(r for r in json.loads(out)["rules"] if r["name"] == "perf")
    assert perf["detection_delay_runs"]["performance_drop"] is not None


def test_worker_processes_give_the_same_figures(registered: Path) -> None:
    from alerts.backtest_flows import BacktestRequest, run_backtest

    settings: Settings = get_settings()
    db = open_database(settings.database_url.get_secret_value())
    try:
        request = BacktestRequest(
            model_name=MODEL, days=0.2, window=1000, interval="10m", shifts=("new_category",)
        )
        one = run_backtest(db=db, settings=settings, request=request)
        two = run_backtest(db=db, settings=settings, request=replace(request, workers=2))
    finally:
        db.dispose()
    assert one.as_dict() == two.as_dict()
    assert one.plan.runs == 28 and one.plan.step == 1000


def test_bad_input_is_one_line_and_exit_2(cli: typer.Typer, registered: Path, tmp_path: Path) -> None:
    bad_rules = tmp_path / "bad.yml"
    bad_rules.write_text(f"models:\n  {MODEL}:\n    - {{name: drift, kind: dataset_drift, for: 0}}\n")
    cases = {
        ("--model", "ghost"): "unknown model 'ghost'",
        ("--model", MODEL, "--rules", str(bad_rules)): "models.bt[0].for",
        ("--model", MODEL, "--interval", "5x"): "--interval: '5x' is not a duration",
        ("--model", MODEL, "--days", "0"): "--days",
        ("--model", MODEL, "--shift", "sideways"): "--shift 'sideways': not a shift",
        ("--model", MODEL, "--feature", "color"): "--feature 'color' is not a numeric feature",
        ("--model", MODEL, "--window", "10"): "--window 10",
    }
    for args, message in cases.items():
        code, out, err = run(cli, "alerts", "backtest", *args)
        assert (code, out) == (2, ""), (args, err)
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err, (args, err)

    registered.unlink()  # the version's reference is gone: nothing to resample
    code, out, err = run(cli, "alerts", "backtest", "--model", MODEL)
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert f"the reference of {MODEL}:1, {registered.resolve()}, is gone" in err


def test_every_option_that_sizes_work_is_bounded_before_any_work(
    cli: typer.Typer, registered: Path, database: Database
) -> None:
    """Each was unbounded: a window of 10**20 rows (4.5 GB before it was killed), 10**8 (1 GB in 25 s), a
    rate of 10**12 a minute (hours of counting), 100,000 worker processes, a negative seed (a bug)."""
    cases = {
        ("--window", "99999999999999999999"): f"'--window': Input should be less than or equal to "
        f"{BACKTEST_MAX_WINDOW}",
        ("--window", "100000000"): f"'--window': Input should be less than or equal to {BACKTEST_MAX_WINDOW}",
        ("--rate", "1e12"): "'--rate': Input should be less than or equal to 10000000",
        ("--rate", "1e6"): f"draw 864,100,000 rows: at most {BACKTEST_MAX_COUNTED_ROWS:,}",
        ("--days", "1e300"): f"runs (1 to {BACKTEST_MAX_RUNS:,})",
        ("--days", "400", "--interval", "1m"): f"makes 576,000 runs (1 to {BACKTEST_MAX_RUNS:,})",
        ("--workers", "100000"): f"'--workers': Input should be less than or equal to {MAX_PROCESSES}",
        ("--seed", "-1"): "'--seed': Input should be greater than or equal to 0",
        ("--seed", str(2**32)): f"'--seed': Input should be less than or equal to {MAX_SEED}",
    }
    for args, message in cases.items():
        code, out, err = run(cli, "alerts", "backtest", "--model", MODEL, *args)
        assert (code, out) == (2, ""), (args, err)
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err, (args, err)

    # the same bounds hold for a request made without the command line, and for the model's own window
    settings = get_settings()
    config_path = settings.registry_path / MODEL / "monitor.json"
    config_path.write_text(json.dumps({"window_rows": 5_000_000}))
    try:
        requests = {
            BacktestRequest(model_name=MODEL, window=1000, workers=100_000): "--workers 100000: from 1 to",
            BacktestRequest(model_name=MODEL, window=1000, seed=-1): f"--seed -1: a seed is a whole number "
            f"from 0 to {MAX_SEED}",
            BacktestRequest(model_name=MODEL, window=1000, rate=1e12): "--rate: 1e+12 must be",
            BacktestRequest(model_name=MODEL): f"the model's window 5,000,000 rows: a backtest holds at most "
            f"{BACKTEST_MAX_WINDOW:,} rows",
        }
        for request, message in requests.items():
            with pytest.raises(Invalid, match=re.escape(message)):
                prepare(db=database, settings=settings, request=request)
    finally:
        database.dispose()


def test_a_gradual_shift_is_followed_for_three_days_and_an_abrupt_one_until_the_window_is_shifted() -> None:
    rules = tuple(r for r in DEFAULT_RULES if r.kind in MONITOR_KINDS)
    plan = Plan(window=10_000, step=500, runs=8_640, days=30.0, rate=100.0)  # every 5 minutes
    assert GRADUAL_DAYS == 3.0
    assert horizon(plan, Shift(ShiftKind.GRADUAL_MEAN, "a", 1.0), rules) == 864  # 3 days of runs
    assert horizon(plan, Shift(ShiftKind.ABRUPT_MEAN, "a", 1.0), rules) == 20 + 1  # whole window, then for
    short = Plan(window=10_000, step=500, runs=288, days=1.0, rate=100.0)
    assert horizon(short, Shift(ShiftKind.GRADUAL_MEAN, "a", 1.0), rules) == 288  # at most the backtest


def test_harmful_drift_catches_flipped_labels_soon_after_a_one_off_test_and_ignores_the_rest(
    database: Database, tmp_path: Path
) -> None:
    """Default rules on a served-elsewhere model with a 20,000-row reference (its spread from 20 chunks):
    flipped labels hurt, and ``harmful_drift`` fires within 2 runs of the run from which a one-off comparison
    finds the window harmful; a mean shift of an input (the answers and labels unchanged, as a feature the
    model ignores) and the stream without drift leave it quiet."""
    from alerts.backtest_flows import run_backtest

    path = write_table(reference(20_000, seed=1), tmp_path / "large.parquet")
    spec = ImportSpec(
        model_name="bth", path=None, reference=path, target="y", task=Task.BINARY, prediction_column="score"
    )
    settings = get_settings()
    try:
        import_reference(spec=spec, db=database, registry=settings.registry_path)
        with database.session() as session:
            promote(session=session, model_name="bth", version=1)
        request = BacktestRequest(
            model_name="bth",
            days=0.5,
            window=5_000,
            interval="5m",
            shifts=("performance_drop", "abrupt_mean"),
        )
        result = run_backtest(db=database, settings=settings, request=request)
    finally:
        database.dispose()
    by_name = {r.name: r for r in result.rules}
    harm = by_name["harmful_drift"]
    assert harm.false_notifications == 0  # 144 runs without drift
    first = result.harmful_at_run["performance_drop"]
    assert first is not None and first < 10  # the window (10 runs of new rows) is harmful before it is full
    delay = harm.detection_delay_runs["performance_drop"]
    assert delay is not None and first <= delay <= first + 2
    assert result.harmful_at_run["abrupt_mean"] is None
    assert harm.detection_delay_runs["abrupt_mean"] is None
    assert result.visible_at_run["abrupt_mean"] is not None  # the drift itself is plain to see
    assert by_name["feature_drift"].detection_delay_runs["abrupt_mean"] is not None
