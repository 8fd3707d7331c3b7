"""``driftwarden predictions export``: the database's log copied into the lake equals the database's rows,
and a run again replaces its files instead of copying rows twice (SQLite and PostgreSQL, disk and S3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.database import Database
from predictions.lake.files import open_lake
from predictions.service import store_feedback, write_log_rows
from tests.lake.conftest import S3Lake
from tests.lake.sinkdata import batches, documents, read_lake
from tests.support import run_cli

T0 = datetime(2026, 10, 5, 22, 30, tzinfo=UTC)


def _log(db: Database) -> tuple[list[str], list[dict[str, object]]]:
    """90 predictions over three hours (one request typed from its documents) and labels of 10."""
    docs = documents(90)
    docs[7] = {**docs[7], "income": "n/a"}
    rows = batches(docs, per_request=3, at=T0, spacing=timedelta(minutes=4))
    rows += batches(documents(4), model="other", at=T0)  # another model: not exported
    write_log_rows(engine=db.engine, rows=rows, idempotent=False)
    ids = [pid for b in rows if b.model_name == "credit" for pid in b.ids()]
    with db.session() as session:
        store_feedback(session=session, model_name="credit", labels=[(pid, 1.0) for pid in ids[:10]])
    return ids, docs


def _env(db: Database, tmp_path: Path) -> dict[str, str]:
    return {"DRIFTWARDEN_DATABASE_URL": str(db.engine.url.render_as_string(hide_password=False))}


@pytest.mark.parametrize("where", ["local", "s3"])
def test_export_copies_the_database_rows_and_a_rerun_replaces_them(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, request: pytest.FixtureRequest
) -> None:
    ids, docs = _log(db)
    if where == "local":
        url = request.getfixturevalue("local_lake")
    else:
        s3: S3Lake = request.getfixturevalue("s3_lake")
        url = s3.url
    args = ["predictions", "export", "--model", "credit", "--to", url, "--since", "2d"]
    args += ["--until", "2026-10-06T06:00:00Z", "--json", "-"]
    first = run_cli(monkeypatch, _env(db, tmp_path), *args)
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert (doc["predictions"], doc["labels"], doc["hours"]) == (90, 10, 3)
    target = open_lake(url)
    table = read_lake(target)
    assert sorted(table["prediction_id"].to_pylist()) == sorted(ids)
    got = {r["prediction_id"]: r for r in table.to_pylist()}
    for i, pid in enumerate(ids):
        features, doc_i = got[pid]["features"], docs[i]
        assert features["age"] == doc_i["age"] and features["city"] == doc_i.get("city")
        if i // 3 == 7 // 3:  # the request whose documents did not fit: kept whole in ``inputs``
            assert got[pid]["inputs"] is not None and json.loads(got[pid]["inputs"]) == doc_i
        else:
            assert features["income"] == doc_i.get("income") and got[pid]["inputs"] is None
        assert got[pid]["output"] == 0.25 + 0.5 * (i % 2)
    assert {f.rsplit("/", 2)[-2] for f in table["_file"].to_pylist()} == {"hour=22", "hour=23", "hour=00"}
    labels = read_lake(target, "labels")
    assert sorted(labels["prediction_id"].to_pylist()) == sorted(ids[:10])

    again = run_cli(monkeypatch, _env(db, tmp_path), *args)
    assert again.exit_code == 0, again.output
    assert read_lake(target).num_rows == 90 and read_lake(target, "labels").num_rows == 10  # replaced


def test_export_refuses_a_lake_it_cannot_use(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no-such-lake"
    r = run_cli(
        monkeypatch, _env(db, tmp_path), "predictions", "export", "--model", "credit", "--to", str(missing)
    )
    assert r.exit_code == 2
    assert (
        str(missing) in r.output and "does not exist" in r.output and len(r.output.strip().splitlines()) == 1
    )
    env = {**_env(db, tmp_path), "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "k"}
    env["AWS_SECRET_ACCESS_KEY"] = "s"
    r = run_cli(monkeypatch, env, "predictions", "export", "--model", "credit", "--to", "s3://nobody/lake")
    assert r.exit_code == 2 and "s3://nobody/lake" in r.output and "cannot be written" in r.output
    assert not missing.exists()
