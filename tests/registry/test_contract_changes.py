"""Promotion shows what changes for clients (issue 40: item 3; item 10: promote wording, `models list`).

The diff of two contracts (``registry/compat.py``, pure), the gate's input-contract check stating it, and
``models promote`` / ``models rollback`` / the promote route refusing a change that breaks today's clients
unless told to go ahead, printing a compatible one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner, Result

from core.config import get_settings
from core.database import open_database
from registry.compat import compare_contracts
from registry.schema import ModelSchema, Policy, Task, infer_schema
from registry.service import SERVED_ELSEWHERE, register_version
from registry.signature import SourceSignature, Tensor
from service.cli import app
from tests.support import Server, serve_settings
from training.retraining.gate import Verdict, input_contract

runner = CliRunner()
CLASSES = ("low", "mid", "high")
TOKEN = "contract-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _columns(n: int = 60, *, plans: tuple[str, ...] = ("basic", "pro", "team"), top: float = 50.0) -> dict:
    rng = np.random.default_rng(0)
    tenure = rng.uniform(0, top, n)
    tenure[0] = top
    return {
        "tenure": tenure,
        "plan": np.array([plans[i % len(plans)] for i in range(n)], dtype=object),
        "segment": np.array([CLASSES[i % 3] for i in range(n)], dtype=object),
    }


def _schema(columns: dict | None = None, *, classes: tuple[str, ...] = CLASSES) -> ModelSchema:
    return infer_schema(columns or _columns(), target="segment", task=Task.MULTICLASS, classes=classes)


def _with_spend() -> ModelSchema:
    cols = _columns()
    cols["annual_spend"] = np.linspace(100.0, 900.0, 60)
    return _schema(cols)


def _compatible() -> ModelSchema:
    """A category added and a range widened: nothing today's clients send is refused."""
    return _schema(_columns(plans=("basic", "pro", "team", "enterprise"), top=80.0))


# --- the diff, pure ---------------------------------------------------------------------------------------


def test_same_contract_has_no_changes() -> None:
    diff = compare_contracts(_schema(), _schema())
    assert not diff and diff.changes == ()


def test_a_new_required_input_and_another_class_order_break_clients() -> None:
    diff = compare_contracts(_schema(), _with_spend())
    assert [(c.kind, c.subject, c.breaking) for c in diff.changes] == [("input_added", "annual_spend", True)]
    assert "input 'annual_spend' added (number): clients must send it" in diff.changes[0].text

    diff = compare_contracts(_schema(), _schema(classes=("high", "low", "mid")))
    assert [(c.kind, c.breaking) for c in diff.changes] == [("class_order", True)]
    assert diff.changes[0].text == "class order changed from [low, mid, high] to [high, low, mid]"
    assert diff.changes[0].before == ["low", "mid", "high"] and diff.changes[0].after == [
        "high",
        "low",
        "mid",
    ]


def test_dropped_category_type_task_classes_and_removed_input_break_clients() -> None:
    old = _compatible()
    dropped = compare_contracts(old, _schema())
    kinds = {c.kind: c for c in dropped.changes}
    # under policy flag a dropped category is still answered (flagged as unseen): printed, not refused
    assert not kinds["categories_dropped"].breaking and kinds["categories_dropped"].before == ["enterprise"]
    assert "flagged as unseen, still answered" in kinds["categories_dropped"].text
    assert kinds["range_narrowed"].breaking is False  # re-estimated ranges: printed, not refused
    strict_old, strict_new = (
        replace(schema, features=tuple(replace(f, policy=Policy.REJECT) for f in schema.features))
        for schema in (old, _schema())
    )
    refused = {c.kind: c for c in compare_contracts(strict_old, strict_new).changes}
    assert refused["categories_dropped"].breaking and "(new to this version: refused)" in (
        refused["categories_dropped"].text
    )

    cols = _columns()
    cols["tenure"] = np.array([f"t{i % 5}" for i in range(60)], dtype=object)
    typed = compare_contracts(_schema(), _schema(cols))
    assert [(c.kind, c.subject, c.breaking) for c in typed.changes] == [("input_type", "tenure", True)]
    assert "changed from number to category string" in typed.changes[0].text

    renamed = compare_contracts(_schema(), _schema(classes=("low", "mid", "high", "top")))
    assert ("classes", True) in [(c.kind, c.breaking) for c in renamed.changes]

    binary = infer_schema(
        {"tenure": _columns()["tenure"], "plan": _columns()["plan"], "churned": np.arange(60) % 2},
        target="churned",
    )
    task = compare_contracts(_schema(), binary)
    assert {"task", "output_renamed", "classes"} <= {c.kind for c in task.breaking}
    assert "task changed from multiclass to binary" in [c.text for c in task.changes]

    removed = compare_contracts(_with_spend(), _schema())
    assert [(c.kind, c.subject, c.breaking) for c in removed.changes] == [
        ("input_removed", "annual_spend", True)
    ]


def test_category_added_and_range_widened_are_compatible() -> None:
    diff = compare_contracts(_schema(), _compatible())
    assert diff and not diff.breaking
    assert {(c.kind, c.subject) for c in diff.compatible} == {
        ("categories_added", "plan"),
        ("range_widened", "tenure"),
    }
    assert "input 'plan' categories added: [enterprise]" in [c.text for c in diff.changes]


def test_the_gate_states_the_same_differences() -> None:
    cols = _columns()
    cols["annual_spend"] = np.linspace(100.0, 900.0, 60)
    holdout = {k: v for k, v in cols.items() if k != "segment"}
    check = input_contract(_with_spend(), holdout, _schema())
    assert check.verdict is Verdict.UNDECIDED, check
    assert (
        "BREAKING: input 'annual_spend' added" in check.message
        and "--accept-contract-change" in check.message
    )
    assert check.figures["contract_changes"][0]["kind"] == "input_added"

    holdout = {k: v for k, v in _columns().items() if k != "segment"}
    check = input_contract(_compatible(), holdout, _schema())
    assert check.verdict is Verdict.PASSED, check
    assert "input 'plan' categories added: [enterprise]" in check.message
    assert input_contract(_schema(), holdout).figures.get("contract_changes") is None  # nothing serves


# --- the CLI and the route --------------------------------------------------------------------------------


def _folder(root: Path, version: int, schema: ModelSchema) -> Path:
    meta = root / f"v{version}" / "driftwarden"
    meta.mkdir(parents=True)
    (meta / "schema.json").write_text(json.dumps(schema.to_dict()))
    return meta.parent


def _register(url: str, root: Path, model: str, versions: dict[int, ModelSchema], **lineage: Any) -> None:
    db = open_database(url, upgrade=True)
    try:
        with db.session() as s:
            for version, schema in versions.items():
                register_version(
                    session=s,
                    model_name=model,
                    version=version,
                    path=_folder(root / model, version, schema),
                    metrics={"accuracy": 0.8, "macro_f1": 0.7},
                    lineage={"task": "multiclass", **lineage},
                )
    finally:
        db.dispose()


VERSIONS = {1: _schema(), 2: _with_spend(), 3: _schema(classes=("high", "low", "mid")), 4: _compatible()}


@pytest.fixture
def cli_db(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", database_url)
    get_settings.cache_clear()
    yield database_url
    get_settings.cache_clear()


def _run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _serving(model: str) -> int | None:
    doc = json.loads(_run("models", "show", model, "--json").stdout)
    serving: int | None = doc["serving"]
    return serving


def _refused(r: Result, *parts: str) -> None:
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.startswith("error: ") and "Traceback" not in r.output
    for part in parts:
        assert part in r.stderr, (part, r.stderr)


def test_promote_refuses_a_breaking_contract_unless_accepted(cli_db: str, tmp_path: Path) -> None:
    _register(cli_db, tmp_path, "segment", VERSIONS)
    r = _run("models", "promote", "segment", "1")
    assert r.exit_code == 0 and r.stdout == "segment:1 is now serving\n", r.output  # nothing to compare

    _refused(
        _run("models", "promote", "segment", "2"),
        "segment:2 would break clients of version 1",
        "input 'annual_spend' added (number): clients must send it",
        "--accept-contract-change",
    )
    _refused(
        _run("models", "promote", "segment", "3"),
        "class order changed from [low, mid, high] to [high, low, mid]",
    )
    assert _serving("segment") == 1  # nothing promoted on refusal

    r = _run("models", "promote", "segment", "4")  # compatible: printed, promoted
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        "segment:4 is now serving; segment:1 archived",
        "contract changes for clients of version 1:",
        "  compatible: input 'tenure' allowed range widened from [0, 100] to [0, 160]",
        "  compatible: input 'plan' categories added: [enterprise]",
    ]

    r = _run("models", "promote", "segment", "2", "--accept-contract-change")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == "segment:2 is now serving; segment:4 archived"
    assert "  BREAKING: input 'annual_spend' added (number): clients must send it" in r.stdout
    assert _serving("segment") == 2

    r = _run("models", "rollback", "segment")  # back to a version that served: not refused, changes printed
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == "segment: rolled back to version 4 (from 2); it is now serving"
    assert (
        "  BREAKING: input 'annual_spend' removed: requests still sending it break the contract" in r.stdout
    )
    assert _serving("segment") == 4


def test_promote_of_a_version_served_elsewhere_says_monitored(cli_db: str, tmp_path: Path) -> None:
    _register(cli_db, tmp_path, "churn", {1: _schema(), 2: _compatible()}, serving=SERVED_ELSEWHERE)
    r = _run("models", "promote", "churn", "1")
    assert r.exit_code == 0 and r.stdout == "churn:1 is now monitored (served elsewhere)\n", r.output
    r = _run("models", "promote", "churn", "2")
    assert r.stdout.splitlines()[0] == "churn:2 is now monitored (served elsewhere); churn:1 archived"
    r = _run("models", "promote", "churn", "2")
    assert r.stdout == "churn:2 is already monitored (served elsewhere); nothing changed\n", r.output
    r = _run("models", "rollback", "churn")
    assert (
        r.stdout.splitlines()[0]
        == "churn: rolled back to version 1 (from 2); it is now monitored (served elsewhere)"
    )


def test_models_list_shows_each_tasks_headline_metrics(cli_db: str, tmp_path: Path) -> None:
    db = open_database(cli_db, upgrade=True)
    given = {
        "bin": ({"accuracy": 0.91, "roc_auc": 0.95}, "binary"),
        "multi": ({"accuracy": 0.82, "macro_f1": 0.77, "log_loss": 0.5}, "multiclass"),
        "reg": ({"mae": 12.5, "rmse": 20.25, "r2": 0.6}, "regression"),
    }
    try:
        with db.session() as s:
            for name, (metrics, task) in given.items():
                register_version(
                    session=s,
                    model_name=name,
                    version=1,
                    path=tmp_path,
                    metrics=metrics,
                    lineage={"task": task},
                )
    finally:
        db.dispose()
    table = _run("models", "list").stdout
    lines = {
        line.split()[1]: line
        for line in table.splitlines()
        if line.split()[1:2] in (["bin"], ["multi"], ["reg"])
    }
    assert "binary" in lines["bin"] and "auc 0.9500  accuracy 0.9100" in lines["bin"], table
    assert "multiclass" in lines["multi"] and "accuracy 0.8200  macro-F1 0.7700" in lines["multi"], table
    assert "regression" in lines["reg"] and "MAE 12.5000  RMSE 20.2500" in lines["reg"], table
    shown = _run("models", "show", "reg").stdout
    assert "MAE 12.5000  RMSE 20.2500" in shown, shown


def test_the_promote_route_answers_409_naming_the_changes(database_url: str, tmp_path: Path) -> None:
    _register(database_url, tmp_path, "segment", VERSIONS, serving=SERVED_ELSEWHERE)
    settings = serve_settings(database_url, tmp_path / "spool", admin_token=TOKEN)
    with Server(settings) as srv, httpx.Client(base_url=srv.url, headers=AUTH, timeout=30) as c:
        r = c.post("/v1/models/segment/versions/1:promote")
        assert r.status_code == 200 and r.json()["contract_changes"] == [], r.text

        r = c.post("/v1/models/segment/versions/3:promote")
        assert r.status_code == 409, r.text
        body = r.json()
        assert "class order changed" in body["error"] and "accept_contract_change" in body["error"]
        assert body["serving_version"] == 1
        assert [(x["kind"], x["breaking"]) for x in body["contract_changes"]] == [("class_order", True)]

        r = c.post("/v1/models/segment/versions/2:promote", json={"accept_contract_change": False})
        assert r.status_code == 409 and r.json()["contract_changes"][0]["subject"] == "annual_spend", r.text
        for bad, words in (
            ({"accept_contract_change": "yes"}, "must be true or false"),
            ({"accept": True}, "body field 'accept' is not known"),
        ):
            r = c.post("/v1/models/segment/versions/2:promote", json=bad)
            assert r.status_code == 400 and words in r.json()["error"], r.text
        assert c.get("/v1/models/segment/versions").json()["serving"] == 1  # nothing promoted on refusal

        r = c.post("/v1/models/segment/versions/4:promote")
        assert r.status_code == 200, r.text
        assert {x["kind"] for x in r.json()["contract_changes"]} == {"categories_added", "range_widened"}

        r = c.post("/v1/models/segment/versions/2:promote", json={"accept_contract_change": True})
        assert r.status_code == 200 and r.json()["previous_serving"] == 4, r.text
        assert {"input_added", "categories_dropped"} <= {x["kind"] for x in r.json()["contract_changes"]}

        r = c.post("/v1/models/segment:rollback")
        assert r.status_code == 200 and r.json()["version"] == 4, r.text
        assert r.json()["contract_changes"][0]["kind"] == "input_removed"


def test_a_contract_that_cannot_be_read_is_not_compared_and_says_so(cli_db: str, tmp_path: Path) -> None:
    _register(cli_db, tmp_path, "segment", {1: _schema()})
    db = open_database(cli_db, upgrade=True)
    try:
        with db.session() as s:
            register_version(
                session=s, model_name="segment", version=2, path=tmp_path, metrics={}, lineage={}
            )
    finally:
        db.dispose()
    assert _run("models", "promote", "segment", "1").exit_code == 0
    r = _run("models", "promote", "segment", "2")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == "segment:2 is now serving; segment:1 archived"
    assert r.stdout.splitlines()[1].startswith(
        "contracts not compared: the contract of segment:2 is not readable"
    )


def test_the_tf_serving_signature_clients_speak_is_compared() -> None:
    own = SourceSignature(
        name="serving_default",
        inputs=(Tensor("tenure", "float32", (None, 1)),),
        outputs=(Tensor("output_0", "float32", (None, 3)),),
    )
    assert compare_contracts(_schema(), _schema(), signatures=(own, own)).changes == ()
    retrained = compare_contracts(_schema(), _schema(), signatures=(own, None))  # trained here: own API
    assert [(c.kind, c.breaking) for c in retrained.changes] == [("signature", True)]
    assert "output_0 float32[-1, 3]" in retrained.changes[0].text
    assert "driftwarden's own API" in retrained.changes[0].text
    renamed = replace(own, outputs=(Tensor("scores", "float32", (None, 3)),))
    assert [c.kind for c in compare_contracts(_schema(), _schema(), signatures=(own, renamed)).breaking] == [
        "signature"
    ]
