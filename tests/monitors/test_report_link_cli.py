"""`driftwarden reports link MODEL [--ttl]` and `driftwarden tokens rotate-link-key`: the printed URL is
signed for that report and that lifetime with the database's key (or the configured one); bad input is one
line and exit 2; a rotation makes every earlier link invalid; no key is ever printed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from access.service import stored_link_key
from core.auth import link_refusal
from core.config import Settings, get_settings
from core.database import open_database
from registry.service import register_version
from service.cli import app

PUBLIC = "https://dw.example.com/base"
CONFIGURED = "a-configured-link-key-of-more-than-32-chars"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def _model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DRIFTWARDEN_PUBLIC_URL", PUBLIC + "/")
    get_settings.cache_clear()
    db = open_database()
    try:
        with db.session() as s:
            register_version(
                session=s, model_name="credit", version=1, path=tmp_path / "v1", metrics={}, lineage={}
            )
    finally:
        db.dispose()


def the_key() -> bytes:
    db = open_database()
    try:
        with db.session() as s:
            return stored_link_key(session=s).encode()
    finally:
        db.dispose()


def refusal(url: str, key: bytes) -> str | None:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    path = parts.path.removeprefix(urlsplit(PUBLIC).path)
    return link_refusal(
        key=key, path=path, expires=int(query["expires"]), signature=query["signature"], now=time.time()
    )


def test_link_prints_a_signed_url_alone_on_stdout() -> None:
    code, out, err = run("reports", "link", "credit", "--ttl", "1d")
    assert code == 0, err
    url = out.strip()
    assert "\n" not in url and url.startswith(f"{PUBLIC}/reports/credit/drift?expires=")
    expires = int(parse_qs(urlsplit(url).query)["expires"][0])
    assert abs(expires - (time.time() + 86400)) < 60
    assert refusal(url, the_key()) is None
    assert "credit" in err and "opens without a token until" in err
    assert "DRIFTWARDEN_PUBLIC_URL" not in err  # set: the address is the operator's, no note
    code, out, _ = run("reports", "link", "credit")  # default: 7 days
    expires = int(parse_qs(urlsplit(out.strip()).query)["expires"][0])
    assert code == 0 and abs(expires - (time.time() + 7 * 86400)) < 60


def test_link_without_a_public_url_says_which_address_it_assumes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRIFTWARDEN_PUBLIC_URL")
    monkeypatch.setenv("DRIFTWARDEN_API_PORT", "9123")
    get_settings.cache_clear()
    code, out, err = run("reports", "link", "credit")
    assert code == 0, err
    assert (
        out.startswith("http://") and ":9123/reports/credit/drift?expires=" in out and "\n" not in out.strip()
    )
    assert err.splitlines()[-1] == (
        f"note: DRIFTWARDEN_PUBLIC_URL is unset: the link assumes the server at {out.split('/reports/')[0]}; "
        "set it to the address your browser reaches"
    )


def test_link_with_a_configured_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWARDEN_LINK_SIGNING_KEY", CONFIGURED)
    get_settings.cache_clear()
    code, out, err = run("reports", "link", "credit")
    assert code == 0, err
    assert refusal(out.strip(), CONFIGURED.encode()) is None
    assert refusal(out.strip(), the_key()) is not None
    code, out, _ = run("config")
    assert code == 0 and json.loads(out)["link_signing_key"] == "***" and CONFIGURED not in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["nobody"], "no model 'nobody' in the registry"),
        (["../etc"], "is not allowed"),
        (["credit", "--ttl", "soon"], "--ttl: 'soon' is not a duration"),
        (["credit", "--ttl", "never"], "--ttl: 'never' is not a duration"),
        (["credit", "--ttl", "0d"], "--ttl: '0d'"),
        (["credit", "--ttl", "13w"], "at most 90 days"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    code, out, err = run("reports", "link", *args)
    assert code == 2 and out == "" and words in err, (code, out, err)
    assert len(err.strip().splitlines()) == 1


def test_a_short_configured_key_is_refused_without_echoing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWARDEN_LINK_SIGNING_KEY", "short-s3cret")
    get_settings.cache_clear()
    code, out, err = run("reports", "link", "credit")
    assert code == 2 and out == "" and "short-s3cret" not in err
    with pytest.raises(ValidationError) as caught:  # what `driftwarden --debug ...` shows
        Settings()
    assert "DRIFTWARDEN_LINK_SIGNING_KEY has 12 characters" in str(caught.value)
    assert "short-s3cret" not in str(caught.value)


def test_rotate_link_key_invalidates_earlier_links() -> None:
    before = run("reports", "link", "credit")[1].strip()
    old_key = the_key()
    code, out, err = run("tokens", "rotate-link-key")
    assert code == 0 and "rotated" in out, err
    new_key = the_key()
    assert new_key != old_key and new_key.decode() not in out + err
    why = refusal(before, new_key)
    assert why is not None and why.startswith("invalid signature")
    after = run("reports", "link", "credit")[1].strip()
    assert refusal(after, new_key) is None


def test_help_shows_an_example() -> None:
    code, out, _ = run("reports", "link", "--help")
    assert code == 0
    assert "driftwarden reports link credit --ttl 1d" in out and "--ttl" in out
    code, out, _ = run("reports", "--help")
    assert code == 0 and "link" in out
