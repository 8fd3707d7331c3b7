"""The one spelling of ``--json [PATH|-]`` for every command that prints a document (docs/cli.md).

A command declares ``as_json: JsonOut = None`` and answers with :func:`write_json`: bare ``--json`` or
``--json -`` prints the JSON document on standard output, ``--json PATH`` writes it to the file and says so
on standard error (unless ``--quiet``). Typer's vendored parser has no option with an optional value, so the
root command rewrites a bare ``--json`` (last, or followed by another option) to ``--json -`` before parsing
(:func:`json_argv`); a bare ``--json`` followed by a word takes that word as its PATH, as click's own optional
values do: write ``--json -`` (or put ``--json`` last) there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from core.errors import Invalid
from core.terminal import note

STDOUT = "-"
JSON_OPTION = "--json"
JSON_METAVAR = "[PATH|-]"
JSON_HELP = "Print JSON instead (bare --json or --json -: standard output; --json PATH: that file)."

JsonOut = Annotated[str | None, typer.Option(JSON_OPTION, metavar=JSON_METAVAR, help=JSON_HELP)]


def json_argv(args: list[str]) -> list[str]:
    """``args`` with each bare ``--json`` (last, or before another option) given its ``-``.

    Words after a ``--`` separator are positional and left as they are.
    """
    out: list[str] = []
    for i, word in enumerate(args):
        out.append(word)
        if word == "--":
            return out + args[i + 1 :]
        if word == JSON_OPTION:
            after = args[i + 1] if i + 1 < len(args) else None
            if after is None or (after.startswith("-") and after != STDOUT):
                out.append(STDOUT)
    return out


def json_text(doc: Any) -> str:
    """``doc`` as the indented JSON every command prints (dates and other objects as their text)."""
    return json.dumps(doc, indent=2, default=str, allow_nan=False)


def check_target(to: str | Path, *, option: str = JSON_OPTION, example: str = "out.json") -> Path:
    """``to`` as a path a file can be written at (``-`` is standard output); Invalid naming the option if not.

    A command that works long checks its ``--json PATH`` first, so that nothing is computed for nowhere.
    """
    path = Path(to)
    if str(to) == STDOUT:
        return path
    if path.is_dir():
        raise Invalid(f"{option} {path} is a directory: give a file path, e.g. {path / example}")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise Invalid(f"{option} {path}: {parent} is a file, not a directory; choose another path")
    return path


def write_text(text: str, *, to: str | Path, option: str = JSON_OPTION, what: str = "JSON") -> None:
    """``text`` to standard output (``-``) or to the file ``to`` (its folders made), saying so on stderr.

    A path that cannot be written is an :class:`~core.errors.Invalid` naming the option.
    """
    if str(to) == STDOUT:
        typer.echo(text)
        return
    path = check_target(to, option=option)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") else text + "\n")
    except OSError as exc:
        raise Invalid(
            f"{option} {path}: cannot write it ({exc.strerror or exc}); choose another path"
        ) from None
    note(f"wrote {what} to {path}")


def write_json(doc: Any, *, to: str | Path) -> None:
    """The JSON of ``doc`` where ``--json`` asked: standard output for ``-``, else the file."""
    write_text(json_text(doc), to=to)
