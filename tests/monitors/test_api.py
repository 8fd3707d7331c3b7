"""Drift over HTTP: real uvicorn, a real trained model, traffic through the server, SQLite and PostgreSQL.

One module-scoped scenario per backend: errors before any traffic, baseline traffic -> run, drifted
traffic (covariate shift of age, income and credit score) -> run, ground truth -> run. The tests then
check what was stored and served, and render the HTML report in headless Chromium.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from access.service import link_key
from alerts.webhooks import links
from core.database import open_database
from monitors.scheduled import run_pass
from registry.service import register_version
from tests.monitors.browser import ARTIFACTS, read_png, screenshot
from tests.monitors.logdata import plain
from tests.support import NO_AUTH, Server, TrainedModels, seed_registry, serve_settings
from training.cluster.datagen import TARGET, generate

TOKEN = "s3cret-admin"
WINDOW = 600
PLANTED = {"age", "income", "credit_score"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Scenario:
    server: Server
    backend: str
    before: dict[str, httpx.Response] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)


def _send(client: httpx.Client, cols: dict[str, np.ndarray]) -> list[str]:
    """Predict every row of ``cols`` through the server in batches; returns the prediction ids."""
    names = [k for k in cols if k != TARGET]
    rows = [{k: plain(cols[k][i]) for k in names} for i in range(len(cols[TARGET]))]
    ids: list[str] = []
    for lo in range(0, len(rows), 200):
        r = client.post("/v1/models/credit:predict", json={"instances": rows[lo : lo + 200]})
        assert r.status_code == 200, r.text
        ids += r.json()["prediction_ids"]
    return ids


def _run(client: httpx.Client) -> dict[str, Any]:
    r = client.post("/v1/models/credit/monitors:run", headers=AUTH)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture(scope="module")
def scenario(
    module_db_url: str,
    trained: TrainedModels,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scenario]:
    seed_registry(module_db_url, trained, serving=1)
    db = open_database(module_db_url)
    with db.session() as s:  # registered, never promoted
        register_version(
            session=s, model_name="shadow", version=1, path=trained.paths[2], metrics={}, lineage={}
        )
    db.dispose()
    settings = serve_settings(
        module_db_url,
        tmp_path_factory.mktemp("spool"),
        monitor_enabled=False,
        admin_token=TOKEN,
        monitor_window_rows=WINDOW,
        monitor_min_rows=50,
    )
    backend = "postgresql" if module_db_url.startswith("postgresql") else "sqlite"
    with Server(settings) as srv, srv.client() as c:
        sc = Scenario(server=srv, backend=backend)
        sc.before = {
            "drift": c.get("/v1/models/credit/drift"),
            "run_empty": c.post("/v1/models/credit/monitors:run", headers=AUTH),
            "run_no_token": c.post("/v1/models/credit/monitors:run", headers=NO_AUTH),
            "run_bad_token": c.post(
                "/v1/models/credit/monitors:run", headers={"Authorization": "Bearer nope"}
            ),
            "unknown_drift": c.get("/v1/models/nobody/drift"),
            "unknown_history": c.get("/v1/models/nobody/drift/history"),
            "unknown_run": c.post("/v1/models/nobody/monitors:run", headers=AUTH),
            "unknown_html": c.get("/reports/nobody/drift"),
            "shadow_run": c.post("/v1/models/shadow/monitors:run", headers=AUTH),
            "bad_limit": c.get("/v1/models/credit/drift/history", params={"limit": 0}),
        }
        _send(c, generate(WINDOW, seed=21))
        sc.runs["baseline"] = _run(c)
        drifted = generate(WINDOW, scenario="covariate_shift", seed=22)
        ids = _send(c, drifted)
        sc.runs["drifted"] = _run(c)
        labels = [
            {"prediction_id": pid, "label": int(y)} for pid, y in zip(ids, drifted[TARGET], strict=True)
        ]
        r = c.post("/v1/models/credit/feedback", json={"labels": labels})
        assert r.status_code == 200 and r.json()["stored"] == WINDOW, r.text
        sc.runs["labelled"] = _run(c)
        yield sc


def test_errors_are_4xx_json_naming_the_problem(scenario: Scenario) -> None:
    b = scenario.before
    expected = {
        "drift": (404, "no monitor run yet"),
        "run_empty": (409, "fewer than the minimum of 50"),
        "run_no_token": (401, "Bearer"),
        "run_bad_token": (401, "unknown, revoked or expired"),
        "unknown_drift": (404, "unknown model 'nobody'"),
        "unknown_history": (404, "unknown model 'nobody'"),
        "unknown_run": (404, "unknown model 'nobody'"),
        "unknown_html": (404, "unknown model 'nobody'"),
        "shadow_run": (409, "no serving version"),
        "bad_limit": (400, "limit"),
    }
    for key, (status, words) in expected.items():
        r = b[key]
        assert r.status_code == status, (key, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json"), key
        assert words in r.json()["error"], (key, r.json())


def test_baseline_is_stable_and_planted_shift_is_flagged(scenario: Scenario) -> None:
    base, drifted = scenario.runs["baseline"], scenario.runs["drifted"]
    assert base["rows"] == WINDOW and base["model_version"] == 1
    assert base["drifted_features"] == [] and base["dataset_drifted"] is False
    assert drifted["rows"] == WINDOW and drifted["window"]["rows"] == WINDOW
    assert set(drifted["drifted_features"]) == PLANTED
    assert drifted["dataset_drifted"] is True
    window = drifted["window"]
    assert window["reader"] == "columnar"  # one reader, on both backends
    # the last 600 predictions: the drifted traffic's three requests of 200, one batch each
    assert window["last_id"] - window["first_id"] == 2
    with scenario.server.client() as c:
        latest = c.get("/v1/models/credit/drift")
    assert latest.status_code == 200, latest.text
    doc = latest.json()
    assert doc["run_id"] == scenario.runs["labelled"]["run_id"]
    assert {f["name"] for f in doc["report"]["features"] if f["drifted"]} == PLANTED
    assert doc["window"]["rows"] == WINDOW and doc["drifted"] is True
    # stored per-feature rows agree with the report
    db = open_database(scenario.server.settings.database_url.get_secret_value())
    from monitors.service import latest_run

    with db.session() as s:
        run = latest_run(session=s, model_name="credit")
        assert run is not None
        assert {f.feature for f in run.features if f.drifted and f.kind != "multivariate"} >= PLANTED
        assert run.window_start is not None and run.window_end is not None
    db.dispose()


def test_labels_through_feedback_give_performance(scenario: Scenario) -> None:
    before, after = scenario.runs["drifted"]["report"], scenario.runs["labelled"]["report"]
    assert before["performance"] is None and before["estimated_performance"] is not None
    perf = after["performance"]
    assert perf is not None and perf["label_coverage"] == pytest.approx(1.0)
    assert 0.5 < perf["accuracy"] <= 1.0 and 0.5 < perf["roc_auc"] <= 1.0
    assert after["concept_drift"]["observed"] == WINDOW
    assert scenario.runs["labelled"]["window"]["labelled"] == WINDOW


def test_history_lists_runs_newest_first(scenario: Scenario) -> None:
    with scenario.server.client() as c:
        r = c.get("/v1/models/credit/drift/history")
        one = c.get("/v1/models/credit/drift/history", params={"limit": 1})
    assert r.status_code == 200, r.text
    runs = r.json()["runs"]
    ids = [scenario.runs[k]["run_id"] for k in ("labelled", "drifted", "baseline")]
    assert [x["run_id"] for x in runs[:3]] == ids
    assert runs[0]["dataset_drifted"] is True and set(runs[0]["drifted_features"]) == PLANTED
    assert runs[2]["dataset_drifted"] is False and runs[2]["drifted_features"] == []
    assert [x["run_id"] for x in one.json()["runs"]] == ids[:1]


def signed_report_link(scenario: Scenario, *, at: datetime | None = None) -> str:
    """The report link of a webhook message about ``credit`` sent ``at`` (default: now)."""
    server = scenario.server
    settings = server.settings.model_copy(update={"public_url": server.url})
    with server.state.db.session() as s:
        key = link_key(session=s, settings=settings)
    got: str = links(settings=settings, model_name="credit", link_key=key, at=at or datetime.now(UTC))[
        "report"
    ]
    return got


def test_a_signed_link_opens_the_report_without_a_token(scenario: Scenario) -> None:
    url = signed_report_link(scenario)
    assert "signature=" in url
    page = httpx.get(url, timeout=30)  # no Authorization header at all, as a browser
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), page.text
    assert "the dataset drifted" in page.text and "credit_score" in page.text and "<svg" in page.text
    # the URL is a credential: no shared cache keeps the page, no Referer carries the URL on
    assert page.headers["cache-control"] == "private, no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    for bad in (
        url.replace("/reports/credit/", "/reports/shadow/"),
        signed_report_link(scenario, at=datetime.now(UTC) - timedelta(days=8)),
    ):
        r = httpx.get(bad, timeout=30)
        assert r.status_code == 401 and "signed link refused" in r.json()["error"], r.text


def test_html_report_renders_in_headless_chromium(scenario: Scenario, tmp_path: Path) -> None:
    with scenario.server.client() as c:
        page = c.get("/reports/credit/drift")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "the dataset drifted" in page.text and "credit_score" in page.text and "<svg" in page.text
    out = screenshot(  # the browser opens the signed link of a webhook message itself: no bearer header
        signed_report_link(scenario),
        ARTIFACTS / f"drift-report-{scenario.backend}.png",
        profile_dir=tmp_path / "chromium",
        size=(1280, 5000),  # the whole page: the cards' bars come after the summary and the history
    )
    print(f"\nscreenshot: {out}")
    assert out.stat().st_size > 30_000
    px = read_png(out)
    colors = np.unique(px.reshape(-1, 3)[::7], axis=0)
    assert len(colors) > 50  # text, bars, boxes: not a blank page
    current = (np.abs(px.astype(np.int32) - [9, 105, 218]).sum(axis=2) < 12).sum()  # "current" bars
    reference = (np.abs(px.astype(np.int32) - [140, 149, 159]).sum(axis=2) < 12).sum()  # "reference" bars
    alarm = (np.abs(px.astype(np.int32) - [253, 232, 232]).sum(axis=2) < 6).sum()  # red DRIFTED summary
    assert current > 2_000 and reference > 2_000 and alarm > 5_000, (current, reference, alarm)


def test_scheduler_pass_in_the_server_process(scenario: Scenario) -> None:
    """A forced pass evaluates every serving model (and only those); an unforced one right after skips."""
    state = scenario.server.state
    forced = run_pass(db=state.db, settings=state.settings, force=True)
    assert [r.model_name for r in forced] == ["credit"]
    assert forced[0].outcome is not None and forced[0].outcome.window.rows == WINDOW
    again = run_pass(db=state.db, settings=state.settings)
    assert again[0].outcome is None and again[0].skipped and "less than an interval" in again[0].skipped
