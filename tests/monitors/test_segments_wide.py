"""Segments of a wide table stay bounded (monitors/segments.py): at most ``MAX_PARTITIONS`` segmenting
features (those the settings name first, then the default ones in the reference's order), and each segment
examined on ``SEGMENT_FEATURES`` features at most, the run's most drifted first. Unbounded, a file of 1,600
columns (100 of them categorical) took 39 s and 5.9 GB in the segments alone: every segmenting feature times
every feature, on the samples' rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitors.config import MonitorConfig, SegmentSpec
from monitors.profile import Profile, build_reference_profile, profile_from_dict
from monitors.rows import RowSample
from monitors.segments import MAX_PARTITIONS, SEGMENT_FEATURES, partitions, segment_table
from registry.schema import FeatureKind, infer_schema

ROWS = 4_000
CATEGORICAL = 30  # more than MAX_PARTITIONS, each of 3 levels
NUMERIC = 150  # more than SEGMENT_FEATURES
LAST = f"n{NUMERIC - 1:03d}"  # the window's last numeric feature: shifted inside c00=a only


def _columns(seed: int, *, shift: float = 0.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {
        f"c{i:02d}": rng.choice(np.array(["a", "b", "c"], dtype=object), ROWS) for i in range(CATEGORICAL)
    }
    cols.update({f"n{i:03d}": rng.normal(0.0, 1.0, ROWS) for i in range(NUMERIC)})
    cols[LAST] = np.where(cols["c00"] == "a", cols[LAST] + shift, cols[LAST])
    cols["label"] = rng.integers(0, 2, ROWS)
    return cols


@pytest.fixture(scope="module")
def profile() -> Profile:
    cols = _columns(1)
    schema = infer_schema(cols, target="label")
    return profile_from_dict(build_reference_profile(cols, schema, predictions=np.full(ROWS, 0.5)))


@pytest.fixture(scope="module")
def window(profile: Profile) -> RowSample:
    cols = _columns(2, shift=1.5)
    kinds = {name: f.kind for name, f in profile.features.items()}
    return RowSample(
        columns={n: cols[n] for n in kinds}, kinds=kinds, predictions=np.full(ROWS, 0.5), labels=None
    )


def _table(profile: Profile, window: RowSample, **given: Any) -> list[dict[str, Any]]:
    assert profile.sample is not None
    return segment_table(
        reference=profile.sample, window=window, profile=profile, config=MonitorConfig(), level=0.01, **given
    )


def test_at_most_so_many_segmenting_features_the_named_ones_first(profile: Profile) -> None:
    kinds = {name: f.kind for name, f in profile.features.items()}
    assert sum(k is FeatureKind.CATEGORICAL for k in kinds.values()) == CATEGORICAL > MAX_PARTITIONS
    found = [p.feature for p in partitions(profile=profile, config=MonitorConfig(), kinds=kinds)]
    assert found == [f"c{i:02d}" for i in range(MAX_PARTITIONS)]  # the reference's order
    named = MonitorConfig(segments=[SegmentSpec(feature="c29"), SegmentSpec(feature="n007", bins=[0.0])])
    found = [p.feature for p in partitions(profile=profile, config=named, kinds=kinds)]
    assert found == ["c29", "n007", *(f"c{i:02d}" for i in range(MAX_PARTITIONS - 2))]


def test_a_segment_is_examined_on_the_run_s_most_drifted_features_first(
    profile: Profile, window: RowSample
) -> None:
    ranked = _table(profile, window, ranked=[LAST])
    assert len({r["feature"] for r in ranked}) == MAX_PARTITIONS
    top = ranked[0]
    assert top["segment"] == "c00=a" and top["flagged"] and top["drift"]["own"] == [LAST]
    assert all(r["drift"]["tested"] == SEGMENT_FEATURES - 1 for r in ranked if r["judged"])  # not its own
    # in the window's order the shifted feature is the 180th: beyond the features a segment is examined on
    plain = _table(profile, window)
    assert not any(LAST in (r["drift"] or {}).get("features", []) for r in plain)
