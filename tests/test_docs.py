"""Every `driftwarden` command written in README.md and docs/*.md matches the real CLI, and runs as written.

Two checks. Every documented command (inline or in a code block, synopses with placeholders included) names
a real command path and only options that command has. Every *concrete* one (no placeholder, no brackets)
is run exactly as written, in the order the docs give, in one fresh workspace: it must exit as documented.
Long-running processes are run by their own tests: `serve` by the README quick start
(tests/test_quickstart.py runs that whole block), `demo` by tests/test_demo.py, the cluster nodes by the
cluster tests.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from service.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_.]*(\[.*\])?$|^[A-Z]+:[A-Z]+$|\.\.\.|[\[\]|]")
# processes that run until stopped: each has its own test (see the module docstring)
LONG_RUNNING = ("serve", "monitor", "demo", "cluster node", "cluster chief", "cluster sync-worker", "worker")
# documented exit codes of concrete commands that are not 0 in a fresh workspace
EXPECTED_EXIT = {
    "drift --reference-version credit:1 --target default new-data.csv": 1,  # the shifted file drifts
}


def documented() -> list[tuple[str, str]]:
    """(document, command line) for every `driftwarden ...` in the docs, in document order."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text()
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
            for line in block.splitlines():
                line = line.split("  #", 1)[0].strip()
                if line.startswith("driftwarden "):
                    found.append((doc.name, line))
        for span in re.findall(r"`(driftwarden [^`]+)`", text):
            found.append((doc.name, span))
    return list(dict.fromkeys(found))


def words(line: str) -> list[str]:
    """The command's own words: shell operators (`&`, `||`, `;`, pipes) and what follows them cut off."""
    out: list[str] = []
    for token in shlex.split(line.replace("\\|", "|")):
        if token in ("&", "||", "&&", ";", "|"):
            break
        out.append(token)
    return out[1:]  # without "driftwarden"


def resolve(args: list[str]) -> tuple[Any, list[str], list[str]]:
    """(click command, its path, the remaining words) for ``args`` on the real CLI."""
    command: Any = typer.main.get_command(app)
    path: list[str] = []
    rest = list(args)
    while rest and hasattr(command, "commands"):
        if rest[0].startswith(("-", "[")):
            if path:  # a group's own options (`monitor --once`): what follows is theirs, not a command
                break
            rest.pop(0)  # a root option such as --debug, before the command
            continue
        if rest[0] == "...":
            break
        name = rest.pop(0)
        assert name in command.commands, f"`{' '.join(path + [name])}` is not a command"
        command = command.commands[name]
        path.append(name)
    return command, path, rest


@pytest.mark.parametrize(("doc", "line"), documented(), ids=lambda v: v if "driftwarden" in v else None)
def test_documented_command_exists_with_its_options(doc: str, line: str) -> None:
    command, path, rest = resolve(words(line))
    options = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--help"}
    if not path:
        options |= {opt for p in typer.main.get_command(app).params for opt in p.opts}
    for word in rest:
        for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", word):
            assert option in options, f"{doc}: `{line}`: {' '.join(path)} has no option {option}"


def concrete() -> list[tuple[str, str]]:
    out = []
    for doc, line in documented():
        args = words(line)
        command, path, rest = resolve(args)
        if (any(PLACEHOLDER.search(w) for w in args) or not path) and args != ["--help"]:
            continue
        if not rest and any(p.required for p in command.params):
            continue  # a command's name in prose ("`driftwarden train` starts ..."), not a command line
        if " ".join(args).startswith(LONG_RUNNING) and "--once" not in args and "--help" not in args:
            continue
        out.append((doc, line))
    # run what makes data first, then what trains, then the rest, each once
    order = {"data": 0, "train": 1, "models": 2}
    unique = list(dict.fromkeys(line for _, line in out))
    return [("docs", line) for line in sorted(unique, key=lambda line: order.get(words(line)[0], 3))]


@pytest.mark.cluster
def test_concrete_documented_commands_run_as_written(tmp_path: Path) -> None:
    runs = concrete()
    assert any("train" in line for _, line in runs), "the docs show no concrete train command any more"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTWARDEN_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for _, line in runs:
        args = words(line)
        proc = subprocess.run(
            ["driftwarden", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        want = EXPECTED_EXIT.get(" ".join(args), 0)
        out = proc.stdout + proc.stderr
        assert proc.returncode == want, (
            f"`{line}` exited {proc.returncode} (documented: {want}):\n{out[-3000:]}"
        )
        assert "Traceback" not in out, f"`{line}`:\n{out[-3000:]}"


def test_every_documented_setting_is_a_real_setting() -> None:
    from core.config import Settings

    real = {f"DRIFTWARDEN_{name.upper()}" for name in Settings.model_fields}
    for doc in DOCS:
        named = set(re.findall(r"DRIFTWARDEN_[A-Z_]+[A-Z]", doc.read_text()))
        assert named <= real, f"{doc.name} names settings that do not exist: {sorted(named - real)}"
