"""Post-hoc calibration of a trained classifier's probabilities (pure: numpy in, two numbers out).

Platt scaling: ``p = sigmoid(scale * logit + shift)``, the two numbers fitted by maximum likelihood on the
held-out split, which the network never trained on. It keeps the ranking (``scale`` is never negative, so
ROC AUC is unchanged) and removes what asynchronous training leaves in the probabilities: with Adam's last
steps jittering the weights, versions trained alike on the same data had expected calibration errors
anywhere from 0.001 to 0.06 on the demo's drifted traffic, and the validation gate rightly rejected the
worse-calibrated ones.
"""

from __future__ import annotations

import numpy as np

RIDGE = 1e-6  # keeps the Newton step defined on separable or constant scores
EPS = 1e-7


def logits_of(probs: np.ndarray) -> np.ndarray:
    """The log-odds of probabilities, clipped away from 0 and 1."""
    p = np.clip(np.asarray(probs, dtype=np.float64), EPS, 1.0 - EPS)
    return np.log(p / (1.0 - p))


def fit_platt(logits: np.ndarray, labels: np.ndarray, *, iterations: int = 50) -> tuple[float, float]:
    """``(scale, shift)`` maximising the likelihood of ``labels`` under ``sigmoid(scale * z + shift)``,
    with ``scale >= 0``; ``(1, 0)`` (no change) without rows of both classes."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if z.size == 0 or np.unique(y).size < 2:
        return 1.0, 0.0
    x = np.column_stack([z, np.ones_like(z)])
    w = np.array([1.0, 0.0])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + RIDGE * w
        hess = (x * (p * (1.0 - p))[:, None]).T @ x + RIDGE * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    scale, shift = float(w[0]), float(w[1])
    if scale < 0 or not np.isfinite([scale, shift]).all():  # scores that rank backwards: no calibration
        shift = float(logits_of(np.array([y.mean()]))[0])
        return 0.0, shift
    return scale, shift
