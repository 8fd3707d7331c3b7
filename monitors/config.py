"""Monitor settings per model, with per-feature overrides (stored as JSON beside the model)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from monitors.drift.base import Correction


class FeatureOverride(BaseModel):
    """Per-feature choice of test and thresholds (None = the model-level default)."""

    test: str | None = None
    alpha: float | None = Field(default=None, gt=0, lt=1)
    threshold: float | None = Field(default=None, ge=0)
    enabled: bool = True


class MonitorConfig(BaseModel):
    """Drift decision settings; every default is documented in the test classes."""

    alpha: float = Field(
        default=0.05, gt=0, lt=1, description="Significance level per feature (after adjustment)."
    )
    correction: Correction = Field(
        default=Correction.BH, description="Multiple-testing adjustment across features."
    )
    drift_share: float = Field(
        default=0.25, gt=0, le=1, description="Dataset drifts when at least this share of features drifts."
    )
    numeric_test: str = "default"
    numeric_threshold: float | None = None
    categorical_test: str = "default"
    categorical_threshold: float | None = None
    features: dict[str, FeatureOverride] = Field(default_factory=dict)
    prediction: FeatureOverride = Field(default_factory=FeatureOverride)
    multivariate: bool = True
    quality_min_increase: float = Field(default=0.01, ge=0)
    classification_threshold: float = Field(default=0.5, gt=0, lt=1)
