"""``driftwarden alerts ...`` and ``driftwarden webhooks ...``: bad input is one line and exit 2, nothing
stored; good input is stored and shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from alerts.cli import register
from core.config import get_settings
from core.database import Database, open_database
from service.cli import _Root
from tests.alerts.conftest import register_model


@pytest.fixture
def cli(tmp_path: Path) -> typer.Typer:
    db: Database = open_database(get_settings().database_url.get_secret_value())
    register_model(db, tmp_path)
    db.dispose()
    app = typer.Typer(cls=_Root, no_args_is_help=True)

    @app.callback()
    def root() -> None:
        """driftwarden (the alert commands only)."""

    register(app)
    return app


def run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_rules_apply_checks_then_stores(cli: typer.Typer, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("models:\n  credit:\n    - {name: drift, kind: dataset_drift, for: 0}\n")
    code, out, err = run(cli, "alerts", "rules-apply", str(bad))
    assert (
        code == 2 and err.startswith(f"error: {bad}: models.credit[0].for: ") and len(err.splitlines()) == 1
    )
    code, out, _ = run(cli, "alerts", "rules", "credit", "--json")
    assert json.loads(out)["origin"] == "default"  # nothing stored

    good = tmp_path / "good.yml"
    good.write_text("models:\n  credit:\n    - {name: drift, kind: dataset_drift, for: 2}\n")
    code, out, _ = run(cli, "alerts", "rules-apply", str(good), "--check")
    assert code == 0 and "valid (credit: 1 rule(s))" in out
    assert json.loads(run(cli, "alerts", "rules", "credit", "--json")[1])["origin"] == "default"
    code, out, _ = run(cli, "alerts", "rules-apply", str(good))
    assert code == 0 and "stored" in out
    doc = json.loads(run(cli, "alerts", "rules", "credit", "--json")[1])
    assert doc["origin"] == "model" and doc["rules"][0]["for_runs"] == 2 and doc["source"] == "file"
    assert "drift" in run(cli, "alerts", "rules", "credit")[1]

    ghost = tmp_path / "ghost.yml"
    ghost.write_text("models:\n  ghost:\n    - {name: drift, kind: dataset_drift}\n")
    code, _, err = run(cli, "alerts", "rules-apply", str(ghost), "--check")
    assert code == 2 and "models.ghost: no model 'ghost'" in err
    code, _, err = run(cli, "alerts", "rules-apply", str(tmp_path / "missing.yml"))
    assert code == 2 and "cannot read the alert rules file" in err

    shoe = tmp_path / "shoe.yml"
    shoe.write_text("models:\n  credit:\n    - {name: f, kind: feature_drift, params: {feature: shoe}}\n")
    code, _, err = run(cli, "alerts", "rules-apply", str(shoe), "--check")
    assert code == 2 and f"{shoe}: models.credit[0].params.feature: 'shoe' is not a feature" in err

    twice = tmp_path / "twice.yml"  # once "valid", keeping the second list and dropping the first
    twice.write_text(
        "models:\n  credit:\n    - {name: a, kind: dataset_drift}\n  credit:\n"
        "    - {name: b, kind: dataset_drift}\n"
    )
    code, out, err = run(cli, "alerts", "rules-apply", str(twice), "--check")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(
        f"error: {twice}: not valid YAML at line 4, column 3: the key 'credit' is written twice"
    )


def test_silence_commands(cli: typer.Typer) -> None:
    code, out, _ = run(
        cli,
        "alerts",
        "silence",
        "--matcher",
        "model=credit",
        "--matcher",
        "severity=~warning|info",
        "--for",
        "90m",
        "--comment",
        "deploy",
    )
    assert code == 0 and out.startswith("silence ") and 'model="credit"' in out
    code, out, _ = run(cli, "alerts", "silences")
    assert "active" in out and "deploy" in out
    silence_id = out.split()[0]
    code, _, err = run(cli, "alerts", "silence", "--matcher", "model", "--for", "1h")
    assert code == 2 and "has no operator" in err
    code, _, err = run(cli, "alerts", "silence", "--matcher", "model=credit", "--for", "soon")
    assert code == 2 and "duration: 'soon' is not a duration" in err
    code, out, err = run(cli, "alerts", "silence", "--matcher", "model=credit", "--for", "99999999999d")
    assert (
        code == 2 and err.startswith("error: duration: '99999999999d' is longer than") and "a bug" not in err
    )
    assert run(cli, "alerts", "unsilence", silence_id)[0] == 0
    assert "expired" in run(cli, "alerts", "silences")[1]
    assert run(cli, "alerts", "unsilence", "nope")[0] == 2


def test_webhook_commands(cli: typer.Typer) -> None:
    code, _, err = run(cli, "webhooks", "add", "ftp://example.com/x")
    assert code == 2 and err.startswith("error: url: ")
    code, _, err = run(cli, "webhooks", "add", "https://example.com:99999/")
    assert code == 2 and err.startswith("error: url: ") and "port out of range" in err and "a bug" not in err
    code, _, err = run(cli, "webhooks", "add", "http://example.com/x", "--event", "alert.fired")
    assert code == 2 and err.startswith("error: filter.events[0]: ")
    assert "no webhooks" in run(cli, "webhooks", "list")[1]
    code, out, _ = run(
        cli, "webhooks", "add", "https://example.com/x", "--model", "credit", "--severity", "critical"
    )
    assert code == 0 and "secret (shown once): whsec_" in out
    webhook_id = out.split()[1]
    listed = json.loads(run(cli, "webhooks", "list", "--json")[1])
    assert [w["id"] for w in listed] == [webhook_id] and "secret" not in listed[0]
    assert listed[0]["filter"] == {"models": ["credit"], "severities": ["critical"], "events": []}
    assert run(cli, "webhooks", "deliveries", webhook_id)[0] == 0
    assert run(cli, "webhooks", "remove", webhook_id)[0] == 0
    assert run(cli, "webhooks", "remove", webhook_id)[0] == 2
    assert run(cli, "webhooks", "send") == (0, "0 delivery attempt(s)\n", "")


def test_alert_listing(cli: typer.Typer) -> None:
    assert run(cli, "alerts", "list")[1].strip() == "no alerts"
    code, _, err = run(cli, "alerts", "list", "--state", "burning")
    assert code == 2 and "--state" in err
    assert run(cli, "alerts", "show", "12")[0] == 2
