"""Whether a classifier's outputs fit its reference labels in the order they were given (pure: numpy in,
numbers out).

An imported model's output columns carry no names: ``--classes`` (else the target's sorted values) says
which class each column is, and a binary model's one probability is assumed to be of label 1. A wrong
guess registers a model whose reference metrics are below chance without a word, so the importer asks:

- Multi-class (:func:`check_multiclass`): the accuracy of the given order against the best order. Reading
  column ``j`` as class ``perm[j]`` scores the rows of the confusion matrix ``C[j, i]`` (predicted column,
  true class) on ``perm``, so the best order over all ``K!`` is the maximum assignment of ``C`` (Hungarian,
  ``scipy.optimize.linear_sum_assignment``), exact for any ``K``. The two orders are compared on the same
  rows: the rows one gets right and the other wrong are, under "equally good", a fair coin each (an exact
  one-sided sign test, McNemar's), and the best of ``K! - 1`` alternatives is tested at ``ALPHA / (K! - 1)``
  (Bonferroni). Another order *fits clearly better* when that test rejects and it is also at least
  :data:`MARGIN` more accurate. Chance is the accuracy of answers independent of the labels with the same
  class frequencies (``sum_k P(true = k) P(predicted = k)``, the expected agreement of Cohen's kappa); the
  accuracy is *at chance* unless a one-sided test (normal, variance ``chance (1 - chance) / n``) puts it
  above chance at ``ALPHA``.
- Binary (:func:`check_binary`): the ROC AUC. Its null distribution (AUC = 0.5, no ties) has the
  Mann-Whitney variance ``(n1 + n0 + 1) / (12 n1 n0)``; an AUC below 0.5 by a one-sided normal test at
  ``ALPHA`` and by at least :data:`MARGIN` is *the probability of the other class*; unless the same test
  puts it above 0.5 at ``ALPHA`` it is *at chance*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

ALPHA = 1e-3  # the chance of calling a right order wrong (or a probability flipped), per import
MARGIN = 0.02  # the least gain in accuracy (or AUC below 0.5) that counts as clearly better


@dataclass(frozen=True)
class MulticlassCheck:
    """The given order's accuracy, the best order's, and chance, on the labelled reference rows."""

    rows: int
    accuracy: float  # columns read in the given order
    best: tuple[int, ...]  # best[j]: the given order's index of the class that column j fits
    best_accuracy: float
    chance: float
    p_value: float  # the sign test of the best order against the given one (1.0 when it is the given one)
    threshold: float  # the level that p_value must be under (ALPHA over the alternatives)
    above_p: float  # one-sided: the given order is more accurate than chance

    @property
    def reordered(self) -> bool:
        """Another order fits clearly better (significant and at least MARGIN more accurate)."""
        return (
            self.best != tuple(range(len(self.best)))
            and self.p_value < self.threshold
            and self.best_accuracy - self.accuracy >= MARGIN
        )

    @property
    def at_chance(self) -> bool:
        """The given order is not clearly more accurate than chance (the test at ALPHA does not reject)."""
        return self.above_p >= ALPHA


@dataclass(frozen=True)
class BinaryCheck:
    """The ROC AUC of the probability as given, on the labelled reference rows."""

    rows: int
    auc: float
    p_value: float  # one-sided: the AUC is below 0.5
    above_p: float  # one-sided: the AUC is above 0.5

    @property
    def flipped(self) -> bool:
        """The probability is clearly of the other class (AUC significantly and MARGIN below 0.5)."""
        return self.p_value < ALPHA and self.auc <= 0.5 - MARGIN

    @property
    def at_chance(self) -> bool:
        """The AUC is not clearly above 0.5 (the test at ALPHA does not reject)."""
        return self.above_p >= ALPHA


def check_multiclass(*, labels: np.ndarray, probabilities: np.ndarray) -> MulticlassCheck | None:
    """The check of ``[n, K]`` probabilities against class indexes ``labels`` (NaN: unlabelled, left out);
    None without a labelled row."""
    from scipy.optimize import linear_sum_assignment
    from scipy.special import betainc

    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    k = p.shape[1]
    ok = ~np.isnan(y)
    if not ok.any():
        return None
    truth = y[ok].astype(np.int64)
    predicted = p[ok].argmax(axis=1)
    n = int(truth.size)
    confusion = np.zeros((k, k), dtype=np.int64)  # [predicted column, true class]
    np.add.at(confusion, (predicted, truth), 1)
    _, best = linear_sum_assignment(confusion, maximize=True)
    order = tuple(int(i) for i in best)
    right = predicted == truth
    right_best = best[predicted] == truth
    gained = int(np.sum(right_best & ~right))
    lost = int(np.sum(right & ~right_best))
    # P(X >= gained) for X ~ Binomial(gained + lost, 1/2): the regularized incomplete beta function
    p_value = float(betainc(gained, lost + 1, 0.5)) if gained > 0 else 1.0
    alternatives = math.factorial(k) - 1 if k <= 20 else math.inf
    chance = float(np.sum(np.bincount(truth, minlength=k) * np.bincount(predicted, minlength=k))) / n**2
    accuracy = float(right.mean())
    spread = math.sqrt(max(chance * (1.0 - chance), 1e-12) / n)
    return MulticlassCheck(
        rows=n,
        accuracy=accuracy,
        best=order,
        best_accuracy=float(right_best.mean()),
        chance=chance,
        p_value=p_value,
        threshold=ALPHA / alternatives,
        above_p=1.0 - NormalDist().cdf((accuracy - chance) / spread),
    )


def check_binary(*, labels: np.ndarray, probabilities: np.ndarray) -> BinaryCheck | None:
    """The check of probabilities against 0/1 ``labels`` (NaN: left out); None without both classes."""
    from monitors.performance import roc_auc

    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    ok = ~np.isnan(y) & ~np.isnan(p)
    positives = int(np.sum(y[ok] == 1))
    negatives = int(ok.sum()) - positives
    if positives == 0 or negatives == 0:
        return None
    auc = roc_auc(y_true=y[ok], y_score=p[ok])
    sd = math.sqrt((positives + negatives + 1) / (12.0 * positives * negatives))
    z = (auc - 0.5) / sd
    return BinaryCheck(
        rows=int(ok.sum()), auc=auc, p_value=NormalDist().cdf(z), above_p=1.0 - NormalDist().cdf(z)
    )
