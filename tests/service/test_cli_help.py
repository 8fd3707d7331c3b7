"""`driftwarden ... --help` reads well at any width, and every error of the CLI is one `error:` line.

The help's prose wraps where the terminal ends, never where a docstring's source line did (`...and always`
/ `stopped.`); a flag shows no value type (`--help <bool>`); a usage error (unknown option, missing
argument, bad value) is one line naming the command's help, exit 2; an invalid setting names its whole
environment variable. (`reports link` without DRIFTWARDEN_PUBLIC_URL saying so is
tests/monitors/test_report_link_cli.py.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.config import env_var, get_settings
from service.cli import _reflow, app

CLI = str(Path(sys.executable).parent / "driftwarden")
NAMED = [  # the commands whose help broke where the source did (issue 31)
    ["train"],
    ["worker"],
    ["serve"],
    ["drift"],
    ["predictions", "purge"],
    ["predictions", "rejected"],
    ["models", "promote"],
    ["cluster", "node"],
    ["tokens", "rotate-link-key"],
]
LIST_ITEM = re.compile(r"\s*([-*•]|\d{1,2}[.)])\s")


def help_at(command: list[str], width: int) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, (command, result.output)
    return result.output


def prose(text: str) -> list[str]:
    """The help's free text: the description under the usage line and the epilog below the boxes."""
    lines = text.splitlines()
    first_box = next(i for i, line in enumerate(lines) if line.lstrip().startswith("╭"))
    last_box = max(i for i, line in enumerate(lines) if line.lstrip().startswith("╰"))
    usage = next(i for i, line in enumerate(lines) if line.lstrip().startswith("Usage:"))
    return [*lines[usage + 1 : first_box], "", *lines[last_box + 1 :]]


def early_breaks(lines: list[str], width: int) -> list[str]:
    """Lines of a paragraph that end before the terminal does: the next line's first word would have fit."""
    found = []
    for line, after in zip(lines, lines[1:], strict=False):
        line, after = line.rstrip(), after.strip()
        if not line.strip() or not after or LIST_ITEM.match(after):
            continue  # a paragraph's last line, or the line before a list's item
        if len(line) + 1 + len(after.split()[0]) <= width - 1:  # rich pads the text by one column
            found.append(f"{line.strip()!r} / {after.split()[0]!r}")
    return found


@pytest.mark.parametrize("command", NAMED, ids=" ".join)
def test_help_prose_wraps_at_the_terminal_not_at_the_source(command: list[str]) -> None:
    for width in (60, 100, 200):
        text = help_at(command, width)
        assert early_breaks(prose(text), width) == [], (command, width)
        assert "<bool>" not in text, (command, width)
        if width == 200:  # the help option's row: its name, then its text, no value type between
            assert re.search(r"--help\s+Show this message and exit\.", text), command


def test_the_check_finds_the_breaks_of_an_unreflowed_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the reflow, `train --help` breaks where its docstring does: the check above sees it."""
    monkeypatch.setattr("service.cli._reflow", lambda text: text)
    assert early_breaks(prose(help_at(["train"], 200)), 200) != []


def test_a_known_paragraph_is_whole_and_no_line_is_a_lone_connective() -> None:
    wide = help_at(["train"], 200)
    assert (
        "By default a local cluster (ps and worker processes on loopback) is started for the run and always "
        "stopped." in wide
    )
    for width in (60, 100):
        lines = [line.strip() for line in prose(help_at(["train"], width))]
        assert "stopped." not in lines and "and" not in lines and "(with" not in lines, width


def test_reflow_joins_a_paragraph_and_keeps_paragraphs_lists_and_marked_blocks() -> None:
    doc = """Summary line.

    A paragraph broken
    where the source was and
    (with a parenthesis).

    Steps:
    - first item that
      goes on
    - second item
    1. numbered

    \b
    kept   as
    written

    \f
    hidden
    lines
    """
    assert _reflow(doc) == (
        "Summary line.\n\n"
        "A paragraph broken where the source was and (with a parenthesis).\n\n"
        "Steps:\n- first item that goes on\n- second item\n1. numbered\n\n"
        "\b\nkept   as\nwritten"
        "\f\nhidden\nlines"
    )


USAGE_ERRORS = [
    (["train", "--bogus"], "No such option: --bogus", "driftwarden train"),
    (["models", "promote"], "Missing argument 'name'", "driftwarden models promote"),
    (
        ["train", "-m", "x", "-d", "x.csv", "--mode", "fast"],
        "Invalid value for '--mode': ",
        "driftwarden train",
    ),
    (
        ["reports", "link", "credit", "--ttl"],
        "Option '--ttl' requires an argument",
        "driftwarden reports link",
    ),
    (
        ["models", "promote", "a", "b", "c", "d"],
        "Got unexpected extra argument(s) (c d)",
        "driftwarden models promote",
    ),
    (["models", "nosuch"], "No such command 'nosuch'", "driftwarden models"),
]


@pytest.mark.parametrize(("args", "words", "where"), USAGE_ERRORS, ids=lambda v: str(v))
def test_a_usage_error_is_one_error_line_naming_the_help(args: list[str], words: str, where: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: {words}"), result.stderr
    assert result.stderr.endswith(f" (see `{where} --help`)\n"), result.stderr
    assert "Value error" not in result.stderr and "╭" not in result.stderr


def test_a_bad_choice_names_the_choices_without_pydantics_prefix() -> None:
    result = CliRunner().invoke(app, ["train", "-m", "x", "-d", "x.csv", "--mode", "fast"])
    assert result.stderr == (
        "error: Invalid value for '--mode': 'fast' is not one of 'async', 'sync', 'local' "
        "(see `driftwarden train --help`)\n"
    )


def test_the_installed_command_prints_the_same_one_line() -> None:
    """The console script (what a user runs), not only the test runner's invocation."""
    out = subprocess.run([CLI, "cluster", "node", "--bogus"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == "error: No such option: --bogus (see `driftwarden cluster node --help`)\n"


def test_env_var_names_the_whole_variable() -> None:
    assert env_var("monitor_interval_s") == "DRIFTWARDEN_MONITOR_INTERVAL_S"


@pytest.mark.parametrize(
    ("env", "lines"),
    [
        (
            {"DRIFTWARDEN_MONITOR_INTERVAL_S": "soon"},
            [
                "error: invalid setting DRIFTWARDEN_MONITOR_INTERVAL_S: Input should be a valid number, "
                "unable to parse string as a number (fix or unset that environment variable)"
            ],
        ),
        (
            {"DRIFTWARDEN_SERVE_MODELS": '["credit", 7]'},
            [
                "error: invalid setting DRIFTWARDEN_SERVE_MODELS: item 2: Input should be a valid string "
                "(fix or unset that environment variable)"
            ],
        ),
        (
            {"DRIFTWARDEN_SERVE_MODELS": "credit,fraud"},
            [
                "error: invalid setting DRIFTWARDEN_SERVE_MODELS: not valid JSON (Expecting value: line 1 "
                'column 1 (char 0)): write a list as ["a", "b"] (fix or unset that environment variable)'
            ],
        ),
    ],
    ids=["number", "list item", "not JSON"],
)
def test_an_invalid_setting_names_its_whole_variable(env: dict[str, str], lines: list[str]) -> None:
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["config"], env=env)
    get_settings.cache_clear()
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == lines
    assert "soon" not in result.stderr and "fraud" not in result.stderr  # the value stays out
