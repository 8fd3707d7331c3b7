"""Every command-line option that sizes work has a bound (``core/bounds.py``), stated in its ``--help`` and
checked before any work starts: a value beyond it is one ``error:`` line naming the option and the bound,
exit 2. (``alerts backtest``'s bounds: tests/alerts/test_backtest.py.)

Each case holds a second, already refused value after the one under test (a guard: ``--workers 0``,
``--epochs 0``, ``--port 0``, ...): the option under test is checked first, and without its bound the
command is refused for the guard instead, so the test fails without starting a demo, a server or a
training run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.bounds import (
    MAX_BATCH_SIZE,
    MAX_CLUSTER_WORKERS,
    MAX_EPOCHS,
    MAX_GENERATED_ROWS,
    MAX_KEEP_DAYS,
    MAX_PARAMETER_SERVERS,
    MAX_PASS_INTERVAL_S,
    MAX_POLL_S,
    MAX_SEED,
)
from service.cli import app

CASES: list[tuple[str, tuple[str, ...], str]] = [
    (
        "demo",
        ("--rows", "100000000", "--workers", "0"),
        f"'--rows': Input should be less than or equal to {MAX_GENERATED_ROWS}",
    ),
    (
        "demo",
        ("--epochs", "1e6", "--workers", "0"),
        f"'--epochs': Input should be less than or equal to {MAX_EPOCHS}",
    ),
    (
        "demo",
        ("--workers", "1000", "--rows", "10"),
        f"'--workers': Input should be less than or equal to {MAX_CLUSTER_WORKERS}",
    ),
    ("demo", ("--seed", "-1", "--workers", "0"), "'--seed': Input should be greater than or equal to 0"),
    (
        "train",
        ("--model", "m", "--data", "x.csv", "--batch-size", "1000000", "--epochs", "0"),
        f"'--batch-size': Input should be less than or equal to {MAX_BATCH_SIZE}",
    ),
    (
        "train",
        ("--model", "m", "--data", "x.csv", "--workers", "1000", "--epochs", "0"),
        f"'--workers': Input should be less than or equal to {MAX_CLUSTER_WORKERS}",
    ),
    (
        "train",
        ("--model", "m", "--data", "x.csv", "--ps", "100", "--epochs", "0"),
        f"'--ps': Input should be less than or equal to {MAX_PARAMETER_SERVERS}",
    ),
    (
        "train",
        ("--model", "m", "--data", "x.csv", "--epochs", "1e6", "--batch-size", "0"),
        f"'--epochs': Input should be less than or equal to {MAX_EPOCHS}",
    ),
    (
        "train",
        ("--model", "m", "--data", "x.csv", "--seed", str(MAX_SEED + 1), "--epochs", "0"),
        f"'--seed': Input should be less than or equal to {MAX_SEED}",
    ),
    (
        "data generate",
        ("--out", "x.csv", "--rows", "100000000", "--severity", "-1"),
        f"'--rows' / '-n': Input should be less than or equal to {MAX_GENERATED_ROWS}",
    ),
    (
        "data generate",
        ("--out", "x.csv", "--seed", "-1", "--rows", "0"),
        "'--seed': Input should be greater than or equal to 0",
    ),
    (
        "jobs submit",
        ("--model", "m", "--epochs", "1e6", "--workers", "0"),
        f"'--epochs': Input should be less than or equal to {MAX_EPOCHS}",
    ),
    (
        "jobs submit",
        ("--model", "m", "--workers", "1000", "--epochs", "0"),
        f"'--workers': Input should be less than or equal to {MAX_CLUSTER_WORKERS}",
    ),
    (
        "jobs submit",
        ("--model", "m", "--ps", "100", "--epochs", "0"),
        f"'--ps': Input should be less than or equal to {MAX_PARAMETER_SERVERS}",
    ),
    (
        "serve",
        ("--workers", "1000", "--port", "0"),
        f"'--workers' / '-w': Input should be less than or equal to {MAX_CLUSTER_WORKERS}",
    ),
    (
        "predictions purge",
        ("--days", "1e10"),
        f"'--days': Input should be less than or equal to {MAX_KEEP_DAYS:.0f}",
    ),
    (
        "monitor",
        ("--interval", "1e300"),
        f"'--interval': Input should be less than or equal to {MAX_PASS_INTERVAL_S:.0f}",
    ),
    (
        "worker",
        ("--poll", "1e9", "--once"),
        f"'--poll': Input should be less than or equal to {MAX_POLL_S:.0f}",
    ),
]


def _tested(args: tuple[str, ...]) -> str:
    """The option a case tests: the first one past --model, --data and --out."""
    return next(a for a in args[::2] if a not in ("--model", "--data", "--out"))


@pytest.mark.parametrize(("command", "args", "named"), CASES, ids=[f"{c[0]} {_tested(c[1])}" for c in CASES])
def test_an_option_beyond_its_bound_is_one_line_naming_it(
    command: str, args: tuple[str, ...], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be written, but if it were: here
    done = CliRunner().invoke(app, [*command.split(), *args])
    err = done.stderr.strip()
    assert (done.exit_code, done.stdout) == (2, ""), (done.exit_code, done.output)
    assert err.startswith("error: Invalid value for ") and "\n" not in err, err
    assert named in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("command", "option", "shown"),
    [
        ("demo", "--rows", f"1000<=x<={MAX_GENERATED_ROWS}"),
        ("train", "--epochs", f"0.01<=x<={MAX_EPOCHS}"),
        ("train", "--seed", f"0<=x<={MAX_SEED}"),
        ("jobs submit", "--ps", f"1<=x<={MAX_PARAMETER_SERVERS}"),
        ("predictions purge", "--days", f"0.0<=x<={MAX_KEEP_DAYS}"),
    ],
)
def test_the_help_states_the_bound(command: str, option: str, shown: str) -> None:
    done = CliRunner().invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    line = next(line for line in done.stdout.splitlines() if option in line)
    assert shown in line, line


@pytest.mark.parametrize(
    ("variable", "value", "bound"),
    [
        ("DRIFTWARDEN_API_WORKERS", "1000", MAX_CLUSTER_WORKERS),
        ("DRIFTWARDEN_RETRAIN_EPOCHS", "1e6", MAX_EPOCHS),
    ],
)
def test_the_settings_behind_the_options_share_their_bounds(
    variable: str, value: str, bound: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.config import get_settings

    monkeypatch.setenv(variable, value)
    get_settings.cache_clear()
    try:
        done = CliRunner().invoke(app, ["config"])
    finally:
        get_settings.cache_clear()
    err = done.stderr.strip()
    assert done.exit_code == 2 and err.startswith("error: invalid setting"), done.output
    assert variable in err and f"less than or equal to {bound}" in err, err
