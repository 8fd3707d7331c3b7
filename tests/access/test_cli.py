"""`driftwarden tokens create|list|revoke` and `driftwarden config`: a secret is printed once, never again."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from core.database import open_database
from service.cli import app


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_create_prints_the_secret_once_and_list_never_shows_it() -> None:
    code, out, err = run("tokens", "create", "--name", "ci", "--scope", "read", "--scope", "feedback")
    assert code == 0, err
    secret = out.strip()
    assert secret.startswith("dw_") and "\n" not in secret  # alone on stdout: TOKEN=$(...)
    token_id = secret.split("_")[1]
    assert token_id in err and "not shown again" in err and "feedback, read" in err
    code, table, _ = run("tokens", "list")
    assert code == 0 and token_id in table and "ci" in table and "active" in table
    code, listed, _ = run("tokens", "list", "--json")
    docs = json.loads(listed)
    assert [(d["id"], d["scopes"], d["state"]) for d in docs] == [(token_id, ["feedback", "read"], "active")]
    assert secret not in table + listed and secret.split("_", 2)[2] not in table + listed
    assert "token_hash" not in docs[0]
    code, out, _ = run("tokens", "revoke", token_id)
    assert code == 0 and out.strip() == f"revoked {token_id}"
    docs = json.loads(run("tokens", "list", "--json")[1])
    assert docs[0]["state"] == "revoked" and docs[0]["revoked_at"] is not None
    db = open_database()
    try:
        from access.service import verify_token

        with db.session() as s:
            assert verify_token(session=s, token=secret) is None
    finally:
        db.dispose()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--name", "x", "--scope", "write"], "scope: ['write']"),
        (["--name", "x", "--scope", "read", "--expires-in", "soon"], "--expires-in: 'soon'"),
        (["--name", "x", "--scope", "read", "--expires-in", "0d"], "--expires-in: '0d'"),
        (
            ["--name", "x", "--scope", "read", "--expires-in", "99999999d"],
            "--expires-in: '99999999d' is longer than the longest allowed, 3650d",
        ),
        (["--name", " ", "--scope", "read"], "name: 1 to 100"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    code, out, err = run("tokens", "create", *args)
    assert code == 2 and words in err and out == ""
    assert json.loads(run("tokens", "list", "--json")[1]) == []


def test_unknown_token_revoke_is_exit_2() -> None:
    code, _, err = run("tokens", "revoke", "nope")
    assert code == 2 and "does not exist" in err


def test_config_masks_every_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "DRIFTWARDEN_ADMIN_TOKEN": "admintoken-s3cret",
        "DRIFTWARDEN_ALERTMANAGER_TOKEN": "amtoken-s3cret",
        "DRIFTWARDEN_ALERTMANAGER_BASIC_AUTH": "am:basic-s3cret",
        "DRIFTWARDEN_DATABASE_URL": "postgresql+psycopg://app:dbpw-s3cret@db:5432/dw",
        "DRIFTWARDEN_MONITOR_READ_DATABASE_URL": "postgresql+psycopg://r@replica/dw?password=replica-s3cret&x=1",
    }
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    code, out, err = run("config")
    assert code == 0, err
    cfg = json.loads(out)
    assert "s3cret" not in out
    assert cfg["admin_token"] == cfg["alertmanager_token"] == cfg["alertmanager_basic_auth"] == "***"
    assert cfg["database_url"] == "postgresql+psycopg://app:***@db:5432/dw"
    assert cfg["monitor_read_database_url"] == "postgresql+psycopg://r@replica/dw?password=***&x=1"


def test_revoke_takes_a_whole_token_and_never_echoes_its_secret() -> None:
    code, out, err = run("tokens", "create", "--name", "pasted", "--scope", "read")
    assert code == 0, err
    secret = out.strip()
    token_id = secret.split("_")[1]
    code, out, err = run("tokens", "revoke", secret)
    assert code == 0 and out.strip() == f"revoked {token_id}" and secret.split("_", 2)[2] not in out + err
    unknown = "dw_abc123_s3cret-never-shown"
    code, out, err = run("tokens", "revoke", unknown)
    assert code == 2 and "token 'abc123' does not exist" in err and "s3cret" not in out + err
    code, _, err = run("tokens", "revoke", "dw_bad-shape")
    assert code == 2 and err.startswith("error: token: not a token of the shape") and "bad-shape" not in err


def test_every_credential_bearing_url_parameter_is_masked() -> None:
    from pydantic import SecretStr

    from core.config import Settings

    url = "postgresql+psycopg://app@db/dw?sslmode=require&sslpassword=a-s3cret&PWD=b-s3cret&api_key=c-s3cret"
    shown = Settings(database_url=SecretStr(url)).masked()["database_url"]
    assert "s3cret" not in shown
    assert shown == "postgresql+psycopg://app@db/dw?sslmode=require&sslpassword=***&PWD=***&api_key=***"


def test_a_short_admin_token_is_warned_about() -> None:
    from pydantic import SecretStr

    from core.config import Settings, weak_admin_token

    warning = weak_admin_token(Settings(admin_token=SecretStr("a")))
    assert warning is not None and warning.startswith("DRIFTWARDEN_ADMIN_TOKEN has 1 characters: a guessable")
    assert "a" * 5 not in warning
    assert weak_admin_token(Settings(admin_token=SecretStr("k" * 32))) is None
    assert weak_admin_token(Settings()) is None
