"""``driftwarden models ...`` and ``train -m`` through the real root command: answers, exit codes, history."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from core.config import get_settings
from core.database import open_database
from core.tabular import write_table
from registry.names import NAME_PATTERN
from registry.schema import infer_schema
from registry.service import register_version
from service.cli import app
from training.cluster.datagen import generate

runner = CliRunner()
CORE = re.compile(NAME_PATTERN.removeprefix("^").removesuffix("$"))


def _run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _fails_with(result: Result, *parts: str) -> str:
    """Exit 2, one line ``error: ...`` on stderr naming ``parts``, no traceback, nothing on stdout."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in result.output and result.stdout == ""
    for part in parts:
        assert part in err, (part, err)
    return err


def _version_folder(root: Path, version: int) -> Path:
    """A registered version's folder with a real schema (no SavedModel: the registry does not need one)."""
    meta = root / f"credit-{version}" / "driftwarden"
    meta.mkdir(parents=True)
    schema = infer_schema(generate(300, seed=version), target="default")
    (meta / "schema.json").write_text(json.dumps(schema.to_dict()))
    return meta.parent


@pytest.fixture
def registry(database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """The CLI pointed at ``database_url``, with versions 1-3 of ``credit`` registered (staged)."""
    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", database_url)
    get_settings.cache_clear()
    db = open_database(database_url, upgrade=True)
    try:
        with db.session() as s:
            for v in (1, 2, 3):
                register_version(
                    session=s,
                    model_name="credit",
                    version=v,
                    path=_version_folder(tmp_path / "files", v),
                    metrics={"accuracy": round(0.9 + v / 100, 2), "roc_auc": 0.95, "rows": 1600},
                    lineage={"mode": "local", "train_rows": 1600, "data": "train.csv"},
                )
    finally:
        db.dispose()
    yield database_url
    get_settings.cache_clear()


def test_promote_rollback_label_reject_show(registry: str) -> None:
    r = _run("models", "promote", "credit", "1")
    assert r.exit_code == 0 and r.stdout.strip() == "credit:1 is now serving", r.output
    r = _run("models", "promote", "credit", "2")
    assert r.stdout.splitlines()[0] == "credit:2 is now serving; credit:1 archived", r.output
    assert (
        _run("models", "promote", "credit", "2").stdout.strip()
        == "credit:2 is already serving; nothing changed"
    )
    r = _run("models", "label", "credit", "stable", "1")
    assert r.exit_code == 0 and r.stdout.strip() == "credit: label 'stable' -> version 1", r.output
    r = _run("models", "label", "credit", "stable", "2")
    assert r.stdout.strip() == "credit: label 'stable' -> version 2 (moved from 1)", r.output
    r = _run("models", "rollback", "credit")
    assert (
        r.exit_code == 0
        and r.stdout.splitlines()[0] == "credit: rolled back to version 1 (from 2); it is now serving"
    )
    r = _run("models", "reject", "credit", "3", "--reason", "AUC below the gate")
    assert r.exit_code == 0 and r.stdout.strip() == "credit:3 rejected (AUC below the gate)", r.output

    r = _run("models", "show", "credit", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["serving"] == 1 and doc["labels"] == {"stable": 2}
    assert {v["version"]: v["state"] for v in doc["versions"]} == {1: "serving", 2: "archived", 3: "rejected"}
    actions = [(e["version"], e["action"], e["actor"]) for e in doc["history"]]
    assert actions[3:] == [
        (1, "promote", "cli"),
        (1, "archive", "cli"),
        (2, "promote", "cli"),
        (1, "label", "cli"),
        (2, "label", "cli"),
        (2, "archive", "cli"),
        (1, "rollback", "cli"),
        (3, "reject", "cli"),
    ]
    assert doc["history"][-1]["reason"] == "AUC below the gate"

    text = _run("models", "show", "credit").stdout
    assert "serving: 1" in text and "stable -> 2" in text and "rejected (AUC below the gate)" in text
    assert "rollback  archived -> serving  by cli" in text

    r = _run("models", "show", "credit:2")
    assert r.exit_code == 0, r.output
    for part in (
        "model credit version 2: archived",
        "labels: stable",
        "target 'default' (binary_classification); outputs: probability",
        "income",
        "numeric",
        "categorical",
        "accuracy: 0.9200",
        "train_rows: 1600",
        "data: train.csv",
        "label 'stable' -> 2  by cli: moved from version 1",
    ):
        assert part in r.stdout, (part, r.stdout)
    one = json.loads(_run("models", "show", "credit:2", "--json").stdout)
    features = {f["name"]: f for f in one["versions"][0]["schema_summary"]["features"]}
    assert features["age"]["kind"] == "numeric" and features["age"]["observed_min"] is not None
    assert [e["action"] for e in one["history"]] == ["register", "promote", "label", "archive"]

    listed = json.loads(_run("models", "list", "--json").stdout)
    assert [(v["version"], v["state"]) for v in listed] == [(3, "rejected"), (2, "archived"), (1, "serving")]
    table = _run("models", "list", "-m", "credit").stdout
    assert "Registered model versions" in table and "rejected" in table and "0.9100" in table


def test_bad_input_is_one_line_and_exit_2(registry: str) -> None:
    _fails_with(_run("models", "promote", "nope", "1"), "no model 'nope' in the registry", "models list")
    _fails_with(_run("models", "promote", "credit", "9"), "model 'credit' has no version 9", "1, 2, 3")
    _fails_with(_run("models", "promote", "credit", "two"), "version must be a positive integer", "'two'")
    _fails_with(_run("models", "promote", "credit", "0"), "version must be a positive integer")
    _fails_with(_run("models", "rollback", "credit"), "no previous serving version", "no version serves")
    _fails_with(_run("models", "rollback", "nope"), "no model 'nope'")
    _fails_with(_run("models", "show", "credit:x"), "the version in 'credit:x'")
    _fails_with(_run("models", "show", "credit:7"), "has no version 7")
    _fails_with(_run("models", "show", "ghost"), "no model 'ghost'")
    _fails_with(_run("models", "label", "credit", "a/b", "1"), "label 'a/b' is not allowed", "pattern")
    _fails_with(_run("models", "label", "credit", "stable", "x"), "version must be a positive integer")
    _fails_with(_run("models", "reject", "credit", "1", "--reason", " "), "a reason is required")
    assert _run("models", "reject", "credit", "1", "--reason", "bad").exit_code == 0  # staged: allowed
    _fails_with(_run("models", "promote", "credit", "1"), "credit:1 was rejected (bad)", "cannot serve")
    _fails_with(_run("models", "label", "credit", "canary", "1"), "a label cannot point at it")
    _fails_with(_run("models", "reject", "credit", "1", "--reason", "again"), "already rejected")
    assert _run("models", "promote", "credit", "2").exit_code == 0
    _fails_with(
        _run("models", "reject", "credit", "2", "--reason", "x"), "credit:2 is serving", "rollback credit"
    )
    _fails_with(_run("models", "list", "-m", "../x"), "--model: model name '../x' is not allowed")
    for name in ("../evil", "/abs/path", "", "a b:predict"):
        _fails_with(_run("models", "show", name), "is not allowed", "pattern")
        _fails_with(_run("models", "promote", name, "1"), "is not allowed")
        _fails_with(_run("models", "rollback", name), "is not allowed")
    debug = _run("--debug", "models", "promote", "nope", "1")  # --debug: the traceback instead of one line
    assert debug.exit_code != 0 and debug.exception is not None and "no model 'nope'" in str(debug.exception)


def test_empty_registry_prints_how_to_start() -> None:
    r = _run("models", "list")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("no versions registered yet. Train and register one")
    assert "driftwarden train --model credit --data data.csv --mode local" in r.stdout
    assert "driftwarden models promote credit 1" in r.stdout
    assert _run("models", "list", "--json").stdout.strip() == "[]"
    r = _run("models", "list", "-m", "credit")
    assert r.stdout.startswith("no versions of model 'credit' registered. Train and register one")


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("name", ["../evil", "ABS", "", "a b:predict", "..", "-x", "x/../../evil"])
def test_train_refuses_a_bad_name_before_anything_is_written(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    data = write_table(generate(200, seed=3), work / "data.csv")
    outside = tmp_path / "abs-evil"
    if name == "ABS":
        name = str(outside)
    monkeypatch.chdir(work)
    before = _tree(tmp_path)
    r = _run("train", "-m", name, "-d", str(data), "--mode", "local", "--epochs", "0.1")
    _fails_with(r, "--model: model name", "is not allowed", "pattern")
    assert _tree(tmp_path) == before  # no registry folder, no database, no checkpoint, nothing outside
    assert not outside.exists() and not (tmp_path / "evil").exists()
    assert not Path(get_settings().registry_path).exists()


def test_a_subprocess_gets_the_same_answer(tmp_path: Path) -> None:
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("driftwarden")
    env = {**os.environ, "DRIFTWARDEN_DATABASE_URL": f"sqlite:///{tmp_path / 'dw.db'}"}
    proc = subprocess.run(
        [str(exe), "models", "promote", "../evil", "1"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: model name '../evil' is not allowed (it starts with '.')")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@settings(max_examples=60, deadline=None)
@given(name=st.text(max_size=70))
@example(name="../evil")
@example(name="credit")
def test_train_name_check_on_arbitrary_text(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    missing = tmp_path_factory.getbasetemp() / "no-such-data.csv"
    r = _run("train", f"--model={name}", "--data", str(missing), "--mode", "local")
    if CORE.fullmatch(name):
        assert r.exit_code == 2 and "is not allowed" not in r.output and "--data" in r.output  # next check
    else:
        _fails_with(r, "--model: model name", "is not allowed", NAME_PATTERN)
    assert not missing.exists()
