"""Multivariate drift: PCA reconstruction error of the standardised numeric features.

The reference profile holds a PCA fitted on the training rows (components explaining about 90 % of
the variance, at most ``d - 1``) and the distribution of each row's reconstruction error
``||z - z V^T V||^2 / d`` (computed as the energy along the discarded axes). A window whose rows
break the reference correlations (even with unchanged marginals) reconstructs worse; its error
distribution is compared with the reference one by the default numeric test (KS significance and
a minimum normalised Wasserstein distance).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from core.tabular import as_float
from monitors.binning import GridCounts, count_on_grid
from monitors.profile import PCAProfile, reconstruction_error


def pca_error_counts(columns: Mapping[str, np.ndarray], pca: PCAProfile) -> GridCounts:
    """Counts of one chunk's reconstruction errors on the reference error grid.

    The chunk is processed as one block (rows x numeric features): callers feed bounded chunks
    (:meth:`monitors.window.WindowSketch.update`), so memory stays bounded by the chunk size.
    """
    if not pca.features or not len(columns[pca.features[0]]):
        return GridCounts.empty(pca.error.grid)
    block = np.column_stack([as_float(np.asarray(columns[f])) for f in pca.features])
    z = np.nan_to_num((block - pca.center) / pca.scale)
    return count_on_grid(reconstruction_error(z, pca.residual_components), pca.error.grid)
