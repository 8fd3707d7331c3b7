"""Audit constraints.txt against a dated snapshot of the PyPA Advisory Database (pip-audit's fallback).

``scripts/audit.sh`` runs pip-audit first; where PyPI's per-version JSON API and OSV cannot be reached, it
runs ``check`` here instead. The snapshot (``scripts/advisories/pypa-advisories.json``) holds the
advisories of the pinned packages only, taken from https://github.com/pypa/advisory-database (CC-BY 4.0);
``refresh`` rebuilds it from a checkout of that repository::

    git clone --depth 1 https://github.com/pypa/advisory-database /tmp/advisory-database
    .venv/bin/python scripts/advisories.py refresh /tmp/advisory-database
    .venv/bin/python scripts/advisories.py check

``check`` exits 1 when a pin has a known vulnerability that ``scripts/advisories/ignore.toml`` does not list
(each entry there is explained in docs/security.md), 2 when the snapshot cannot be read, 0 otherwise.

``latest`` is the live half of the fallback: PyPI's project document (``/pypi/NAME/json``, which registry
mirrors that refuse the per-version one still serve) lists today's advisories of the project's *latest*
release. For every pin that is that release, those are exactly its known vulnerabilities, current to the
day; a pin older than the latest release is listed as such (the document says nothing about old releases).
It exits 1 on a finding, 3 when PyPI could not be asked about any pin, 0 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
SNAPSHOT = ROOT / "scripts" / "advisories" / "pypa-advisories.json"
IGNORES = ROOT / "scripts" / "advisories" / "ignore.toml"
SOURCE = "https://github.com/pypa/advisory-database"
PYPI_JSON = "https://pypi.org/pypi"
LICENCE = (
    "Advisory data from the Python Packaging Advisory Database (https://github.com/pypa/advisory-database), "
    "licensed CC-BY 4.0 (https://creativecommons.org/licenses/by/4.0/); reduced to the packages pinned in "
    "constraints.txt and to the fields this audit reads."
)
MAX_AGE_DAYS = 90
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;#]+)")


def normalize(name: str) -> str:
    """The PEP 503 normalized form of a project name (``PyYAML`` and ``pyyaml`` are one project)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, tuple[str, str]]:
    """The ``name==version`` pins of a constraints file: normalized name -> (name as written, version)."""
    pins: dict[str, tuple[str, str]] = {}
    for line in path.read_text().splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[normalize(match.group(1))] = (match.group(1), match.group(2))
    return pins


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _event_key(event: dict[str, str]) -> tuple[int, Version]:
    value = next(iter(event.values()))
    parsed = _version(value)
    if value == "0" or parsed is None:
        return (0, Version("0"))
    return (1, parsed)


def in_range(version: Version, events: Sequence[dict[str, str]]) -> bool:
    """Whether ``version`` lies in one OSV ``ECOSYSTEM`` range.

    Parameters
    ----------
    version
        The pinned version.
    events
        The range's events, each ``{"introduced": v}``, ``{"fixed": v}`` or ``{"last_affected": v}``;
        ``introduced: "0"`` means every version before the next event.

    Returns
    -------
    bool
        True when the version is affected, by the evaluation of the OSV schema: events sorted by version, an
        ``introduced`` at or below the version opens the range, a ``fixed`` at or below it (or a
        ``last_affected`` strictly below it) closes it. Events whose version does not parse are skipped.
    """
    affected = False
    for event in sorted(events, key=_event_key):
        kind, value = next(iter(event.items()))
        bound = _version(value)
        if kind == "introduced" and (value == "0" or (bound is not None and version >= bound)):
            affected = True
        elif bound is not None and (
            (kind == "fixed" and version >= bound) or (kind == "last_affected" and version > bound)
        ):
            affected = False
    return affected


def affects(advisory: dict[str, Any], name: str, version: str) -> bool:
    """Whether a (reduced) advisory affects ``name`` at ``version``: its versions list or a range."""
    if normalize(advisory["package"]) != normalize(name):
        return False
    parsed = _version(version)
    for listed in advisory.get("versions", []):
        other = _version(listed)
        if listed == version or (parsed is not None and other is not None and parsed == other):
            return True
    return parsed is not None and any(in_range(parsed, events) for events in advisory.get("ranges", []))


def reduce_entry(entry: dict[str, Any], wanted: set[str]) -> list[dict[str, Any]]:
    """The reduced advisories of one OSV entry, one per affected package among ``wanted`` (normalized)."""
    if entry.get("withdrawn"):
        return []
    summary = (entry.get("summary") or entry.get("details") or "").strip().splitlines()
    out: list[dict[str, Any]] = []
    for affected in entry.get("affected", []):
        package = affected.get("package", {})
        if package.get("ecosystem") != "PyPI" or normalize(package.get("name", "")) not in wanted:
            continue
        ranges = [
            [{str(k): str(v) for k, v in event.items()} for event in r.get("events", [])]
            for r in affected.get("ranges", [])
            if r.get("type") == "ECOSYSTEM"
        ]
        fixed = sorted(
            {e["fixed"] for events in ranges for e in events if "fixed" in e},
            key=lambda v: _version(v) or Version("0"),
        )
        out.append(
            {
                "id": entry["id"],
                "aliases": sorted(entry.get("aliases") or []),
                "package": normalize(package["name"]),
                "versions": [str(v) for v in affected.get("versions") or []],
                "ranges": ranges,
                "fixed": fixed,
                "summary": textwrap.shorten(summary[0], 200, placeholder=" ...") if summary else "",
            }
        )
    return out


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def refresh(checkout: Path, pins: Iterable[str], *, commit: str | None, date: str | None) -> dict[str, Any]:
    """The snapshot document of the advisories in ``checkout/vulns`` that name one of ``pins``."""
    wanted = set(pins)
    advisories: list[dict[str, Any]] = []
    for path in sorted((checkout / "vulns").rglob("*.yaml")):
        entry = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if isinstance(entry, dict):
            advisories.extend(reduce_entry(entry, wanted))
    advisories.sort(key=lambda a: (a["package"], a["id"]))
    return {
        "source": SOURCE,
        "commit": commit or _git(checkout, "rev-parse", "HEAD"),
        "date": date or _git(checkout, "log", "-1", "--format=%cI"),
        "licence": LICENCE,
        "packages": sorted(wanted),
        "advisories": advisories,
    }


def dump(doc: dict[str, Any]) -> str:
    """The snapshot as JSON text: header fields one a line, then one advisory a line (readable diffs)."""
    head = {k: v for k, v in doc.items() if k != "advisories"}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    rows = [f"  {json.dumps(a, sort_keys=True, separators=(',', ':'))}" for a in doc["advisories"]]
    return "{\n" + "\n".join(lines) + '\n "advisories": [\n' + ",\n".join(rows) + "\n ]\n}\n"


def read_ignores(path: Path) -> dict[str, str]:
    """Reviewed ignores: advisory id (or alias) -> reason. Each entry must give a reason."""
    if not path.exists():
        return {}
    ignores: dict[str, str] = {}
    for item in tomllib.loads(path.read_text()).get("ignore", []):
        if not str(item.get("reason", "")).strip():
            raise SystemExit(f"{path}: ignore entry {item.get('id')!r} gives no reason")
        ignores[str(item["id"])] = str(item["reason"])
    return ignores


def report(
    pin: str,
    ids: list[str],
    fixed: list[str],
    summary: str,
    ignores: dict[str, str],
    *,
    show_aliases: bool = False,
) -> bool:
    """Print one advisory of ``pin`` as pip-audit does; True when it is a finding (not in ``ignores``)."""
    aliases = f" [{', '.join(ids[1:])}]" if show_aliases and len(ids) > 1 else ""
    line = f"  {pin}: {ids[0]}{aliases} (fixed in {', '.join(fixed) or 'no release'})"
    reason = next((ignores[i] for i in ids if i in ignores), None)
    print(f"{line}: {summary}" if reason is None else f"{line}: ignored, {reason}")
    return reason is None


def check(
    pins: dict[str, tuple[str, str]],
    snapshot: dict[str, Any],
    ignores: dict[str, str],
    *,
    today: dt.date,
    max_age_days: int,
    strict: bool,
) -> int:
    """Print the findings of ``pins`` against ``snapshot`` (pip-audit's format) and return the exit status."""
    covered = set(snapshot["packages"])
    findings = ignored = 0
    for key, (name, version) in sorted(pins.items()):
        for advisory in snapshot["advisories"]:
            if advisory["package"] != key or not affects(advisory, key, version):
                continue
            found = report(
                f"{name} {version}",
                [advisory["id"], *advisory["aliases"]],
                advisory["fixed"],
                advisory["summary"],
                ignores,
                show_aliases=True,
            )
            findings += found
            ignored += not found
    missing = sorted(set(pins) - covered)
    snapshot_date = dt.datetime.fromisoformat(snapshot["date"]).date()
    age = (today - snapshot_date).days
    print(
        f"  audited {len(pins) - len(missing)} of {len(pins)} pins against the PyPA advisory database "
        f"snapshot of {snapshot_date.isoformat()} ({age} days old, commit {snapshot['commit'][:12]}): "
        f"{findings} known vulnerabilities, {ignored} ignored"
    )
    if age > max_age_days:
        print(
            f"  WARNING: the advisory snapshot is {age} days old (more than {max_age_days}): advisories "
            f"published since {snapshot_date.isoformat()} are not checked; refresh it "
            "(python scripts/advisories.py refresh PATH_TO_CHECKOUT, see docs/security.md)",
            file=sys.stderr,
        )
    if missing:
        print(
            f"  WARNING: {len(missing)} pins are not in the snapshot (added after its refresh), not audited: "
            f"{', '.join(missing)}",
            file=sys.stderr,
        )
    return 1 if findings or (strict and missing) else 0


def _project(client: httpx.Client, index: str, name: str) -> dict[str, Any] | str:
    """PyPI's JSON document of project ``name``, or why it could not be had."""
    try:
        response = client.get(f"{index.rstrip('/')}/{name}/json")
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    try:
        doc = response.json()
    except ValueError:
        return "not JSON"
    return doc if isinstance(doc, dict) else "not a JSON object"


def latest(
    pins: dict[str, tuple[str, str]], ignores: dict[str, str], *, index: str, timeout_s: float = 20.0
) -> int:
    """Check every pin that is its project's latest release against PyPI's live advisories of that release."""
    with httpx.Client(timeout=timeout_s, follow_redirects=True) as client, ThreadPoolExecutor(8) as pool:
        docs = dict(zip(pins, pool.map(lambda key: _project(client, index, key), pins), strict=True))
    findings = ignored = 0
    current: list[str] = []
    older: list[str] = []
    failed: list[str] = []
    for key, (name, version) in sorted(pins.items()):
        doc = docs[key]
        if isinstance(doc, str):
            failed.append(f"{name} ({doc})")
            continue
        newest = str(doc.get("info", {}).get("version", ""))
        if _version(newest) != _version(version):
            older.append(f"{name} {version} (latest {newest})")
            continue
        current.append(name)
        for vuln in doc.get("vulnerabilities") or []:
            if vuln.get("withdrawn"):
                continue
            found = report(
                f"{name} {version}",
                [str(vuln.get("id")), *map(str, vuln.get("aliases") or [])],
                list(map(str, vuln.get("fixed_in") or [])),
                str(vuln.get("summary") or vuln.get("details") or "")[:200],
                ignores,
            )
            findings += found
            ignored += not found
    print(
        f"  {len(current)} of {len(pins)} pins are their project's latest release and were checked against "
        f"PyPI's advisories of today ({index}): {findings} known vulnerabilities, {ignored} ignored; "
        f"{len(older)} pins are older than the latest release (PyPI lists no advisories of old releases "
        f"here: the snapshot covers them); {len(failed)} could not be looked up"
    )
    if older:
        print(f"  older than the latest release: {', '.join(older)}")
    if failed:
        print(f"  WARNING: not looked up: {', '.join(failed)}", file=sys.stderr)
    if findings:
        return 1
    return 3 if not current and not older else 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``refresh PATH_TO_CHECKOUT`` or ``check``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--constraints", type=Path, default=CONSTRAINTS)
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT)
    commands = parser.add_subparsers(dest="command", required=True)
    refresh_cmd = commands.add_parser(
        "refresh", help="rebuild the snapshot from an advisory-database checkout"
    )
    refresh_cmd.add_argument("checkout", type=Path)
    refresh_cmd.add_argument("--commit", help="the checkout's commit id (default: git rev-parse HEAD)")
    refresh_cmd.add_argument("--date", help="the commit's date, ISO 8601 (default: from git)")
    check_cmd = commands.add_parser("check", help="audit the pins against the snapshot; exit 1 on a finding")
    check_cmd.add_argument("--ignores", type=Path, default=IGNORES)
    check_cmd.add_argument("--max-age-days", type=int, default=MAX_AGE_DAYS)
    check_cmd.add_argument("--today", type=dt.date.fromisoformat, default=dt.datetime.now(dt.UTC).date())
    check_cmd.add_argument("--strict", action="store_true", help="a pin missing from the snapshot fails too")
    latest_cmd = commands.add_parser(
        "latest", help="check the pins that are their project's latest release against PyPI's live advisories"
    )
    latest_cmd.add_argument("--ignores", type=Path, default=IGNORES)
    latest_cmd.add_argument("--index", default=PYPI_JSON, help=f"PyPI's JSON API (default {PYPI_JSON})")
    ids_cmd = commands.add_parser(
        "ignored-ids", help="print the ids of the ignore list, one a line (for pip-audit)"
    )
    ids_cmd.add_argument("--ignores", type=Path, default=IGNORES)
    args = parser.parse_args(argv)

    if args.command == "ignored-ids":
        for advisory_id in read_ignores(args.ignores):
            print(advisory_id)
        return 0
    pins = read_pins(args.constraints)
    if args.command == "latest":
        return latest(pins, read_ignores(args.ignores), index=args.index)
    if args.command == "refresh":
        doc = refresh(args.checkout, pins, commit=args.commit, date=args.date)
        args.snapshot.parent.mkdir(parents=True, exist_ok=True)
        args.snapshot.write_text(dump(doc))
        print(
            f"{args.snapshot}: {len(doc['advisories'])} advisories for {len(pins)} pins, "
            f"commit {doc['commit']} of {doc['date']}"
        )
        return 0
    try:
        snapshot = json.loads(args.snapshot.read_text())
    except (OSError, ValueError) as exc:
        print(f"  ERROR: cannot read the advisory snapshot {args.snapshot}: {exc}", file=sys.stderr)
        return 2
    return check(
        pins,
        snapshot,
        read_ignores(args.ignores),
        today=args.today,
        max_age_days=args.max_age_days,
        strict=args.strict,
    )


if __name__ == "__main__":
    sys.exit(main())
