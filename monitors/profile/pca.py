"""The multivariate summary: the reconstruction error of the numeric features through their PCA."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.tabular import Column, Take, as_float
from monitors.profile.profiles import PCAProfile
from monitors.profile.summaries import numeric_summary

PCA_MAX_ROWS = 50_000
"""Rows of the reference the multivariate detector is fitted and cross-fitted on, at most: evenly spaced
through the reference (deterministic), 25,000 a fold, ample for the axes of a few dozen standardised
features and the 1,001 quantiles of the held-out errors, at a bounded cost however long the reference."""
PCA_VARIANCE = 0.9


def pca_positions(rows: int) -> np.ndarray:
    """The rows of a ``rows``-row reference the multivariate detector is fitted on: at most
    :data:`PCA_MAX_ROWS`, evenly spaced (every row of a shorter one)."""
    if rows <= PCA_MAX_ROWS:
        return np.arange(rows)
    return np.linspace(0, rows - 1, PCA_MAX_ROWS).astype(np.int64)


def pca_summary(take: Take, rows: int, names: list[str]) -> dict[str, Any] | None:
    """PCA of the standardised ``names`` (of a ``rows``-row reference; ``take(name, positions)`` gives a
    column's values at those rows) with a held-out reference error distribution (None: too few rows).

    The sampled rows are cross-fitted in two folds (even and odd positions): a PCA (center, scale, axes) is
    fitted on each, and the reconstruction errors summarised are those of each fold under the OTHER fold's
    PCA, standardised as :func:`pca_errors` standardises a window's rows; the even fold's PCA is kept. Errors
    of the fitting rows would be biased low (the discarded axes are their own smallest-variance directions),
    so fresh rows would look drifted; both folds' held-out errors keep every sampled row in the distribution.
    """
    if len(names) < 2:
        return None
    pick = pca_positions(rows)
    x = np.empty((pick.size, len(names)), order="F")  # sampled rows first, one column a time
    for j, n in enumerate(names):
        x[:, j] = as_float(take(n, pick))
    np.copyto(x, np.nan, where=np.isinf(x))  # an infinity is fitted as missing, as pca_errors reads it
    even, odd = np.ascontiguousarray(x[0::2]), np.ascontiguousarray(x[1::2])
    if odd.shape[0] < 2 * len(names):  # the smaller fold (odd has at most as many rows as even)
        return None
    kept = _fit_pca(even)
    other = _fit_pca(odd, k=kept.components.shape[0])  # as many axes kept: errors on one scale
    err = np.concatenate([_fold_errors(odd, kept), _fold_errors(even, other)])
    return {
        "features": names,
        "center": kept.center.tolist(),
        "scale": kept.scale.tolist(),
        "components": kept.components.tolist(),
        "residual_components": kept.residual_components.tolist(),
        "explained_variance": kept.explained_variance,
        "error": numeric_summary(err, name="pca_reconstruction_error"),
    }


@dataclass(frozen=True)
class _Fitted:
    """A PCA fitted on one fold: its standardisation, kept and discarded axes, explained variance."""

    center: np.ndarray
    scale: np.ndarray
    components: np.ndarray
    residual_components: np.ndarray
    explained_variance: float


def _fit_pca(rows: np.ndarray, *, k: int | None = None) -> _Fitted:
    """The principal axes of ``rows`` standardised (a missing value at the center); ``k`` kept axes, or as
    many as explain :data:`PCA_VARIANCE` of the variance (at most ``d - 1``)."""
    center = np.nan_to_num(np.nanmean(rows, axis=0))
    scale = np.nanstd(rows, axis=0)
    scale[~(scale > 0)] = 1.0
    z = np.nan_to_num((rows - center) / scale)
    # principal axes from the d x d scatter matrix (the right singular vectors of z), largest first
    eigenvalues, vectors = np.linalg.eigh(z.T @ z)
    order = np.argsort(eigenvalues)[::-1]
    energy = np.clip(eigenvalues[order], 0.0, None)
    vt = np.ascontiguousarray(vectors[:, order].T)
    var = energy / max(float(energy.sum()), 1e-300)
    d = rows.shape[1]
    if k is None:
        k = min(max(int(np.searchsorted(np.cumsum(var), PCA_VARIANCE) + 1), 1), d - 1)
    return _Fitted(center, scale, vt[:k], vt[k:], float(var[:k].sum()))


def _fold_errors(rows: np.ndarray, pca: _Fitted) -> np.ndarray:
    """The reconstruction errors of ``rows`` under a PCA fitted on other rows (as :func:`pca_errors`)."""
    z = np.nan_to_num((rows - pca.center) / pca.scale)
    return reconstruction_error(z, pca.residual_components)


def pca_errors(columns: Mapping[str, Column], pca: PCAProfile) -> np.ndarray:
    """Reconstruction error of each row of ``columns`` under the reference ``pca``.

    Each row is standardised with the reference center and scale, a missing or infinite value at the center
    (0: an infinity would make the row's error infinite or NaN, whatever its other values; the feature's own
    checks count it), then measured by :func:`reconstruction_error`. The block is built transposed (a
    feature per row: contiguous copies), which is also the order the matrix product reads fastest.
    """
    rows = len(columns[pca.features[0]]) if pca.features else 0
    zt = np.empty((len(pca.features), rows))
    for j, name in enumerate(pca.features):
        zt[j] = as_float(columns[name])
    zt -= pca.center[:, None]
    zt /= pca.scale[:, None]
    np.copyto(zt, 0.0, where=~np.isfinite(zt))
    return reconstruction_error(zt.T, pca.residual_components)


def reconstruction_error(z: np.ndarray, residual_components: np.ndarray) -> np.ndarray:
    """Mean squared residual per row of standardised ``z`` after projecting on the kept components.

    With an orthonormal basis split into kept and ``residual_components`` (the discarded principal
    axes), the residual's squared norm is the energy along the discarded axes: ``||z R^T||^2``.
    """
    along = residual_components @ z.T  # (axes, rows)
    return np.asarray(np.einsum("ij,ij->j", along, along) / z.shape[1])
