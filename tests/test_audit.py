"""The offline dependency audit (scripts/advisories.py): OSV matching, snapshot refresh, the check's verdict.

No network: hand-made OSV entries and snapshots in a temporary folder.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "advisories.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("advisories", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


adv = _load()


def advisory(
    package: str, *, versions: list[str] | None = None, ranges: Any = None, id: str = "PYSEC-1"
) -> dict:
    return {
        "id": id,
        "aliases": ["CVE-2099-1"],
        "package": package,
        "versions": versions or [],
        "ranges": ranges or [],
        "fixed": [],
        "summary": "a test advisory",
    }


def test_explicit_versions_list() -> None:
    entry = advisory("requests", versions=["2.30.0", "2.29"])
    assert adv.affects(entry, "requests", "2.30.0")
    assert adv.affects(entry, "requests", "2.29.0")  # 2.29 == 2.29.0 as versions
    assert not adv.affects(entry, "requests", "2.31.0")
    assert not adv.affects(entry, "urllib3", "2.30.0")


def test_introduced_fixed_ranges() -> None:
    events = [{"introduced": "0"}, {"fixed": "1.2.0"}, {"introduced": "2.0.0"}, {"fixed": "2.0.5"}]
    assert adv.in_range(Version("0.1"), events)
    assert adv.in_range(Version("1.1.9"), events)
    assert not adv.in_range(Version("1.2.0"), events)  # fixed is exclusive
    assert not adv.in_range(Version("1.9"), events)  # between the two ranges
    assert adv.in_range(Version("2.0.0"), events)  # introduced is inclusive
    assert adv.in_range(Version("2.0.5rc1"), events)
    assert not adv.in_range(Version("2.0.5"), events)
    assert not adv.in_range(Version("3.0"), events)
    # events in any order mean the same range
    assert adv.in_range(Version("2.0.1"), list(reversed(events)))
    assert not adv.in_range(Version("1.5"), list(reversed(events)))


def test_open_and_last_affected_ranges() -> None:
    assert adv.in_range(Version("99.0"), [{"introduced": "1.0"}])  # no fix yet: every later version
    assert not adv.in_range(Version("0.9"), [{"introduced": "1.0"}])
    last = [{"introduced": "1.0"}, {"last_affected": "1.4.2"}]
    assert adv.in_range(Version("1.4.2"), last)  # last_affected is inclusive
    assert not adv.in_range(Version("1.4.3"), last)
    assert not adv.in_range(Version("0.5"), last)


def test_range_match_through_affects_and_name_normalization() -> None:
    entry = advisory("pyyaml", ranges=[[{"introduced": "0"}, {"fixed": "5.4"}]])
    assert adv.affects(entry, "PyYAML", "5.3.1")
    assert not adv.affects(entry, "PyYAML", "6.0.4")
    assert adv.normalize("Zope.Interface") == adv.normalize("zope_interface") == "zope-interface"
    assert adv.affects(advisory("zope-interface", versions=["5.0"]), "zope.interface", "5.0")


def test_read_pins_normalizes_and_skips_comments(tmp_path: Path) -> None:
    path = tmp_path / "constraints.txt"
    path.write_text(
        "# header\nPyYAML==6.0.4\ntensorflow_cpu==2.21.0  # comment\n\nuvicorn[standard]==0.54.0\n"
    )
    assert adv.read_pins(path) == {
        "pyyaml": ("PyYAML", "6.0.4"),
        "tensorflow-cpu": ("tensorflow_cpu", "2.21.0"),
        "uvicorn": ("uvicorn", "0.54.0"),
    }


OSV_YAML = """\
id: PYSEC-2099-7
summary: Code execution in full_load
details: |
  Long details.
aliases:
- CVE-2099-7
affected:
- package:
    name: PyYAML
    ecosystem: PyPI
  ranges:
  - type: GIT
    repo: https://example.invalid/pyyaml
    events:
    - introduced: "0"
    - fixed: abcdef
  - type: ECOSYSTEM
    events:
    - introduced: "0"
    - fixed: "5.4"
  versions:
  - "5.3"
  - "5.3.1"
"""


def _checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "advisory-database"
    (checkout / "vulns" / "pyyaml").mkdir(parents=True)
    (checkout / "vulns" / "pyyaml" / "PYSEC-2099-7.yaml").write_text(OSV_YAML)
    (checkout / "vulns" / "other").mkdir()
    (checkout / "vulns" / "other" / "PYSEC-2099-8.yaml").write_text(
        OSV_YAML.replace("PYSEC-2099-7", "PYSEC-2099-8").replace("PyYAML", "other")
    )
    (checkout / "vulns" / "pyyaml" / "PYSEC-2099-9.yaml").write_text(
        OSV_YAML.replace("PYSEC-2099-7", "PYSEC-2099-9") + 'withdrawn: "2099-01-01T00:00:00Z"\n'
    )
    return checkout


def _run(tmp_path: Path, pins: str, *args: str) -> subprocess.CompletedProcess[str]:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(pins)
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--constraints",
            str(constraints),
            "--snapshot",
            str(tmp_path / "snap.json"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_refresh_keeps_only_pinned_packages(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    done = _run(
        tmp_path,
        "PyYAML==5.3.1\nnumpy==2.4.6\n",
        "refresh",
        str(checkout),
        "--commit",
        "c0ffee",
        "--date",
        "2099-01-31T10:00:00+00:00",
    )
    assert done.returncode == 0, done.stderr
    snap = json.loads((tmp_path / "snap.json").read_text())
    assert snap["commit"] == "c0ffee" and snap["date"].startswith("2099-01-31")
    assert "CC-BY 4.0" in snap["licence"]
    assert snap["packages"] == ["numpy", "pyyaml"]
    assert [a["id"] for a in snap["advisories"]] == ["PYSEC-2099-7"]  # not "other", not the withdrawn one
    (entry,) = snap["advisories"]
    assert entry["package"] == "pyyaml" and entry["fixed"] == ["5.4"] and entry["aliases"] == ["CVE-2099-7"]
    assert entry["ranges"] == [[{"introduced": "0"}, {"fixed": "5.4"}]]  # the GIT range is dropped
    assert entry["summary"] == "Code execution in full_load"


def _snapshot(tmp_path: Path, date: str = "2099-01-31T10:00:00+00:00") -> None:
    doc = {
        "source": "test",
        "commit": "c0ffee0000000000",
        "date": date,
        "licence": "CC-BY 4.0",
        "packages": ["pyyaml", "requests"],
        "advisories": [
            advisory("pyyaml", ranges=[[{"introduced": "0"}, {"fixed": "5.4"}]], id="PYSEC-2099-7")
            | {"fixed": ["5.4"]},
        ],
    }
    (tmp_path / "snap.json").write_text(adv.dump(doc))


def test_check_fails_on_a_vulnerable_pin(tmp_path: Path) -> None:
    _snapshot(tmp_path)
    done = _run(tmp_path, "PyYAML==5.3.1\nrequests==2.34.2\n", "check", "--today", "2099-02-10")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "PyYAML 5.3.1: PYSEC-2099-7 [CVE-2099-1] (fixed in 5.4)" in done.stdout
    assert (
        "audited 2 of 2 pins against the PyPA advisory database snapshot of 2099-01-31 (10 days old"
        in done.stdout
    )
    assert "WARNING" not in done.stderr


def test_check_passes_a_clean_pin_and_warns_on_an_old_snapshot(tmp_path: Path) -> None:
    _snapshot(tmp_path)
    done = _run(tmp_path, "PyYAML==6.0.4\nrequests==2.34.2\n", "check", "--today", "2099-06-01")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 known vulnerabilities" in done.stdout
    assert "(121 days old" in done.stdout
    assert "WARNING: the advisory snapshot is 121 days old" in done.stderr


def test_check_honours_the_ignore_list_with_reasons(tmp_path: Path) -> None:
    _snapshot(tmp_path)
    ignores = tmp_path / "ignore.toml"
    ignores.write_text(
        '[[ignore]]\nid = "CVE-2099-1"\npackage = "pyyaml"\nreason = "we never call full_load"\n'
    )
    done = _run(tmp_path, "PyYAML==5.3.1\n", "check", "--today", "2099-02-10", "--ignores", str(ignores))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ignored, we never call full_load" in done.stdout
    ignores.write_text('[[ignore]]\nid = "CVE-2099-1"\nreason = ""\n')
    done = _run(tmp_path, "PyYAML==5.3.1\n", "check", "--today", "2099-02-10", "--ignores", str(ignores))
    assert done.returncode != 0 and "gives no reason" in done.stderr


def test_check_pin_missing_from_snapshot_warns_or_fails_strict(tmp_path: Path) -> None:
    _snapshot(tmp_path)
    pins = "PyYAML==6.0.4\nnewdep==1.0\n"
    done = _run(tmp_path, pins, "check", "--today", "2099-02-10")
    assert done.returncode == 0 and "audited 1 of 2 pins" in done.stdout
    assert "1 pins are not in the snapshot" in done.stderr and "newdep" in done.stderr
    assert _run(tmp_path, pins, "check", "--today", "2099-02-10", "--strict").returncode == 1


def test_check_without_a_snapshot_exits_2(tmp_path: Path) -> None:
    done = _run(tmp_path, "PyYAML==6.0.4\n", "check")
    assert done.returncode == 2 and "cannot read the advisory snapshot" in done.stderr


def test_shipped_snapshot_is_well_formed() -> None:
    snap = json.loads(adv.SNAPSHOT.read_text())
    assert snap["source"] == "https://github.com/pypa/advisory-database" and len(snap["commit"]) == 40
    assert snap["date"][:4].isdigit() and "CC-BY 4.0" in snap["licence"]
    assert all(a["package"] in snap["packages"] and a["ranges"] or a["versions"] for a in snap["advisories"])
    assert all(reason.strip() for reason in adv.read_ignores(adv.IGNORES).values())


@pytest.mark.parametrize("pin", ["requests==2.30.0", "PyYAML==5.3"])
def test_shipped_snapshot_finds_known_old_vulnerabilities(tmp_path: Path, pin: str) -> None:
    """Real advisories of the snapshot: requests < 2.31 (CVE-2023-32681), PyYAML < 5.4 (CVE-2020-14343)."""
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(pin + "\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--constraints", str(constraints), "check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert ("CVE-2023-32681" if pin.startswith("requests") else "CVE-2020-14343") in done.stdout


class _PyPI:
    """A local stand-in for PyPI's project JSON documents (``/pypi/NAME/json``); unknown names answer 404."""

    def __init__(self, projects: dict[str, dict[str, Any]]) -> None:
        import http.server
        import threading

        docs = projects

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                name = self.path.strip("/").split("/")[0]
                doc = docs.get(name)
                body = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(200 if doc is not None else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _project(version: str, *vulns: dict[str, Any]) -> dict[str, Any]:
    return {"info": {"version": version}, "releases": {}, "vulnerabilities": list(vulns)}


def test_latest_checks_pins_at_the_latest_release_against_live_advisories(tmp_path: Path) -> None:
    vuln = {
        "id": "GHSA-xxxx",
        "aliases": ["CVE-2099-9"],
        "fixed_in": ["2.1"],
        "summary": "bad",
        "withdrawn": None,
    }
    gone = {
        "id": "PYSEC-old",
        "aliases": [],
        "fixed_in": [],
        "summary": "withdrawn",
        "withdrawn": "2099-01-01",
    }
    pypi = _PyPI(
        {
            "vulnerable": _project("2.0", vuln),
            "clean": _project("1.0", gone),
            "behind": _project("9.0", vuln),  # its advisories are the latest release's, not the pin's
        }
    )
    try:
        pins = "vulnerable==2.0\nclean==1.0\nbehind==1.0\nmissing==1.0\n"
        done = _run(tmp_path, pins, "latest", "--index", pypi.url)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "vulnerable 2.0: GHSA-xxxx (fixed in 2.1): bad" in done.stdout
        assert "PYSEC-old" not in done.stdout and "behind 1.0: GHSA" not in done.stdout
        assert "2 of 4 pins are their project's latest release" in done.stdout
        assert "1 known vulnerabilities" in done.stdout
        assert "behind 1.0 (latest 9.0)" in done.stdout
        assert "missing (HTTP 404)" in done.stderr

        clean = _run(tmp_path, "clean==1.0\nbehind==1.0\n", "latest", "--index", pypi.url)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "0 known vulnerabilities" in clean.stdout

        (tmp_path / "ignore.toml").write_text(
            '[[ignore]]\nid = "CVE-2099-9"\nreason = "not reachable from our code"\n'
        )
        ignored = _run(
            tmp_path,
            "vulnerable==2.0\n",
            "latest",
            "--index",
            pypi.url,
            "--ignores",
            str(tmp_path / "ignore.toml"),
        )
        assert ignored.returncode == 0, ignored.stdout + ignored.stderr
        assert "ignored, not reachable from our code" in ignored.stdout
    finally:
        pypi.close()


def test_latest_exits_3_when_pypi_cannot_be_reached(tmp_path: Path) -> None:
    pypi = _PyPI({})
    url = pypi.url
    pypi.close()  # nothing listens there any more
    done = _run(tmp_path, "clean==1.0\n", "latest", "--index", url)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "0 of 1 pins" in done.stdout and "could not be looked up" in done.stdout
