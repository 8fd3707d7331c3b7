"""The segment series at /metrics (monitors/metrics.py): a stored run with segments, read back by the drift
collector on both backends. The ``segment`` label stays bounded: the largest segments by name, the rest as
``other``, and a window full of values the reference never had adds no segment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from core.config import get_settings
from core.database import Database
from monitors.config import MonitorConfig
from monitors.engine import evaluate
from monitors.metrics import OTHER_SEGMENT, DriftCollector
from monitors.profile import Profile, build_reference_profile, profile_from_dict
from monitors.rows import RowSample
from monitors.segments import segment_table
from monitors.service import record_run
from monitors.sketch import WindowSketch
from registry.schema import FeatureKind, infer_schema
from tests.monitors.helpers import true_probability
from tests.monitors.logdata import register_profile
from tests.monitors.promtext import parse, series
from training.cluster.datagen import TARGET, generate

SHOPS = [f"shop{i:02d}" for i in range(30)]


def _table(seed: int, rows: int, *, hostile: int = 0) -> dict[str, np.ndarray]:
    """The generator's rows with a ``shop`` of 30 levels, more rows in the lower ones; ``hostile`` rows with
    a shop of their own, each a new value."""
    cols = generate(rows, seed=seed)
    rng = np.random.default_rng(seed)
    weights = np.linspace(2.0, 1.0, len(SHOPS))
    shop = rng.choice(np.array(SHOPS, dtype=object), rows, p=weights / weights.sum())
    shop[:hostile] = [f"evil-{i}-{'x' * 200}" for i in range(hostile)]
    cols["shop"] = shop
    return cols


def _sample(cols: dict[str, np.ndarray], kinds: dict[str, FeatureKind]) -> RowSample:
    columns = {
        n: np.asarray(cols[n], dtype=np.float64)
        if k is FeatureKind.NUMERIC
        else np.asarray(cols[n], dtype=object)
        for n, k in kinds.items()
    }
    y = np.asarray(cols[TARGET], dtype=np.float64)
    return RowSample(columns=columns, kinds=kinds, predictions=true_probability(cols), labels=y)


def _scrape(db: Database, **update: Any) -> dict[Any, float]:
    settings = get_settings().model_copy(update=update)
    collector = DriftCollector(db=db, settings=settings)
    collector.refresh()  # what the server's refresh job does; a scrape reads the cache
    registry = CollectorRegistry()
    registry.register(collector)
    return parse(generate_latest(registry).decode())


def test_the_segment_label_is_bounded(db: Database, tmp_path: Path) -> None:
    reference = _table(1, 8_000)
    schema = infer_schema(reference, target=TARGET)
    built = build_reference_profile(
        reference, schema, predictions=true_probability(reference), labels=reference[TARGET]
    )
    profile: Profile = profile_from_dict(built)
    register_profile(db, tmp_path / "models", built)
    kinds = {spec.name: spec.kind for spec in schema.features}
    window = _table(2, 8_000, hostile=3_000)  # 3,000 shops the reference never had
    config = MonitorConfig(segment_max_levels=40)
    segments = segment_table(
        reference=_sample(reference, kinds),
        window=_sample(window, kinds),
        profile=profile,
        config=config,
        level=0.01,
    )
    shops = [s for s in segments if s["feature"] == "shop"]
    assert sorted(s["value"] for s in shops) == SHOPS  # the reference's levels, none of the window's own
    sketch = WindowSketch(threshold=0.5)
    sketch.update(profile, {name: window[name] for name in profile.features})
    sketch.rows = 8_000
    report = evaluate(profile=profile, sketch=sketch, config=config)
    report.segments = segments
    with db.session() as s:
        record_run(session=s, model_name="credit", model_version=1, report=report)

    scraped = _scrape(db, metrics_max_segments=5)
    rows = series(scraped, "driftwarden_segment_rows", model="credit")
    labels = {dict(k)["segment"]: v for k, v in rows.items()}
    largest = sorted(segments, key=lambda s: -s["share"])[:5]
    assert set(labels) == {s["segment"] for s in largest} | {OTHER_SEGMENT}
    rest = sorted(segments, key=lambda s: -s["share"])[5:]
    assert labels[OTHER_SEGMENT] == round(sum(s["share"] for s in rest) * 8_000)
    for name in ("driftwarden_segment_flagged", "driftwarden_segment_drifted_features"):
        assert {dict(k)["segment"] for k in series(scraped, name, model="credit")} == set(labels), name
    flagged_other = series(scraped, "driftwarden_segment_flagged", model="credit", segment=OTHER_SEGMENT)
    assert list(flagged_other.values()) == [float(sum(s["flagged"] for s in rest))]
    performance = series(scraped, "driftwarden_segment_performance", model="credit")
    assert {dict(k)["segment"] for k in performance} == {s["segment"] for s in largest}  # no sum for other
    assert {(dict(k)["metric"], dict(k)["source"]) for k in performance} == {("roc_auc", "realized")}

    only_other = series(_scrape(db, metrics_max_segments=0), "driftwarden_segment_rows", model="credit")
    assert [dict(k)["segment"] for k in only_other] == [OTHER_SEGMENT]
    assert list(only_other.values()) == [round(sum(s["share"] for s in segments) * 8_000)]
