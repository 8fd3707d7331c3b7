"""``driftwarden alerts backtest`` reads out its figures: delays in runs and in time, the planted shifts
named, a verdict per rule with a measured trade, warnings on the windows, and why a rule never caught a
shift; each checked on a real backtest of a registered model (SQLite), in its JSON document and its table."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from alerts.backtest_advice import runs_text
from core.config import get_settings
from core.durations import in_words
from tests.alerts.backtest_model import (
    MODEL,
    alerts_cli,
    open_test_database,
    reference,
    register_backtest_model,
)

SMALL = ("--days", "0.2", "--window", "1000", "--interval", "10m")  # 28 runs of 1,000 new rows


@pytest.fixture
def registered(tmp_path: Path) -> Path:
    """Model ``bt`` (a, b numeric; color categorical; every row labelled) registered from its reference."""
    (tmp_path / "var").mkdir(exist_ok=True)
    return register_backtest_model(open_test_database(), tmp_path)


@pytest.fixture
def cli() -> typer.Typer:
    return alerts_cli()


def backtest(app: typer.Typer, *args: str) -> str:
    """The command's stdout (it must succeed)."""
    result = CliRunner().invoke(app, ["alerts", "backtest", "--model", MODEL, *args])
    assert result.exit_code == 0, result.stderr or result.stdout
    return result.stdout


def document(app: typer.Typer, *args: str) -> dict[str, Any]:
    return json.loads(backtest(app, *args, "--json"))


def rules_by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in doc["rules"]}


def monitor_config(values: dict[str, Any]) -> None:
    path = get_settings().registry_path / MODEL / "monitor.json"
    path.write_text(json.dumps(values))


def test_a_duration_reads_in_the_largest_units() -> None:
    assert runs_text(21, 300) == "21 runs (1 h 45 min)"  # the abrupt_mean 21 at 5-minute runs
    assert runs_text(1, 600) == "1 run (10 min)"
    assert runs_text(0, 600) == "0 runs (at once)"
    assert [in_words(s) for s in (30, 3_600, 90_000, 86_400 * 3)] == ["30 s", "1 h", "1 d 1 h", "3 d"]


def test_delays_are_given_in_runs_and_in_time(cli: typer.Typer, registered: Path) -> None:
    doc = document(cli, *SMALL, "--shift", "abrupt_mean")
    assert doc["interval_seconds"] == 600
    caught = 0
    for rule in doc["rules"]:
        runs, seconds = rule["detection_delay_runs"], rule["detection_delay_seconds"]
        assert runs.keys() == seconds.keys() == {"abrupt_mean"}
        assert seconds["abrupt_mean"] == (None if runs["abrupt_mean"] is None else runs["abrupt_mean"] * 600)
        caught += runs["abrupt_mean"] is not None
    assert caught, "no rule caught the abrupt shift: nothing to read in time"

    table = backtest(cli, *SMALL, "--shift", "abrupt_mean")
    assert "a run every 10 min" in table
    for name, rule in rules_by_name(doc).items():
        delay = rule["detection_delay_runs"]["abrupt_mean"]
        row = next(line for line in table.splitlines() if line.strip("│ ").startswith(name + " "))
        if delay is None:
            assert "never" in row and not re.search(r"│\s*-\s*│", row), row
        else:
            assert runs_text(delay, 600) in row, row


def test_each_shift_is_named_with_its_feature_and_size(cli: typer.Typer, registered: Path) -> None:
    a = reference()["a"][1::2]  # the traffic's half of the reference (the odd rows)
    sd = float(np.nanstd(a))
    doc = document(cli, *SMALL, "--shift", "abrupt_mean", "--shift", "new_category")
    assert doc["shifts"]["abrupt_mean"]["feature"] == "a"
    assert doc["shifts"]["abrupt_mean"]["description"] == f"abrupt mean +1 sd on a (+{sd:.4g} at once)"
    assert doc["shifts"]["new_category"]["description"] == (
        "new category 'backtest_new_category' in color at 10 %"
    )
    table = backtest(cli, *SMALL, "--shift", "abrupt_mean", "--shift", "new_category")
    assert f"  abrupt_mean: abrupt mean +1 sd on a (+{sd:.4g} at once)" in table.splitlines()
    assert "  new_category: new category 'backtest_new_category' in color at 10 %" in table.splitlines()


def test_a_verdict_per_rule_with_the_trade_measured_on_the_same_runs(
    cli: typer.Typer, registered: Path, tmp_path: Path
) -> None:
    """``for: 3`` against the same rule with ``for: 1``: the trade quoted for the first is the second's
    measured figures; quiet or noisy follows the budget, fast or slow the one-off comparison."""
    rules = tmp_path / "rules.yml"
    rules.write_text(
        f"models:\n  {MODEL}:\n"
        "    - {name: slow_drift, kind: feature_drift, for: 3}\n"
        "    - {name: fast_drift, kind: feature_drift}\n"
    )
    args = (*SMALL, "--shift", "abrupt_mean", "--rules", str(rules))
    doc = document(cli, *args)
    by_name = rules_by_name(doc)
    slow, fast = by_name["slow_drift"], by_name["fast_drift"]
    (one,) = slow["alternatives"]
    assert one["for"] == 1
    assert one["false_notifications_per_30d"] == fast["false_notifications_per_30d"]
    assert one["detection_delay_runs"] == fast["detection_delay_runs"]
    saved = slow["detection_delay_runs"]["abrupt_mean"] - fast["detection_delay_runs"]["abrupt_mean"]
    assert saved == 2  # the window is the new rows: the shift is active at every run from run 0
    cost = fast["false_notifications_per_30d"]
    assert slow["verdict"].endswith(
        f"`for: 3` → `for: 1` would notify {runs_text(2, 600)} sooner on abrupt_mean at {cost:.4g} false "
        "notifications / 30 days" + (" (above the budget)" if cost > 0.5 else "")
    )
    for rule in (slow, fast):
        noisy = rule["false_notifications_per_30d"] > 0.5
        assert rule["verdict"].startswith(("noisy" if noisy else "quiet") + " ("), rule["verdict"]
        lag = rule["detection_delay_runs"]["abrupt_mean"] - doc["visible_at_run"]["abrupt_mean"]
        speed = "slow" if lag > 2 else "fast"
        assert f", {speed} (" in rule["verdict"], (lag, rule["verdict"])
    noisy = fast["false_notifications_per_30d"] > 0.5  # then `for` 2 to 6 are tried, else none (for: 1)
    assert [a["for"] for a in fast["alternatives"]] == (list(range(2, 7)) if noisy else [])
    table = backtest(cli, *args)
    assert f"  slow_drift: {slow['verdict']}" in table.splitlines()


def test_a_noisy_rule_is_told_the_for_that_quiets_it_as_measured_on_the_same_runs(
    cli: typer.Typer, registered: Path, tmp_path: Path
) -> None:
    """A realised ROC AUC bound that windows without drift cross now and then (``flap``) or always
    (``always``): the quieter ``for`` quoted for ``flap`` is what ``flap2`` (the same rule, ``for: 2``)
    measures; no ``for`` quiets ``always``."""
    rules = tmp_path / "rules.yml"
    rules.write_text(
        f"models:\n  {MODEL}:\n"
        "    - {name: flap, kind: performance, params: {below: 0.76}}\n"
        "    - {name: flap2, kind: performance, params: {below: 0.76}, for: 2}\n"
        "    - {name: always, kind: performance, params: {below: 0.99}}\n"
    )
    args = (*SMALL, "--shift", "performance_drop", "--rules", str(rules))
    by_name = rules_by_name(document(cli, *args))
    flap, flap2, always = by_name["flap"], by_name["flap2"], by_name["always"]
    assert flap["false_notifications_per_30d"] > 0.5 >= flap2["false_notifications_per_30d"]
    assert [a["for"] for a in flap["alternatives"]] == [2, 3, 4, 5, 6]
    two = flap["alternatives"][0]
    assert two["false_notifications_per_30d"] == flap2["false_notifications_per_30d"]
    assert two["detection_delay_runs"] == flap2["detection_delay_runs"]
    assert flap["verdict"].startswith(f"noisy ({flap['false_notifications_per_30d']:.4g} false notifications")
    quiet = flap2["false_notifications_per_30d"]
    assert flap["verdict"].endswith(
        f"`for: 1` → `for: 2` gives {quiet:.4g} false notifications / 30 days, notifying at least "
        f"{runs_text(1, 600)} later"
    )
    last = always["alternatives"][-1]
    assert last["for"] == 6 and all(a["false_notifications_per_30d"] > 0.5 for a in always["alternatives"])
    assert (
        f"even `for: 6` gives {last['false_notifications_per_30d']:.4g} / 30 days, above the budget"
        in (always["verdict"])
    )


def test_windows_that_skip_rows_or_overlap_little_are_warned_of(cli: typer.Typer, registered: Path) -> None:
    skipping = ("--days", "0.25", "--interval", "1h", "--window", "5000", "--shift", "abrupt_mean")
    doc = document(cli, *skipping)  # 100 rows a minute: 6,000 new rows a run
    (skipped,) = [w for w in doc["warnings"] if w.startswith("rows skipped")]
    assert "6,000 new rows a run, but the window holds 5,000: 1,000 rows a run (17%)" in skipped
    table = backtest(cli, *skipping).splitlines()
    at = table.index(f"warning: {skipped}")
    assert at < next(i for i, line in enumerate(table) if "Alert backtest of" in line)

    doc = document(cli, "--days", "0.2", "--interval", "10m", "--window", "1500", "--shift", "abrupt_mean")
    (little,) = [w for w in doc["warnings"] if w.startswith("little overlap")]
    assert "share 500 of their 1,500 rows (33%), less than half" in little
    assert not any(w.startswith("rows skipped") for w in doc["warnings"])

    doc = document(cli, "--days", "0.2", "--interval", "5m", "--window", "1000", "--shift", "abrupt_mean")
    days = 57 * 300 / 86_400  # 500 new rows a run, a window of two runs' rows: neither warning
    assert [w.split(":")[0] for w in doc["warnings"]] == [f"{days:.4g} days replayed"]


def test_why_a_rule_never_caught_a_shift_is_computed_from_the_setup(
    cli: typer.Typer, registered: Path
) -> None:
    """dataset drift at a share above one feature's weight (1 of 3 features, 33 % < 50 %); harm on windows
    with fewer labelled rows than ``harm_min_labels``; rules reading what a shift leaves alone; and a gradual
    shift too small to be seen within the runs it is followed for."""
    monitor_config({"drift_share": 0.5, "harm_min_labels": 5_000})
    args = (*SMALL, "--shift", "abrupt_mean", "--shift", "performance_drop", "--shift", "gradual_mean")
    doc = document(cli, *args)
    by_name = rules_by_name(doc)
    for rule in doc["rules"]:
        never = {s for s, d in rule["detection_delay_runs"].items() if d is None}
        assert set(rule["not_caught"]) == never, rule
    assert by_name["dataset_drift"]["not_caught"]["abrupt_mean"] == (
        "a one-feature shift drifts 1 of 3 features (33%), below drift_share 0.5 (50%): the shift alone "
        "cannot make this rule fire"
    )
    assert by_name["harmful_drift"]["not_caught"]["performance_drop"].startswith(
        "the window holds about 1,000 labelled rows, fewer than harm_min_labels 5,000"
    )
    assert by_name["prediction_drift"]["not_caught"]["abrupt_mean"].startswith("the shift moves a only")
    assert by_name["feature_drift"]["not_caught"]["performance_drop"].startswith(
        "the shift flips labels only"
    )
    runs = doc["shifts"]["gradual_mean"]["runs_followed"]
    assert runs == 28  # the whole backtest (3 days at most)
    assert by_name["feature_drift"]["not_caught"]["gradual_mean"] == (
        f"not caught within {runs_text(28, 600)}, the runs this shift was followed for"
    )
    table = backtest(cli, *args).splitlines()
    reason = by_name["dataset_drift"]["not_caught"]["abrupt_mean"]
    assert f"  dataset_drift on abrupt_mean: {reason}" in table
    reason = by_name["feature_drift"]["not_caught"]["performance_drop"]
    sharing = [r["name"] for r in doc["rules"] if r["not_caught"].get("performance_drop") == reason]
    assert {"dataset_drift", "feature_drift"} <= set(sharing)  # one line for the rules sharing a reason
    assert f"  {', '.join(sharing)} on performance_drop: {reason}" in table
