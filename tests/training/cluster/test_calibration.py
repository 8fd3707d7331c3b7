"""Platt scaling (training/cluster/calibration.py): it recovers a known miscalibration, keeps the ranking, and
leaves degenerate scores alone."""

from __future__ import annotations

import numpy as np
import pytest

from training.cluster.calibration import fit_platt, logits_of
from training.retraining.gate import expected_calibration_error


def test_recovers_a_known_miscalibration_and_removes_it() -> None:
    rng = np.random.default_rng(0)
    truth = rng.normal(-1.0, 1.5, 20_000)  # true log-odds
    y = (rng.random(truth.size) < 1 / (1 + np.exp(-truth))).astype(np.float64)
    overconfident = 2.0 * truth - 0.5  # what a network's logit may be after noisy last steps
    scale, shift = fit_platt(overconfident, y)
    assert scale == pytest.approx(0.5, abs=0.03) and shift == pytest.approx(0.25, abs=0.06)
    before = 1 / (1 + np.exp(-overconfident))
    after = 1 / (1 + np.exp(-(scale * overconfident + shift)))
    assert expected_calibration_error(y, before) > 0.05 > 0.01 > expected_calibration_error(y, after)
    assert np.array_equal(np.argsort(before, kind="stable"), np.argsort(after, kind="stable"))


def test_scores_that_rank_backwards_or_one_class_are_not_turned_around() -> None:
    rng = np.random.default_rng(1)
    z = rng.normal(size=5000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(z))).astype(np.float64)  # higher score, fewer positives
    scale, shift = fit_platt(z, y)
    assert scale == 0.0 and shift == pytest.approx(float(logits_of(np.array([y.mean()]))[0]))
    assert fit_platt(z, np.ones_like(z)) == (1.0, 0.0)
    assert fit_platt(np.array([]), np.array([])) == (1.0, 0.0)
    separable = np.r_[-np.ones(50), np.ones(50)]
    s, b = fit_platt(separable, (separable > 0).astype(float))
    assert np.isfinite([s, b]).all() and s > 0
