"""Multivariate (PCA) detector, Page-Hinkley, and the mergeable window sketch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from core.tabular import Columns
from monitors.drift.streaming import PageHinkley
from monitors.engine import compare, evaluate, sketch_columns
from monitors.profile import build_reference_profile, profile_from_dict, reconstruction_error
from registry.schema import infer_schema
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate


def _correlated(n: int, seed: int, rho: float) -> Columns:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    b = rho * a + np.sqrt(1 - rho**2) * rng.normal(size=n)
    c = rng.normal(size=n)
    return {"a": a, "b": b, "c": c, "y": (rng.random(n) < 0.5).astype(np.int64)}


def test_pca_sees_a_joint_shift_the_marginals_hide() -> None:
    ref = _correlated(30_000, 41, 0.9)
    prof = profile_from_dict(build_reference_profile(ref, infer_schema(ref, target="y")))
    same = compare(profile=prof, columns=_correlated(5_000, 42, 0.9))
    flipped = compare(
        profile=prof, columns=_correlated(5_000, 43, -0.9)
    )  # same marginals, broken correlation
    assert same.multivariate is not None and not same.multivariate.drifted
    assert flipped.multivariate is not None and flipped.multivariate.drifted
    assert not any(f.drifted for f in flipped.features)


def _page_hinkley_by_hand(x: np.ndarray, delta: float, threshold: float, min_n: int) -> list[int]:
    alarms, n, mean, cum, low = [], 0, 0.0, 0.0, 0.0
    for i, v in enumerate(x):
        n += 1
        mean += (v - mean) / n
        cum += v - mean - delta
        low = min(low, cum)
        if n >= min_n and cum - low > threshold:
            alarms.append(i)
            n, mean, cum, low = 0, 0.0, 0.0, 0.0
    return alarms


def test_page_hinkley_matches_the_recursion_and_chunking() -> None:
    rng = np.random.default_rng(44)
    x = np.r_[rng.random(3_000) * 0.2, 0.5 + rng.random(3_000) * 0.3]
    want = _page_hinkley_by_hand(x, 0.005, 20.0, 30)
    whole = PageHinkley(threshold=20.0)
    assert whole.update(x) == want and want and want[0] > 3_000
    chunked = PageHinkley(threshold=20.0)
    for part in np.array_split(x, 7):
        chunked.update(part)
    assert chunked.alarms == want


def test_page_hinkley_is_quiet_on_baseline_errors_and_alarms_after_concept_drift() -> None:
    base = generate(200_000, seed=46)
    errors = np.abs(base[TARGET] - true_probability(base))
    for part in np.array_split(errors, 10):  # ten independent 20k-row streams with the default settings
        assert PageHinkley().update(part) == []
    drifted = generate(5_000, scenario="concept_drift", seed=47)
    ph = PageHinkley()
    ph.update(errors[:10_000])
    alarms = ph.update(np.abs(drifted[TARGET] - true_probability(drifted)))
    assert alarms and 10_000 < alarms[0] < 11_000  # within 1000 rows of the change


def test_sketch_of_chunks_equals_sketch_of_whole(profile_dict: dict[str, Any]) -> None:
    prof = profile_from_dict(profile_dict)
    cur = generate(12_000, scenario="covariate_shift", seed=45)
    p = true_probability(cur)
    whole = sketch_columns(profile=prof, columns=cur, predictions=p, labels=cur[TARGET])
    parts = [
        sketch_columns(
            profile=prof,
            columns={k: v[s] for k, v in cur.items()},
            predictions=p[s],
            labels=cur[TARGET][s],
        )
        for s in (slice(0, 5_000), slice(5_000, 12_000))
    ]
    merged = parts[0].merge(parts[1])
    a = evaluate(profile=prof, sketch=whole).as_dict()
    b = evaluate(profile=prof, sketch=merged).as_dict()
    a.pop("concept_drift"), b.pop("concept_drift")  # the streaming detector is order-bound, not merged
    _assert_same(a, b)
    small_chunks = sketch_columns(
        profile=prof, columns=cur, predictions=p, labels=cur[TARGET], chunk_rows=1_000
    )
    _assert_same(evaluate(profile=prof, sketch=small_chunks).as_dict()["features"], a["features"])


def _assert_same(a: Any, b: Any) -> None:
    """Equal structure, equal values; floats to 1e-9 relative (sums in another order round differently)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (a, b)
    else:
        assert a == b


def test_reconstruction_error_equals_the_direct_residual(profile_dict: dict[str, Any]) -> None:
    prof = profile_from_dict(profile_dict)
    pca = prof.multivariate
    assert pca is not None
    z = np.random.default_rng(48).normal(size=(500, pca.components.shape[1]))
    residual = z - (z @ pca.components.T) @ pca.components
    want = (residual**2).sum(axis=1) / z.shape[1]
    assert np.allclose(reconstruction_error(z, pca.residual_components), want, rtol=1e-9, atol=1e-12)


def test_a_report_shows_a_long_category_cut_to_a_bounded_label(profile_dict: dict[str, Any]) -> None:
    prof = profile_from_dict(profile_dict)
    cur = generate(2_000, seed=46)
    cur["region"] = cur["region"].astype(object)
    cur["region"][:10] = "r" * 100_000  # as logged before the contract bounded category lengths
    report = evaluate(profile=prof, sketch=sketch_columns(profile=prof, columns=cur)).as_dict()
    region = next(f for f in report["features"] if f["name"] == "region")
    labels = region["histogram"]["labels"]
    assert max(map(len, labels)) <= 64 and "r" * 48 + "… (100000 chars)" in labels
    assert "r" * 100 not in str(report)  # nowhere in the report, whole
