"""A window's predictions by the source of their log rows (``serve``, ``ingest``, ``import``,
``cloudevents``), on SQLite and PostgreSQL: counted by the window reader from each batch's size (typed ranges
and document batches alike, a last-N window cutting inside a batch), kept in the sketch cache's blocks, stored
in the run's report and its history line, and exported as ``driftwarden_monitor_window_predictions{model,
source}``. Also: a backfilled run (stored at its window's end) never becomes the run the series show.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from core.config import Settings, get_settings
from core.database import Database, aware
from monitors.engine import compare
from monitors.flows import history, run_monitor
from monitors.log_window import SketchCache, read_window
from monitors.metrics import DriftCollector, DriftFamilies, RunView
from monitors.profile import CategoricalProfile, NumericProfile, Profile, profile_from_dict
from monitors.service import record_run
from monitors.sketch import WindowSketch, decode_counts, encode_counts
from predictions import typed
from predictions.pending import RequestRows, build
from predictions.service import new_prediction_ids, write_log_rows
from predictions.windows import WindowSpec, count_sources
from registry.schema import ModelSchema
from tests.monitors.logdata import plain, register_profile
from training.cluster.datagen import generate

# (source, predictions, per request), oldest first: mixed within the chunks and the cache's blocks
PLAN = [
    ("serve", 300, 7),
    ("import", 200, 50),
    ("ingest", 150, 10),
    ("cloudevents", 40, 1),
    ("serve", 100, 7),
    ("ingest", 30, 3),
]
TOTAL = sum(n for _, n, _ in PLAN)  # 820


def contract(profile: Profile) -> typed.Layout:
    """The typed layout of the profile's features, as the serving flow logs them."""
    numeric = [n for n, f in profile.features.items() if isinstance(f, NumericProfile)]
    categorical = [n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)]
    known = [sorted(cast(CategoricalProfile, profile.features[c]).categories) for c in categorical]
    return typed.make_layout(numeric, categorical, known)


def log_sources(
    engine: Engine,
    plan: list[tuple[str, int, int]],
    *,
    features: list[str],
    layout: typed.Layout | None,
    model: str = "credit",
    version: int = 1,
    status: str = "ok",
    seed: int = 5,
    end: datetime | None = None,
) -> list[tuple[str, int]]:
    """Log the plan's predictions (oldest first, requests 1 ms apart, each with its source) as the writer
    does; returns each batch's (source, size) in log order."""
    cols = generate(sum(n for _, n, _ in plan), seed=seed)
    docs = [{f: plain(cols[f][i]) for f in features} for i in range(len(cols[features[0]]))]
    sizes = [(source, min(k, n - lo)) for source, n, k in plan for lo in range(0, n, k)]
    first = (end or datetime.now(UTC)) - timedelta(milliseconds=len(sizes))
    requests, at = [], 0
    for i, (source, size) in enumerate(sizes):
        requests.append(
            RequestRows(
                model_name=model,
                model_version=version,
                logged_at=first + timedelta(milliseconds=i),
                request_id=f"req-{i}",
                protocol="v1",
                latency_ms=1.0,
                status=status,
                ids=new_prediction_ids(size),
                inputs=docs[at : at + size],
                values=[0.5] * size,
                flags=[None] * size,
                layout=layout,
                source=source,
            )
        )
        at += size
    write_log_rows(engine=engine, rows=[b for built in build(requests) for b in built], idempotent=False)
    return sizes


def newest(batches: list[tuple[str, int]], rows: int) -> dict[str, int]:
    """The newest ``rows`` predictions of ``batches`` counted by source (the oldest batch cut)."""
    counts: Counter[str] = Counter()
    left = rows
    for source, size in reversed(batches):
        take = min(size, left)
        counts[source] += take
        left -= take
        if not left:
            break
    return dict(sorted(counts.items()))


@pytest.fixture
def profile(profile_dict: dict[str, Any]) -> Profile:
    return profile_from_dict(profile_dict)


def noise(db: Database, features: list[str], layout: typed.Layout | None) -> None:
    """Rows no window of credit v1 holds: another model, an output violation, another version."""
    log_sources(db.engine, [("ingest", 30, 3)], features=features, layout=layout, model="other", seed=8)
    log_sources(db.engine, [("import", 20, 5)], features=features, layout=layout, status="output_violation")
    log_sources(db.engine, [("serve", 25, 5)], features=features, layout=layout, version=2, seed=9)


@pytest.mark.parametrize("typed_copy", [True, False])
def test_the_window_counts_its_predictions_by_source(
    db: Database, profile: Profile, schema: ModelSchema, typed_copy: bool
) -> None:
    features = list(schema.feature_names)
    layout = contract(profile) if typed_copy else None
    batches = log_sources(db.engine, PLAN, features=features, layout=layout)
    noise(db, features, layout)
    spec = WindowSpec(rows=700, version=1)  # cuts inside a serve request of 7 (the oldest 120 left out)
    window = read_window(engine=db.engine, profile=profile, model_name="credit", spec=spec, chunk_rows=64)
    assert window.rows == 700 and window.skip > 0 and window.chunks >= 8
    assert window.rows_by_source == newest(batches, 700)
    assert window.rows_by_source == {"cloudevents": 40, "import": 200, "ingest": 180, "serve": 280}
    assert sum(window.rows_by_source.values()) == window.rows
    assert window.as_dict()["rows_by_source"] == window.rows_by_source
    every = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(version=1), chunk_rows=64
    )
    assert every.rows_by_source == {"cloudevents": 40, "import": 200, "ingest": 180, "serve": 400}
    # a source the window does not reach is absent, not 0
    last = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=100, version=1)
    )
    assert last.rows_by_source == {"ingest": 30, "serve": 70}


def test_a_time_window_counts_by_source(db: Database, profile: Profile, schema: ModelSchema) -> None:
    features = list(schema.feature_names)
    now = datetime.now(UTC)
    old = log_sources(
        db.engine, [("import", 300, 100)], features=features, layout=None, end=now - timedelta(hours=2)
    )
    assert old == [("import", 100)] * 3
    log_sources(db.engine, PLAN[:3], features=features, layout=contract(profile), end=now)
    window = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(minutes=60), now=now
    )
    assert window.rows == 650 and window.rows_by_source == {"import": 200, "ingest": 150, "serve": 300}


def test_the_sketch_cache_keeps_the_counts_by_source(
    db: Database, profile: Profile, schema: ModelSchema
) -> None:
    """Sealed blocks are stored with their rows by source: a warm read merges them and counts the same."""
    features = list(schema.feature_names)
    batches = log_sources(db.engine, PLAN, features=features, layout=contract(profile))
    args: dict[str, Any] = dict(engine=db.engine, profile=profile, model_name="credit", chunk_rows=64)
    spec = WindowSpec(rows=700)
    cold = read_window(**args, spec=spec, cache=SketchCache(db.engine, block_ids=16))
    warm = read_window(**args, spec=spec, cache=SketchCache(db.engine, block_ids=16))
    plain_read = read_window(**args, spec=spec)
    assert cold.cached_blocks == 0 and warm.cached_blocks is not None and warm.cached_blocks > 5
    assert cold.rows_by_source == warm.rows_by_source == plain_read.rows_by_source == newest(batches, 700)


def test_counts_by_source_from_sizes() -> None:
    sizes = np.array([3, 5, 2, 4], dtype=np.int64)
    assert count_sources(["serve", "ingest", "serve", "import"], sizes) == {
        "serve": 5,
        "ingest": 5,
        "import": 4,
    }
    assert count_sources(["serve", "ingest", "serve", "import"], sizes, skip=2) == {
        "serve": 3,
        "ingest": 5,
        "import": 4,
    }
    assert count_sources(["serve"] * 4, sizes, skip=1) == {"serve": 13}
    assert count_sources(["import", "serve"], np.array([2, 1]), skip=2) == {"serve": 1}  # none left: absent
    assert count_sources([], np.array([], dtype=np.int64)) == {}
    with pytest.raises(ValueError, match="2 sources for 4 batches"):
        count_sources(["serve", "ingest"], sizes)


def test_stored_counts_round_trip_with_their_sources(profile: Profile) -> None:
    sketch = WindowSketch().update(profile, generate(300, seed=3))
    sketch.sources.update({"serve": 200, "ingest": 100})
    assert decode_counts(encode_counts(sketch)).sources == {"serve": 200, "ingest": 100}
    assert (sketch.merge(decode_counts(encode_counts(sketch)))).sources == {"serve": 400, "ingest": 200}


def _scrape(db: Database, settings: Settings) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    collector = DriftCollector(db=db, settings=settings)
    collector.refresh()  # what the server's refresh job does
    registry.register(collector)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _by_source(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    name = "driftwarden_monitor_window_predictions"
    return {dict(labels)["source"]: v for (n, labels), v in samples.items() if n == name}


def test_the_run_reports_and_exports_its_window_by_source(
    db: Database, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    settings = get_settings().model_copy(update={"monitor_min_rows": 10, "monitor_window_rows": 700})
    register_profile(db, settings.registry_path, profile_dict, model="credit")
    features = list(schema.feature_names)
    batches = log_sources(
        db.engine, PLAN, features=features, layout=contract(profile_from_dict(profile_dict))
    )
    assert _by_source(_scrape(db, settings)) == {}  # no run yet
    outcome = run_monitor(db=db, settings=settings, model_name="credit")
    expected = newest(batches, 700)
    stored = history(db=db, model_name="credit")["runs"][0]
    assert stored["run_id"] == outcome.run_id and stored["rows_by_source"] == expected
    assert outcome.window.as_dict()["rows_by_source"] == expected
    samples = _scrape(db, settings)
    assert _by_source(samples) == {source: float(n) for source, n in expected.items()}
    labels = {labels for (n, labels) in samples if n == "driftwarden_monitor_window_predictions"}
    assert all(dict(k)["model"] == "credit" for k in labels)
    # the newest 100 hold no import nor the oldest ingest: those series go (absent, not 0)
    log_sources(db.engine, [("serve", 100, 10)], features=features, layout=None, seed=11)
    settings = settings.model_copy(update={"monitor_window_rows": 130})
    run_monitor(db=db, settings=settings, model_name="credit")
    assert _by_source(_scrape(db, settings)) == {"ingest": 30.0, "serve": 100.0}


def test_a_run_stored_before_the_count_exports_no_series_by_source(profile: Profile) -> None:
    report = compare(profile=profile, columns=generate(300, seed=12)).as_dict()
    families = DriftFamilies()
    old = RunView(1, "credit", datetime.now(UTC), 1.0, 300, {**report, "window": {"rows": 300}})
    families.add(old, max_features=100)
    assert families.window_sources.samples == []
    families.add(
        RunView(
            2, "other", datetime.now(UTC), 1.0, 300, {**report, "window": {"rows_by_source": {"ingest": 300}}}
        ),
        max_features=100,
    )
    assert [(s.labels, s.value) for s in families.window_sources.samples] == [
        ({"model": "other", "source": "ingest"}, 300.0)
    ]


def test_a_backfilled_run_never_becomes_the_latest_the_series_show(
    db: Database, profile_dict: dict[str, Any], profile: Profile
) -> None:
    """The series show the newest run by its own time: a past window evaluated later (stored at its end, with
    a higher id) stays in the history at its time and never replaces the live run in the series."""
    settings = get_settings()
    register_profile(db, settings.registry_path, profile_dict, model="credit")
    live_report = compare(profile=profile, columns=generate(2_000, seed=13))
    past_report = compare(profile=profile, columns=generate(2_000, scenario="covariate_shift", seed=14))
    assert past_report.drifted and not live_report.drifted
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    with db.session() as s:
        live = record_run(
            session=s,
            model_name="credit",
            model_version=1,
            report=live_report,
            extra={"window": {"rows_by_source": {"serve": 2_000}}},
        ).id
        past = record_run(
            session=s,
            model_name="credit",
            model_version=1,
            report=past_report,
            window_start=end - timedelta(days=1),
            window_end=end,
            extra={"window": {"rows_by_source": {"import": 2_000}}, "backfill": True},
            created_at=end,
        ).id
    assert past > live
    samples = _scrape(db, settings)
    assert samples[("driftwarden_dataset_drifted", (("model", "credit"),))] == 0.0
    assert _by_source(samples) == {"serve": 2_000.0}
    runs = history(db=db, model_name="credit")["runs"]
    assert [(r["run_id"], r["backfill"]) for r in runs] == [(live, False), (past, True)]
    assert aware(runs[1]["created_at"]) == end
    assert runs[1]["rows_by_source"] == {"import": 2_000}
