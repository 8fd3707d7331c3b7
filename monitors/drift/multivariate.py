"""Multivariate drift: PCA reconstruction error of the standardised numeric features.

The reference profile holds a PCA fitted on half of the sampled reference rows (those at even positions;
components explaining about 90 % of the variance, at most ``d - 1``) and the distribution of the
reconstruction error ``||z - z V^T V||^2 / d`` (the energy along the discarded axes) of rows a PCA was not
fitted on, as a window's are: the other half's rows under it, and its own half's under a PCA fitted on the
other half (two-fold cross-fitting, so every sampled row counts). (Errors of the fitting rows themselves
are biased low, the discarded axes being their own smallest-variance directions, which made clean windows
look drifted.)
A window whose rows break the reference correlations (even with unchanged marginals) reconstructs worse; its
error distribution is compared with the reference one by the default numeric test (KS significance and a
minimum normalised Wasserstein distance).
A window's error above the reference's largest counts as that largest: one fresh value far out in the tail
of a heavy-tailed feature (a legitimate one: see registry/tails.py) has an error thousands of times the
reference's spread, which alone moved the Wasserstein distance past its floor in a window of 100,000 rows;
how many errors lie beyond the reference's still counts in full (KS is unchanged by it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from core.tabular import Column
from monitors.binning import GridCounts, count_on_grid
from monitors.profile import PCAProfile, pca_errors


def pca_error_counts(columns: Mapping[str, Column], pca: PCAProfile) -> GridCounts:
    """Counts of one chunk's reconstruction errors on the reference error grid (at most the reference's
    largest error).

    The chunk is processed as one block (rows x numeric features): callers feed bounded chunks
    (:meth:`monitors.sketch.WindowSketch.update`, the log window's chunks), so memory stays bounded.
    """
    if not pca.features or not len(columns[pca.features[0]]):
        return GridCounts.empty(pca.error.grid)
    errors = pca_errors(columns, pca)
    if math.isfinite(pca.error.max):
        np.minimum(errors, pca.error.max, out=errors)
    return count_on_grid(errors, pca.error.grid)
