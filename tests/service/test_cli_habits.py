"""Issue 43, item 4: one habit per flag across commands.

Every command of the real CLI (the lazily registered domains' too) is walked through its ``--help``: a
``--json`` takes ``[PATH|-]`` with the same words everywhere, ``--quiet`` / ``-q`` is there, and the help
ends with the command's exit codes, equal to the one table docs/cli.md shows. Then the habits themselves,
on real commands over a real SQLite database and real files: bare ``--json`` and ``--json -`` print the
same document on stdout (``drift``, ``webhooks list``, ``alerts list``, ``tokens list``, ``alerts
backtest``), ``--json PATH`` writes the file and says so on stderr, and ``--quiet`` leaves stderr empty
(errors excepted) and stdout unchanged.

The imports of the habits' own modules are inside the tests that read them, so that on a checkout without
them the behaviour tests fail on what the commands do, not on an import.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner, Result

from service.cli import app
from tests.alerts.backtest_model import MODEL, open_test_database, register_backtest_model

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def commands() -> list[tuple[str, Any]]:
    """(path, click command) of every command that runs something, root's and every domain's."""
    root: Any = typer.main.get_command(app)
    ctx: Any = typer.Context(root)
    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: list[str]) -> None:
        subs = getattr(command, "commands", None)
        if path and (subs is None or getattr(command, "invoke_without_command", False)):
            found.append((" ".join(path), command))
        for name in command.list_commands(ctx) if subs is not None else ():
            walk(command.get_command(ctx, name), [*path, name])

    walk(root, [])
    return found


ALL = commands()
WITH_JSON = {
    "drift",
    "models list",
    "models show",
    "jobs list",
    "jobs show",
    "alerts list",
    "alerts rules",
    "alerts silences",
    "alerts backtest",
    "webhooks list",
    "webhooks deliveries",
    "tokens list",
    "predictions export",
}


def exit_block(help_text: str) -> dict[int, str]:
    """The exit codes at the end of a command's help: code -> its text, each joined onto one line."""
    tail = help_text.rsplit("Exit codes", 1)
    assert len(tail) == 2, "no exit codes in the help"
    codes: dict[int, str] = {}
    current = None
    for line in tail[1].splitlines():
        started = re.match(r"\s*(\d+)  (.*)", line)
        if started:
            current = int(started[1])
            codes[current] = started[2].strip()
        elif line.strip() and current is not None:
            codes[current] += " " + line.strip()
    return codes


def test_the_walk_finds_every_domains_commands() -> None:
    paths = {path for path, _ in ALL}
    assert {
        "drift",
        "alerts backtest",
        "webhooks list",
        "monitor",
        "tokens list",
        "config",
        "db upgrade",
    } <= paths
    assert len(paths) >= 40


@pytest.mark.parametrize(("path", "command"), ALL, ids=[path for path, _ in ALL])
def test_each_commands_help_shows_the_shared_habits(path: str, command: Any) -> None:
    result = invoke(*path.split(), "--help")
    assert result.exit_code == 0, result.output
    text = result.output
    # --quiet / -q on every command, with one wording
    options = {opt: p for p in command.params for opt in p.opts}
    assert {"--quiet", "-q"} <= set(options), path
    assert re.search(r"--quiet\s+-q\s+Print nothing on standard error but errors", text), path
    from core.cli_options import JSON_HELP, JSON_METAVAR
    from service.cli_habits import exit_codes

    # --json, where a command has it, takes [PATH|-] and says the same
    assert ("--json" in options) == (path in WITH_JSON), path
    if "--json" in options:
        option = options["--json"]
        assert (option.metavar, option.help, option.is_flag) == (JSON_METAVAR, JSON_HELP, False), path
        assert re.search(r"--json\s+\[PATH\|-\]\s+Print JSON instead \(bare --json or --json -", text), path
    # the help ends with the command's exit codes, the table's
    assert exit_block(text) == {code: " ".join(words.split()) for code, words in exit_codes(path).items()}
    assert text.rstrip().splitlines()[-1].strip() != "", path


def docs_exit_tables() -> tuple[dict[int, str], dict[tuple[str, int], str]]:
    """docs/cli.md's two exit-code tables: every command's codes, and the commands that say more."""
    text = (ROOT / "docs" / "cli.md").read_text().split("## Exit codes", 1)[1]
    common: dict[int, str] = {}
    own: dict[tuple[str, int], str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 2 and cells[0].isdigit():
            common[int(cells[0])] = cells[1]
        elif len(cells) == 3 and cells[1].isdigit():
            own[(cells[0].strip("`").removeprefix("driftwarden "), int(cells[1]))] = cells[2]
    return common, own


def test_docs_show_the_exit_codes_the_help_shows() -> None:
    from service.cli_habits import COMMON_EXIT_CODES, EXIT_CODES

    common, own = docs_exit_tables()
    assert common == COMMON_EXIT_CODES
    table = {
        (path, code): text or "(not used)"
        for path, codes in EXIT_CODES.items()
        for code, text in codes.items()
    }
    assert own == table
    assert {path for path, _ in own} <= {path for path, _ in ALL}


def test_docs_list_the_commands_with_json() -> None:
    text = (ROOT / "docs" / "cli.md").read_text().split("The commands with `--json`:", 1)[1].split("##", 1)[0]
    assert set(re.findall(r"^\| `driftwarden ([a-z -]+)` \|", text, re.M)) == WITH_JSON


# --- the habits at work --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A reference and a shifted current table, written by `driftwarden data generate`."""
    folder = tmp_path_factory.mktemp("habits")
    made = {"reference": folder / "reference.csv", "current": folder / "current.csv"}
    for (name, path), scenario in zip(made.items(), ("baseline", "covariate_shift"), strict=True):
        result = runner.invoke(
            app, ["data", "generate", "--rows", "2000", "--scenario", scenario, "--out", str(path)]
        )
        assert result.exit_code == 0, (name, result.output)
    return made


@pytest.fixture
def stored_token() -> Iterator[None]:
    """One API token in the test's database, so that `tokens list` has a row to print."""
    result = invoke("tokens", "create", "--name", "ci", "--scope", "read")
    assert result.exit_code == 0, result.output
    yield


LISTS = [("webhooks", "list"), ("alerts", "list"), ("tokens", "list")]


@pytest.mark.parametrize("command", LISTS, ids=" ".join)
def test_bare_json_and_dash_print_the_same_document(command: tuple[str, ...], stored_token: None) -> None:
    bare, dash = invoke(*command, "--json"), invoke(*command, "--json", "-")
    assert bare.exit_code == dash.exit_code == 0, bare.output + dash.output
    assert bare.stdout == dash.stdout
    assert isinstance(json.loads(dash.stdout), list)
    assert dash.stderr == ""  # to stdout: no note


def test_a_listing_that_had_no_json_has_it_now() -> None:
    added = invoke("webhooks", "add", "http://127.0.0.1:9/hook", "--quiet")
    assert added.exit_code == 0, added.output
    hook = re.match(r"webhook (\S+) -> ", added.stdout)
    assert hook is not None, added.stdout
    bare, dash = (
        invoke("webhooks", "deliveries", hook[1], "--json"),
        invoke("webhooks", "deliveries", hook[1], "--json", "-"),
    )
    assert bare.exit_code == dash.exit_code == 0, bare.output + dash.output
    assert json.loads(bare.stdout) == json.loads(dash.stdout) == []


def test_bare_json_before_another_option_is_stdout_too(stored_token: None) -> None:
    before = invoke("alerts", "list", "--json", "--model", "credit")
    after = invoke("alerts", "list", "--model", "credit", "--json", "-")
    assert before.exit_code == after.exit_code == 0, before.output + after.output
    assert json.loads(before.stdout) == json.loads(after.stdout) == []
    listed = json.loads(invoke("tokens", "list", "--json", "--quiet").stdout)
    assert [t["name"] for t in listed] == ["ci"]


def test_json_path_writes_the_file_and_says_so(tmp_path: Path, stored_token: None) -> None:
    out = tmp_path / "new" / "tokens.json"
    result = invoke("tokens", "list", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert [t["name"] for t in json.loads(out.read_text())] == ["ci"]
    assert result.stdout == ""
    assert result.stderr == f"wrote JSON to {out}\n"
    quiet = invoke("tokens", "list", "--json", str(tmp_path / "again.json"), "-q")
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == ""
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(out.read_text())


def test_json_path_that_is_a_folder_is_one_error_line(tmp_path: Path) -> None:
    result = invoke("webhooks", "list", "--json", str(tmp_path), "--quiet")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: --json {tmp_path} is a directory: give a file path, e.g. {tmp_path / 'out.json'}\n"
    )


def test_drift_json_bare_dash_and_file(files: dict[str, Path], tmp_path: Path) -> None:
    sides = (str(files["reference"]), str(files["current"]))
    bare, dash = invoke("drift", *sides, "--json"), invoke("drift", *sides, "--json", "-")
    assert bare.exit_code == dash.exit_code == 1, bare.output  # the shifted file drifts
    assert bare.stdout == dash.stdout and json.loads(bare.stdout)["dataset"]["drifted"] is True
    assert "DATASET DRIFTED" in bare.stderr  # the table goes to stderr when the report is on stdout
    out = tmp_path / "report.json"
    to_file = invoke("drift", *sides, "--json", str(out))
    assert to_file.exit_code == 1
    assert json.loads(out.read_text()) == json.loads(dash.stdout)
    assert "DATASET DRIFTED" in to_file.stdout and to_file.stderr == f"wrote JSON to {out}\n"


def test_quiet_silences_stderr_but_not_stdout_nor_errors(files: dict[str, Path]) -> None:
    sides = (str(files["reference"]), str(files["current"]))
    loud = invoke("drift", *sides, "--json", "-")
    assert loud.stderr != ""  # the table, on stderr
    for args in (
        ("drift", *sides, "--json", "-", "--quiet"),
        ("drift", *sides, "-q", "--json"),
        ("-q", "drift", *sides, "--json"),
    ):
        quiet = invoke(*args)
        assert quiet.exit_code == 1, (args, quiet.output)
        assert quiet.stderr == "", args
        assert quiet.stdout == loud.stdout, args
    failed = invoke(
        "drift", str(files["reference"]), str(files["reference"].with_name("nope.csv")), "--quiet"
    )
    assert failed.exit_code == 2 and failed.stdout == ""
    assert (
        len(failed.stderr.splitlines()) == 1
        and failed.stderr.startswith("error: ")
        and "nope.csv" in failed.stderr
    )
    after = invoke("drift", *sides, "--json", "-")  # --quiet lasts one invocation
    assert after.stderr != ""


@pytest.fixture
def registered(tmp_path: Path) -> Path:
    """The backtest's small model, registered and serving; its reference's path."""
    return register_backtest_model(open_test_database(), tmp_path)


def test_backtest_json_bare_dash_and_file(registered: Path, tmp_path: Path) -> None:
    args = [
        "alerts",
        "backtest",
        "--model",
        MODEL,
        "--days",
        "0.1",
        "--window",
        "1000",
        "--shift",
        "abrupt_mean",
    ]
    bare = invoke(*args, "--json")
    assert bare.exit_code == 0, bare.output
    dash = invoke(*args[:2], "--json", "-", *args[2:], "--quiet")  # before the other options
    assert dash.exit_code == 0, dash.output
    assert json.loads(bare.stdout) == json.loads(dash.stdout) and dash.stderr == ""
    assert {r["name"] for r in json.loads(bare.stdout)["rules"]}
    out = tmp_path / "bt.json"
    to_file = invoke(*args, "--json", str(out))
    assert to_file.exit_code == 0, to_file.output
    assert json.loads(out.read_text()) == json.loads(bare.stdout)
    assert to_file.stdout == "" and to_file.stderr.endswith(f"wrote JSON to {out}\n")


def test_backtest_checks_its_json_path_before_it_works(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = invoke("alerts", "backtest", "--model", "nosuch", "--json", str(tmp_path / "file" / "bt.json"))
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: --json {tmp_path / 'file' / 'bt.json'}: {tmp_path / 'file'} is a file, not a directory; "
        "choose another path\n"
    )


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (["x", "--json"], ["x", "--json", "-"]),
        (["x", "--json", "--model", "m"], ["x", "--json", "-", "--model", "m"]),
        (["x", "--json", "-q"], ["x", "--json", "-", "-q"]),
        (["x", "--json", "-"], ["x", "--json", "-"]),
        (["x", "--json", "out.json"], ["x", "--json", "out.json"]),
        (["x", "--json=out.json"], ["x", "--json=out.json"]),
        (["x", "--", "--json"], ["x", "--", "--json"]),
    ],
)
def test_json_argv_gives_a_bare_json_its_dash(given: list[str], parsed: list[str]) -> None:
    from core.cli_options import json_argv

    assert json_argv(given) == parsed
