"""Why a drift matters, where people read it, through a real server (uvicorn, SQLite and PostgreSQL): a
stored run whose report explains its drift (harm, attribution, segments, weak slices in the agreed shapes)
is served as JSON with its summary, and as the HTML report that headless Chromium draws: the harm line and
the summary with its impact bars first, then the segments (the flagged one marked), the weak slices with
their gap bars, then the per-feature cards."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from access.service import link_key
from alerts.webhooks import links
from core.database import open_database
from monitors.engine import compare
from monitors.profile import profile_from_dict
from monitors.report import report_from_dict
from monitors.service import record_run
from tests.monitors.browser import ARTIFACTS, read_png, screenshot
from tests.monitors.explained import CAUSE, HARMLESS, SECOND, explain
from tests.monitors.helpers import true_probability
from tests.support import Server, elsewhere_settings
from training.cluster.datagen import TARGET, generate

MODEL = "churn"
IMPACT, GAP, FLAG, CURRENT = (130, 80, 223), (188, 76, 0), (255, 241, 229), (9, 105, 218)


@dataclass
class Served:
    server: Server
    backend: str
    run_id: int


@pytest.fixture(scope="module")
def served(
    module_db_url: str, profile_dict: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    cur = generate(8_000, scenario="covariate_shift", seed=43)
    profile = profile_from_dict(profile_dict)
    report = compare(profile=profile, columns=cur, predictions=true_probability(cur), labels=cur[TARGET])
    settings = elsewhere_settings(module_db_url, tmp_path_factory.mktemp("reading"), {MODEL: "binary"})
    db = open_database(module_db_url)
    try:
        with db.session() as s:
            run_id = record_run(
                session=s,
                model_name=MODEL,
                model_version=1,
                report=report_from_dict(explain(report.as_dict())),
            ).id
    finally:
        db.dispose()
    backend = "postgresql" if module_db_url.startswith("postgresql") else "sqlite"
    with Server(settings) as srv:
        yield Served(srv, backend, run_id)


def test_the_drift_json_carries_the_summary(served: Served) -> None:
    with served.server.client() as c:
        r = c.get(f"/v1/models/{MODEL}/drift")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["run_id"] == served.run_id
    head = doc["headline"]
    assert [f["name"] for f in head["features"][:3]] == [CAUSE, SECOND, HARMLESS]
    assert head["features"][0]["impact"]["share"] == 0.8 and head["features"][2]["impact"]["harmless"]
    assert head["harm"]["harmful"] is True and head["harm"]["estimate"] == "cbpe"
    assert [c["feature"] for c in head["causes"]] == [CAUSE, SECOND]
    assert {"harmful_drift", "segment"} <= {f["kind"] for f in head["findings"]}
    report = doc["report"]  # the stored fields as they are
    assert report["attribution"]["features"][0]["name"] == CAUSE and report["weak_slices"]["tried"] == 240
    assert [s["segment"] for s in report["segments"]] == ["region=north", "region=south"]


def _rows_of(px: np.ndarray, color: tuple[int, int, int], tol: int = 12) -> np.ndarray:
    """The screen rows (y) holding pixels of ``color``."""
    hit = np.abs(px.astype(np.int32) - color).sum(axis=2) < tol
    return np.flatnonzero(hit.sum(axis=1) >= 3)


def test_the_html_report_draws_summary_impact_segments_and_weak_slices(
    served: Served, tmp_path: Path
) -> None:
    server = served.server
    settings = server.settings.model_copy(update={"public_url": server.url})
    with server.state.db.session() as s:
        key = link_key(session=s, settings=settings)
    url = links(settings=settings, model_name=MODEL, link_key=key, at=datetime.now(UTC))["report"]
    with server.client() as c:
        page = c.get(f"/reports/{MODEL}/drift").text
    assert page.index('id="summary"') < page.index('id="segments"') < page.index('id="weak-slices"')
    out = screenshot(
        url, ARTIFACTS / f"drift-report-explained-{served.backend}.png", profile_dir=tmp_path / "c"
    )
    print(f"\nscreenshot: {out}")
    px = read_png(out)
    impact, flagged, gap, current = (_rows_of(px, c) for c in (IMPACT, FLAG, GAP, CURRENT))
    # two impact bars (80 % and 20 % of the change), one flagged segment, two gap bars, then the cards' bars
    assert len(impact) >= 8 and len(flagged) >= 10 and len(gap) >= 8 and len(current) > 50, (
        len(impact),
        len(flagged),
        len(gap),
        len(current),
    )
    impact_px = (np.abs(px.astype(np.int32) - IMPACT).sum(axis=2) < 12).sum()
    assert 0.7 * (64 + 16) * 8 <= impact_px <= 1.3 * (64 + 16) * 8  # the bars' areas: 80 % and 20 % of 80 px
    assert impact.max() < flagged.min() and flagged.max() < gap.min() and gap.max() < current.min()
