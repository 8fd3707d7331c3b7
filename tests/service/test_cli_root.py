"""The CLI root registers a domain's commands only when they are used (start-up of `driftwarden drift`).

The lazy root must list and resolve exactly what registering every domain eagerly gives, in the same
order with the same help, and a command must load only its own domain.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import typer
import typer.main
from typer.testing import CliRunner

from core.tabular import write_table
from service.cli import DOMAINS, LISTED, app, domain_commands
from service.cli_habits import add_habits


def _eager() -> Any:
    """The root as registering every domain at import time builds it (with the habits the root adds)."""
    full = typer.Typer(name="driftwarden")
    full.registered_commands.extend(app.registered_commands)
    full.registered_groups.extend(app.registered_groups)
    full.registered_callback = app.registered_callback
    for module in DOMAINS:
        importlib.import_module(module).register(full)
    group = typer.main.get_group(full)
    for name, command in group.commands.items():
        add_habits(command, name)  # what the root adds to every command it loads (--quiet, exit codes)
    return group


def test_the_table_names_what_each_domain_registers() -> None:
    own = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    seen: set[str] = set()
    for module, names in DOMAINS.items():
        assert tuple(domain_commands(module)) == names, module
        assert not (set(names) & (seen | own)), f"{module} registers a name another one has"
        seen |= set(names)


def test_lists_and_resolves_what_an_eager_root_does() -> None:
    eager, lazy = _eager(), typer.main.get_command(app)
    ctx: Any = typer.Context(lazy)
    assert lazy.list_commands(ctx) == eager.list_commands(ctx)  # type: ignore[attr-defined]
    for name, command in eager.commands.items():
        got = lazy.get_command(ctx, name)  # type: ignore[attr-defined]
        assert got is not None and got.get_short_help_str(200) == command.get_short_help_str(200), name
        assert [p.opts for p in got.params] == [p.opts for p in command.params], name
    assert lazy.get_command(ctx, "no-such-command") is None  # type: ignore[attr-defined]
    help_text = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    for name, command in eager.commands.items():
        assert f"{name} " in help_text and command.get_short_help_str(60)[:40] in help_text, name


def test_the_help_lists_each_domain_command_as_its_own_help_says() -> None:
    from typer.core import TyperGroup

    from service.cli import _reflow

    real = {name: cmd for module in DOMAINS for name, cmd in domain_commands(module).items()}
    assert set(LISTED) == set(real)
    for name, command in real.items():
        first = _reflow(command.help or "").split("\n\n")[0]
        assert LISTED[name] == (first, isinstance(command, TyperGroup)), name


def test_the_root_help_imports_no_domain_and_equals_the_eager_listing() -> None:
    heavy = [*DOMAINS, "core.config", "sqlalchemy", "numpy"]
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from service.cli import app\n"
        "r = CliRunner().invoke(app, ['--help'], terminal_width=120)\n"
        "print(r.exit_code)\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
        "print(r.output, end='')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    code, loaded, listed = out.stdout.split("\n", 2)
    assert code == "0" and loaded == "[]", out.stdout + out.stderr
    import service.cli as root  # the listing of the real commands, every domain imported

    stand_ins = root._listing
    try:
        root._listing = lambda commands: dict(commands._everything())
        eager = CliRunner().invoke(app, ["--help"], terminal_width=120)
    finally:
        root._listing = stand_ins
    assert eager.exit_code == 0 and listed == eager.output


def test_a_mistyped_command_gets_a_suggestion() -> None:
    result = CliRunner().invoke(app, ["drfit"])
    assert result.exit_code == 2 and "No such command 'drfit'" in result.output and "'drift'" in result.output


def _command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found.extend(_command_paths(sub, (*path, name)))
    return found


def test_help_reflows_paragraphs_and_shows_no_type_for_flags() -> None:
    """A docstring's paragraph is one line on a wide terminal (not broken where the source is); a flag has
    no `<bool>` type; at 60 columns no line of the help text is a lone word left by the source's breaks."""
    eager = _eager()
    paths = _command_paths(eager)
    assert len(paths) > 40
    for path, command in paths:
        wide = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "1000"})
        assert wide.exit_code == 0, (path, wide.output)
        lines = {line.strip() for line in wide.output.splitlines()}
        for paragraph in (command.help or "").partition("\f")[0].split("\n\n"):
            text = " ".join(paragraph.split())
            if text and "[" not in text and not paragraph.startswith("\b"):  # [rich markup] renders apart
                assert text in lines, (path, text)
        assert "<bool>" not in wide.output, path
        assert "Show this message and exit." in wide.output, path
    narrow = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "60"}).output
    assert "is started for the run and always stopped. async: parameter" in " ".join(narrow.split())
    assert not [line for line in narrow.splitlines() if line.strip() in ("stopped.", "and", "(with")]


def test_a_usage_error_is_one_line_naming_the_help_and_exit_2() -> None:
    for args, message, where in (
        (["train", "--bogus"], "No such option: --bogus", "driftwarden train"),
        (["train", "--data", "x.csv"], "Missing option '--model' / '-m'", "driftwarden train"),
        (
            ["predictions", "purge", "--days", "soon"],
            "Invalid value for '--days': Input should be a valid number, unable to parse string as a number",
            "driftwarden predictions purge",
        ),
        (["--bogus"], "No such option: --bogus", "driftwarden"),
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stdout == "" and result.stderr == f"error: {message} (see `{where} --help`)\n", args
    result = CliRunner().invoke(app, ["models"])  # a group without its command still shows its help
    assert "Usage: driftwarden models" in result.output and "error" not in result.output


def test_drift_loads_neither_other_domains_nor_the_orm_nor_scipy_stats(tmp_path: Path) -> None:
    """`driftwarden drift` on files large enough for the asymptotic KS law (en > 10,000)."""
    rng = np.random.default_rng(3)
    for name, shift in (("ref", 0.0), ("cur", 0.2)):
        n = 25_000
        text = rng.choice(np.array(["x", "y"], dtype=object), n)
        write_table(
            {"a": rng.normal(shift, 1, n), "b": rng.poisson(3, n), "c": text}, tmp_path / f"{name}.parquet"
        )
    heavy = ["scipy.stats", "sqlalchemy", *(m for m in DOMAINS if m != "monitors.cli"), "alerts.flows"]
    files = [str(tmp_path / "ref.parquet"), str(tmp_path / "cur.parquet")]
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from service.cli import app\n"
        f"r = CliRunner().invoke(app, ['drift', *{files!r}])\n"
        "print(r.exit_code)\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    code, loaded = out.stdout.split("\n")[:2]
    assert code == "1", out.stdout + out.stderr  # the shifted feature drifted: the command ran to its verdict
    assert loaded == "[]", loaded


def test_an_invalid_setting_is_named_with_its_variable_not_called_a_bug() -> None:
    env = {"DRIFTWARDEN_LOG_DURABILITY": "bogus", "DRIFTWARDEN_API_PORT": "eighty"}
    result = CliRunner().invoke(app, ["config"], env=env)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert sorted(lines) == [
        "error: invalid setting DRIFTWARDEN_API_PORT: Input should be a valid integer, unable to parse "
        "string as an integer (fix or unset that environment variable)",
        "error: invalid setting DRIFTWARDEN_LOG_DURABILITY: Input should be 'durable' or 'fast' (fix or "
        "unset that environment variable)",
    ]
    assert "bogus" not in result.output and "eighty" not in result.output  # values stay out of the message


def test_a_check_of_the_whole_settings_names_the_variables_it_checks() -> None:
    """A model validator's error has no field: the variable is named from its message, not cut off."""
    from pydantic import BaseModel, ValidationError, model_validator

    from core.config import get_settings
    from service.cli import _settings_error

    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["config"], env={"DRIFTWARDEN_LINK_SIGNING_KEY": "short-s3cret"})
    get_settings.cache_clear()
    assert result.exit_code == 2
    assert result.output == (
        "error: invalid setting: DRIFTWARDEN_LINK_SIGNING_KEY has 12 characters; it needs at least 32 (e.g. "
        "`openssl rand -base64 32`) (fix or unset DRIFTWARDEN_LINK_SIGNING_KEY)\n"
    )

    class Settings(BaseModel):  # the title _settings_error recognizes
        @model_validator(mode="after")
        def _check(self) -> Settings:
            raise ValueError("these two disagree")

    try:
        Settings()
    except ValidationError as exc:
        assert _settings_error(exc) == (
            "error: invalid settings: these two disagree (check the DRIFTWARDEN_* environment variables)"
        )
    else:
        raise AssertionError("the validator did not refuse")


def test_a_port_out_of_range_is_a_usage_error_naming_its_range() -> None:
    result = CliRunner().invoke(app, ["serve", "--port", "99999"])
    flat = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2 and "Invalid value for '--port'" in flat
    assert "less than or equal to 65535" in flat
    assert "a bug" not in result.output and "Traceback" not in result.output
    env = {"DRIFTWARDEN_API_PORT": "99999"}
    result = CliRunner().invoke(app, ["config"], env=env)
    assert result.exit_code == 2
    assert result.output.startswith("error: invalid setting DRIFTWARDEN_API_PORT: Input should be less than")


def test_an_unreachable_database_or_a_bad_url_is_an_operational_error_not_a_bug() -> None:
    from core.config import get_settings

    for url, words in (
        ("postgresql+psycopg://nobody@127.0.0.1:1/db", "error: the database did not answer: "),
        ("foo://x", "error: DRIFTWARDEN_DATABASE_URL is not a database URL this install can open"),
    ):
        for args in (["db", "upgrade"], ["models", "list"]):
            get_settings.cache_clear()  # the settings of this environment, not of an earlier command
            result = CliRunner().invoke(app, args, env={"DRIFTWARDEN_DATABASE_URL": url})
            assert result.exit_code == 2, (url, args, result.output)
            assert result.output.startswith(words) and "a bug" not in result.output, result.output
            assert len(result.output.strip().splitlines()) == 1
    get_settings.cache_clear()


def test_serve_on_a_port_in_use_says_so_at_once(tmp_path: Path) -> None:
    import socket

    from core.config import get_settings

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        get_settings.cache_clear()
        env = {
            "DRIFTWARDEN_DATABASE_URL": f"sqlite:///{tmp_path / 'dw.db'}",
            "DRIFTWARDEN_API_HOST": "127.0.0.1",
        }
        result = CliRunner().invoke(app, ["serve", "--port", str(port)], env=env)
    get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert (
        result.output == f"error: --host/--port: 127.0.0.1:{port} is in use (another server?): choose "
        "another with --port (or DRIFTWARDEN_API_PORT) or stop what listens there\n"
    )
