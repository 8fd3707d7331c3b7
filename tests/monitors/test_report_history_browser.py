"""Issue 43, item 2's acceptance in a browser: 30 stored runs of a model (20 daily windows stored by the
backfill, 10 hourly scheduled runs), its report written by ``driftwarden report`` and served by the report
route of a real uvicorn, opened in headless Chromium at 1,400 and 390 pixels (screenshots kept in
``artifacts/``): the summary table, the history charts with one point per run, human times, no raw ISO
timestamp, no Python repr, no number with more than 4 significant digits, and no horizontal overflow at 390
pixels."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.database import open_database
from monitors.backfill import backfill
from monitors.flows import run_monitor
from registry.schema import infer_schema
from tests.monitors.browser import ARTIFACTS, CHROMIUM_FLAGS, chromium, read_png, screenshot
from tests.monitors.helpers import true_probability
from tests.monitors.logdata import log_columns, register_profile
from tests.monitors.reporttext import NUMBER, REPR, _significant, _text
from tests.support import Server, run_cli, serve_settings
from training.cluster.datagen import TARGET, generate

MODEL = "credit"
DAYS, HOURS = 20, 10
ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
OVERFLOW = (  # a test copy of the page says how far it is wider than the window
    "<script>addEventListener('load',()=>{const e=document.documentElement;"
    "document.body.setAttribute('data-overflow',String(e.scrollWidth-e.clientWidth))})</script></body>"
)


@dataclass
class Stored:
    settings: Settings
    now: datetime
    root: Path

    @property
    def backend(self) -> str:
        return self.settings.database_url.get_secret_value().split(":", 1)[0].split("+", 1)[0]


@pytest.fixture(scope="module")
def stored(
    module_db_url: str, profile_dict: dict[str, Any], reference: Any, tmp_path_factory: pytest.TempPathFactory
) -> Stored:
    """30 runs (on SQLite and on PostgreSQL): the backfill's 20 daily windows (the last 6 with a covariate
    shift), then 10 scheduled runs an hour apart, each on the hour's newly logged predictions (a growing
    shift)."""
    root = tmp_path_factory.mktemp("history")
    url = module_db_url
    settings = serve_settings(
        url,
        root / "spool",
        registry_path=root / "registry",
        monitor_enabled=False,
        monitor_min_rows=100,
        monitor_window_minutes=60.0,
        monitor_window_rows=100_000,
    )
    features = infer_schema(reference, target=TARGET).feature_names
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    midnight = now.replace(hour=0)
    db = open_database(url, upgrade=True)
    try:
        register_profile(db, root / "registry", profile_dict, model=MODEL)
        for day in range(DAYS):
            cols = generate(
                300, scenario="covariate_shift" if day >= DAYS - 6 else "baseline", seed=200 + day
            )
            end = midnight - timedelta(days=DAYS - 1 - day)
            log_columns(
                db.engine,
                cols,
                features=features,
                probability=true_probability(cols),
                when=end - timedelta(hours=2),
                spacing=timedelta(seconds=1),
            )
        done = backfill(
            db=db,
            settings=settings,
            model_name=MODEL,
            since=timedelta(days=DAYS),
            every=timedelta(days=1),
            now=now,
        )
        assert [r.outcome for r in done] == ["stored"] * DAYS
        for hour in range(HOURS):
            end = now - timedelta(hours=HOURS - 1 - hour)
            cols = generate(300, scenario="covariate_shift", seed=300 + hour, severity=0.5 + hour / 10)
            log_columns(
                db.engine,
                cols,
                features=features,
                probability=true_probability(cols),
                when=end - timedelta(minutes=5),
                spacing=timedelta(seconds=1),
            )
            run_monitor(db=db, settings=settings, model_name=MODEL, now=end)
    finally:
        db.dispose()
    return Stored(settings, now, root)


def _env(settings: Settings) -> dict[str, str]:
    return {
        "DRIFTWARDEN_DATABASE_URL": settings.database_url.get_secret_value(),
        "DRIFTWARDEN_REGISTRY_PATH": str(settings.registry_path),
        "DRIFTWARDEN_SPOOL_PATH": str(settings.spool_path),
    }


@pytest.fixture(scope="module")
def pages(stored: Stored, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The page as ``driftwarden report`` writes it and as the report route serves it."""
    out = tmp_path_factory.mktemp("pages") / "report.html"
    mp = pytest.MonkeyPatch()
    try:
        result = run_cli(mp, _env(stored.settings), "report", MODEL, "--since", "30d", "--out", str(out))
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    with Server(stored.settings) as srv, srv.client() as c:
        served = c.get(f"/reports/{MODEL}/drift", params={"since": "30d"})
        assert served.status_code == 200, served.text
        yield {"cli": out.read_text(), "route": served.text}


def _dom(page: Path, *, width: int, profile: Path) -> str:
    """The DOM headless Chromium renders from ``page`` in a window ``width`` pixels wide."""
    cmd = [
        chromium(),
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={width},2000",
        "--virtual-time-budget=3000",
        "--dump-dom",
        page.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "</html>" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def _figures(dom: str) -> dict[str, str]:
    """The history card's charts by caption."""
    card = dom[dom.index('id="history"') :]
    return dict(re.findall(r"<figure><figcaption>([^<]+)</figcaption>(.*?)</figure>", card, flags=re.S))


@pytest.mark.parametrize("source", ["cli", "route"])
def test_the_report_of_30_runs_reads_at_a_glance_at_1400_and_390_pixels(
    pages: dict[str, str], stored: Stored, source: str, tmp_path: Path
) -> None:
    page = pages[source]
    assert ISO.search(page) is None, ISO.search(page)
    file = tmp_path / "report.html"
    file.write_text(page)
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", OVERFLOW))
    doms = {}
    for width in (1400, 390):
        dom = doms[width] = _dom(probe, width=width, profile=tmp_path / f"c{width}")
        overflow = re.search(r'data-overflow="(-?\d+)"', dom)
        assert overflow is not None and int(overflow.group(1)) <= 0, (width, overflow)
        shot = screenshot(
            file.as_uri(),
            ARTIFACTS / f"drift-report-history-{stored.backend}-{source}-{width}.png",
            profile_dir=tmp_path / f"s{width}",
            size=(width, 2400),
        )
        px = read_png(shot)
        assert px.shape[1] == width and (px.reshape(-1, 3).std(axis=0) > 10).all()  # something was drawn
    dom = doms[1400]
    summary = dom[dom.index('id="summary"') : dom.index('id="history"')]
    rows = re.findall(r"<tr><td>([^<]+)</td><td>(DRIFT|ok)</td>", summary)
    assert len(rows) >= 10 and "DRIFT" in {v for _, v in rows}
    assert summary.count('class="spark"') == len(rows) and "effect, last 30 runs" in summary
    figures = _figures(dom)
    assert set(figures) >= {
        "Share of drifted features",
        "Effect of each feature that drifted",
        "Rows by source",
    }
    assert figures["Share of drifted features"].count('class="point"') == DAYS + HOURS  # one point per run
    perf = next(v for k, v in figures.items() if k.startswith("ROC AUC"))
    assert perf.count('class="point"') == DAYS + HOURS  # the estimated ROC AUC (no labels: none realised)
    assert figures["Rows by source"].count('class="bar"') == DAYS + HOURS
    first = stored.now.replace(hour=0) - timedelta(days=DAYS - 1)  # the first backfilled window's end
    text = " ".join(re.sub(r"<[^>]+>", " ", dom).split())
    assert f"30 runs from {first.day} {first:%b %Y} 00:00 UTC" in text
    seen = _text(dom)  # tooltips included
    assert REPR.search(seen) is None, seen[REPR.search(seen).start() - 80 :][:160]  # type: ignore[union-attr]
    assert not [t for t in NUMBER.findall(seen) if _significant(t) > 4]
    assert f"{DAYS} of them backfilled" in text and " UTC " in text


def test_a_bad_since_is_one_line_on_the_cli_and_a_400_on_the_route(stored: Stored, tmp_path: Path) -> None:
    mp = pytest.MonkeyPatch()
    try:
        bad = run_cli(
            mp, _env(stored.settings), "report", MODEL, "--since", "soon", "--out", str(tmp_path / "x")
        )
        none = run_cli(mp, _env(stored.settings), "report", "nobody", "--out", str(tmp_path / "y"))
    finally:
        mp.undo()
    assert bad.exit_code == 2 and "--since" in bad.output and "not a duration" in bad.output, bad.output
    assert none.exit_code == 2 and "nobody" in none.output and "Traceback" not in none.output, none.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    with Server(stored.settings) as srv, srv.client() as c:
        r = c.get(f"/reports/{MODEL}/drift", params={"since": "soon"})
    assert r.status_code == 400 and "since" in r.json()["error"], r.text
