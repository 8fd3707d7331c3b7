"""Held-out metrics of a binary classifier (pure numpy)."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def binary_metrics(y_true: np.ndarray, proba: np.ndarray, *, threshold: float = 0.5) -> dict[str, float]:
    """Accuracy, precision, recall, F1, ROC AUC (Mann-Whitney form) and log loss."""
    y = y_true.astype(np.int64)
    pred = (proba >= threshold).astype(np.int64)
    tp = float(np.sum((pred == 1) & (y == 1)))
    fp = float(np.sum((pred == 1) & (y == 0)))
    fn = float(np.sum((pred == 0) & (y == 1)))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    if n_pos and n_neg:
        ranks = rankdata(proba)
        auc = (ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    else:
        auc = float("nan")
    p = np.clip(proba.astype(np.float64), 1e-7, 1 - 1e-7)
    log_loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return {
        "accuracy": float(np.mean(pred == y)),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "roc_auc": float(auc),
        "log_loss": log_loss,
        "positive_rate": float(y.mean()),
        "rows": int(y.size),
    }
