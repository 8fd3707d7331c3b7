"""Shared fixtures of the alert tests: real drift reports (one per planted scenario) and a database with a
registered model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.database import Database, open_database
from monitors.engine import compare, evaluate
from monitors.profile import Profile, build_reference_profile, profile_from_dict
from monitors.sketch import WindowSketch
from registry.schema import infer_schema
from registry.service import META_DIR, promote, register_version
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate


@pytest.fixture(scope="session")
def alert_profile() -> Profile:
    reference = generate(20_000, seed=201)
    schema = infer_schema(reference, target=TARGET)
    doc = build_reference_profile(
        reference, schema, predictions=true_probability(reference), labels=reference[TARGET]
    )
    return profile_from_dict(doc)


def _report(profile: Profile, scenario: str, seed: int) -> dict[str, Any]:
    cur = generate(8_000, scenario=scenario, seed=seed)
    return compare(
        profile=profile, columns=cur, predictions=true_probability(cur), labels=cur[TARGET]
    ).as_dict()


@pytest.fixture(scope="session")
def reports(alert_profile: Profile) -> dict[str, dict[str, Any]]:
    """``DriftReport.as_dict()`` of a window of each planted scenario (with labels)."""
    out = {
        name: _report(alert_profile, name, seed)
        for name, seed in (("baseline", 211), ("covariate_shift", 212), ("new_category", 213))
    }
    # concept drift shows in the error stream across windows: baseline traffic, then the drifted window
    base, cur = generate(8_000, seed=214), generate(8_000, scenario="concept_drift", seed=215)
    sketch = WindowSketch()
    sketch.update(alert_profile, base, predictions=true_probability(base), labels=base[TARGET])
    fresh = WindowSketch(errors=sketch.errors)
    fresh.update(alert_profile, cur, predictions=true_probability(cur), labels=cur[TARGET])
    out["concept_drift"] = evaluate(profile=alert_profile, sketch=fresh).as_dict()
    return out


def register_model(db: Database, path: Path, name: str = "credit", *, versions: int = 1) -> None:
    """Register ``versions`` versions of ``name`` (no SavedModel: the alerts need only the contract, which
    names the features a rule may name) and serve the first."""
    meta = path / META_DIR
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "schema.json").write_text(
        json.dumps(infer_schema(generate(500, seed=3), target=TARGET).to_dict())
    )
    with db.session() as s:
        for v in range(1, versions + 1):
            register_version(session=s, model_name=name, version=v, path=path, metrics={}, lineage={})
        promote(session=s, model_name=name, version=1)


@pytest.fixture
def db(database_url: str, tmp_path: Path) -> Iterator[Database]:
    """A migrated database on each backend with model ``credit`` registered (version 1 serving)."""
    database = open_database(database_url, upgrade=True)
    register_model(database, tmp_path)
    try:
        yield database
    finally:
        database.dispose()
