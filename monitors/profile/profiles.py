"""The profile's typed view: a parsed ``profile.json`` (:class:`Profile`) and its parts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from monitors.rows import RowSample, sample_from_dict
from registry.schema import FeatureKind, Task

PROFILE_FORMAT = "driftwarden.profile/1"
N_QUANTILES = 1001  # quantile sketch size: F is known to within 1/1000 between grid points
N_BINS = 10  # reference-quantile (decile) bins for PSI and Jensen-Shannon
PREDICTION = "prediction"
MISSING_CATEGORY = None  # categorical missing values: None or ""
PROFILE_LEVELS = 256  # a categorical with more levels keeps its most frequent 255 and folds the rest:
OTHER_LEVELS = "(other levels)"  # ... into this one count (drift tests fold a window's other values into it)


@dataclass(frozen=True)
class NumericProfile:
    """Reference summary of one numeric column."""

    name: str
    count: int
    missing: int
    mean: float
    std: float
    min: float
    max: float
    quantiles: np.ndarray  # N_QUANTILES values, non-decreasing
    grid: np.ndarray  # distinct quantiles
    grid_counts: np.ndarray  # 2 * len(grid) + 1 exact cell counts
    grid_sums: np.ndarray  # sum of the values per cell (empty when not stored)
    bin_cuts: np.ndarray  # interior decile cut points (a subset of the grid)
    bin_counts: np.ndarray  # len(bin_cuts) + 1
    observed_min: float | None = None
    observed_max: float | None = None
    allowed_min: float | None = None
    allowed_max: float | None = None
    allowed_chance: float | None = None  # the contract's chance per value of a legitimate value outside
    kind: FeatureKind = FeatureKind.NUMERIC

    @property
    def missing_rate(self) -> float:
        total = self.count + self.missing
        return self.missing / total if total else 0.0

    @property
    def scale(self) -> float:
        """Spread used to normalise distances: the std, else IQR/1.349, else 1."""
        if self.std > 0:
            return self.std
        q = self.quantiles
        iqr = float(q[int(0.75 * (len(q) - 1))] - q[int(0.25 * (len(q) - 1))]) if len(q) else 0.0
        return iqr / 1.349 if iqr > 0 else 1.0


@dataclass(frozen=True)
class CategoricalProfile:
    """Reference summary of one categorical column."""

    name: str
    count: int
    missing: int
    categories: dict[str, int]
    kind: FeatureKind = FeatureKind.CATEGORICAL

    @property
    def missing_rate(self) -> float:
        total = self.count + self.missing
        return self.missing / total if total else 0.0


@dataclass(frozen=True)
class PCAProfile:
    """PCA of standardised numeric features and the reference distribution of reconstruction error."""

    features: tuple[str, ...]
    center: np.ndarray
    scale: np.ndarray
    components: np.ndarray  # (n_components, n_features), orthonormal rows
    residual_components: np.ndarray  # the remaining principal axes: the error is the energy along them
    explained_variance: float
    error: NumericProfile


FeatureProfile = NumericProfile | CategoricalProfile


@dataclass(frozen=True)
class Profile:
    """A parsed ``profile.json``."""

    rows: int
    features: dict[str, FeatureProfile]
    prediction: NumericProfile | None = None
    performance: dict[str, float] | None = None
    calibration: dict[str, Any] | None = None  # binary: one reliability table; multi-class: "per_class"
    multivariate: PCAProfile | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # every other key of the dict, as stored
    task: Task = Task.BINARY
    class_probabilities: dict[str, NumericProfile] = field(default_factory=dict)  # multi-class, by name
    predicted_class: CategoricalProfile | None = None  # multi-class: the predicted class names
    loss_model: dict[str, Any] | None = None  # regression: the direct-loss-estimation model
    performance_spread: dict[str, Any] | None = None  # sd of each metric across reference chunks
    sample_data: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)  # as stored

    @cached_property
    def sample(self) -> RowSample | None:
        """The reference's row sample (:func:`reference_sample`), parsed on first use; None for a profile
        built before profiles kept one."""
        return None if self.sample_data is None else sample_from_dict(self.sample_data)

    @property
    def surrogate(self) -> dict[str, Any] | None:
        """The surrogate of the model's answers fitted on the reference sample (:mod:`monitors.surrogate`);
        None: a profile without a sample, or built before surrogates."""
        model = self.extra.get("surrogate")
        return model if isinstance(model, dict) else None
