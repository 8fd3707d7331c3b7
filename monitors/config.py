"""Monitor settings per model, with per-feature overrides (stored as JSON beside the model)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import Invalid
from monitors.drift.base import Correction
from monitors.drift.catalog import TESTS, lookup
from registry.schema import FeatureKind

HarmMetric = Literal[
    "roc_auc", "accuracy", "f1", "precision", "recall", "macro_f1", "log_loss", "mae", "rmse", "r2"
]
"""The metrics harmful drift can judge (those of ``alerts.specs.Metric``)."""
MAX_WINDOW_MINUTES = 3_660 * 24 * 60  # ten years: a longer time window is every prediction anyway


class FeatureOverride(BaseModel):
    """Per-feature choice of test and thresholds (None = the model-level default)."""

    test: str | None = None
    alpha: float | None = Field(default=None, gt=0, lt=1)
    threshold: float | None = Field(default=None, ge=0)
    enabled: bool = True

    @field_validator("test")
    @classmethod
    def _registered(cls, name: str | None) -> str | None:
        known = sorted({t.name for t in TESTS})
        if name is not None and name not in known:
            raise ValueError(f"unknown test {name!r}; choose from {known}")
        return name


MAX_SEGMENT_BINS = 50
MAX_SEGMENTS = 20


class SegmentSpec(BaseModel):
    """A segmenting feature: each level of a categorical feature, or numeric bins (monitors/segments.py)."""

    model_config = ConfigDict(extra="forbid")

    feature: str = Field(min_length=1, max_length=128)
    bins: list[float] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SEGMENT_BINS,
        description="A numeric feature's bin edges, increasing: [18, 30, 50] makes (-inf, 18), [18, 30), "
        "[30, 50), [50, inf). None: a categorical feature's levels, a numeric feature's reference quartiles.",
    )

    @field_validator("bins")
    @classmethod
    def _increasing(cls, bins: list[float] | None) -> list[float] | None:
        if bins is None:
            return None
        if not all(math.isfinite(b) for b in bins):
            raise ValueError("bin edges must be finite numbers")
        if any(b >= a for a, b in zip(bins[1:], bins, strict=False)):
            raise ValueError(f"bin edges must increase strictly, got {bins}")
        return bins


class MonitorConfig(BaseModel):
    """Drift decision settings; every default is documented in the test classes.

    Test names are checked against the catalog of drift tests (:mod:`monitors.drift.catalog`).
    """

    alpha: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="Significance level per feature (after adjustment) of a one-off comparison, and the most "
        "a scheduled run tests at (monitors/horizon.py).",
    )
    false_alarms_per_30d: float = Field(
        default=0.5,
        gt=0,
        le=100,
        description="Expected false alarms of the scheduled runs of a model per 30 days, over all its "
        "detectors: a scheduled run tests at min(alpha, this / 7 / runs in 30 days) (monitors/horizon.py).",
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
    window_rows: int | None = Field(
        default=None,
        gt=0,
        le=1_000_000_000,
        description="Window of this model: last N predictions. With window_minutes: both limits apply. "
        "Neither set: the server's default window (DRIFTWARDEN_MONITOR_WINDOW_ROWS / _MINUTES).",
    )
    window_minutes: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WINDOW_MINUTES,
        description="Window of this model: the predictions logged in the last T minutes (alone: no row "
        "limit). Neither set: the server's default window.",
    )
    segments: list[SegmentSpec] = Field(
        default_factory=list,
        max_length=MAX_SEGMENTS,
        description='Segmenting features besides the default ones: [{"feature": "region"}, '
        '{"feature": "age", "bins": [18, 30, 50]}] (monitors/segments.py).',
    )
    segment_max_levels: int = Field(
        default=20,
        ge=0,
        le=100,
        description="Every categorical feature with at most this many reference levels is segmented by "
        "its levels (0: only the features named in segments).",
    )
    segment_min_rows: int = Field(
        default=50,
        ge=10,
        le=1_000_000,
        description="A segment with fewer rows in the window's or the reference's sample is listed "
        "without a verdict.",
    )
    harm_metric: HarmMetric | None = Field(
        default=None,
        description="The metric harmful drift judges (monitors/harm.py); None: the task's own, roc_auc for a "
        "binary classifier, macro_f1 for a multi-class one, rmse for a regression.",
    )
    harm_tolerance: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="How much worse than the reference the window's performance may be before drift is "
        "harmful: absolute for a metric that falls when the model gets worse (None: 0.02), a share of the "
        "reference's value for one that grows, rmse, mae, log_loss (None: 0.05, 5 %).",
    )
    harm_min_labels: int = Field(
        default=500,
        ge=1,
        le=1_000_000_000,
        description="Labelled rows a window needs for harmful drift to judge its realised performance; "
        "fewer: the label-free estimate (CBPE, DLE).",
    )
    interval_s: float | None = Field(
        default=None,
        gt=0,
        le=30 * 86_400,
        description="Seconds between scheduled runs of this model (None: DRIFTWARDEN_MONITOR_INTERVAL_S); "
        "a scheduler pass evaluates a model at most once, so less than the server's interval acts as it.",
    )

    @field_validator("numeric_test")
    @classmethod
    def _numeric_test(cls, name: str) -> str:
        lookup(FeatureKind.NUMERIC, name)
        return name

    @field_validator("categorical_test")
    @classmethod
    def _categorical_test(cls, name: str) -> str:
        lookup(FeatureKind.CATEGORICAL, name)
        return name

    @field_validator("segments")
    @classmethod
    def _one_spec_per_feature(cls, specs: list[SegmentSpec]) -> list[SegmentSpec]:
        names = [s.feature for s in specs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} named more than once: one entry per segmenting feature")
        return specs

    @field_validator("prediction")
    @classmethod
    def _prediction_test(cls, override: FeatureOverride) -> FeatureOverride:
        if override.test is not None:
            lookup(FeatureKind.NUMERIC, override.test)  # the prediction is a numeric column
        return override


CONFIG_FILE = "monitor.json"


def settings_schema() -> dict[str, Any]:
    """The JSON Schema of a ``monitor.json`` as the settings route takes it: no field besides the settings."""
    from core.openapi import model_schema

    schema = model_schema(MonitorConfig)
    schema["additionalProperties"] = False
    for override in (
        schema["properties"]["prediction"],
        schema["properties"]["features"]["additionalProperties"],
    ):
        override["additionalProperties"] = False
    return schema


def config_path(*, registry: Path, model_name: str) -> Path:
    """``<registry>/<model>/monitor.json``: one config per model, shared by its versions.

    Built by :func:`registry.service.model_dir`, which checks the name and proves the folder is inside the
    registry (``Invalid`` otherwise).
    """
    from registry.service import model_dir  # here: it loads the ORM, which `driftwarden drift` needs not

    return model_dir(registry=registry, model_name=model_name) / CONFIG_FILE


def load_config(*, registry: Path, model_name: str) -> MonitorConfig:
    """The model's monitor config, or the defaults when it has none."""
    path = config_path(registry=registry, model_name=model_name)
    if not path.is_file():
        return MonitorConfig()
    return MonitorConfig.model_validate(json.loads(path.read_text()))


def _unknown_fields(data: dict[str, Any]) -> list[str]:
    """The paths of the fields of ``data`` that no setting has (a typo would otherwise be dropped)."""
    unknown = [f"{key}" for key in data if key not in MonitorConfig.model_fields]
    overrides = [("prediction", data.get("prediction"))]
    features = data.get("features")
    if isinstance(features, dict):
        overrides += [(f"features.{name}", value) for name, value in features.items()]
    for where, value in overrides:
        if isinstance(value, dict):
            unknown += [f"{where}.{key}" for key in value if key not in FeatureOverride.model_fields]
    return unknown


def parse_config(
    data: Any, *, where: str = "", name: Callable[[str], str] = lambda field: field
) -> MonitorConfig:
    """``data`` validated as a model's monitor settings, unknown fields refused; ``Invalid`` names each field
    (after ``where``; ``name`` words a field's path, e.g. as a command's option) and the rule it breaks."""
    if not isinstance(data, dict):
        raise Invalid(f"{where}the monitor settings must be a JSON object, got {type(data).__name__}")
    unknown = _unknown_fields(data)
    if unknown:
        raise Invalid(
            f"{where}unknown monitor setting(s) {', '.join(unknown)}; the settings are "
            f"{', '.join(MonitorConfig.model_fields)} "
            f"(a feature's: {', '.join(FeatureOverride.model_fields)})"
        )
    try:  # strict JSON: `false` is no number, `"1"` no count (lax mode would take both)
        return MonitorConfig.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        problems = "; ".join(
            f"{name('.'.join(str(x) for x in e.get('loc', ())) or 'body')}: "
            f"{str(e.get('msg', 'invalid')).removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise Invalid(f"{where}invalid monitor settings: {problems}") from None


def stored_form(config: MonitorConfig) -> dict[str, Any]:
    """What ``monitor.json`` holds of ``config``: the settings that were given (the rest stay defaults)."""
    return config.model_dump(mode="json", exclude_unset=True)


def save_config(*, registry: Path, model_name: str, config: MonitorConfig) -> Path:
    """Write ``config`` as the model's ``monitor.json``, whole or not at all (through a temporary file)."""
    path = config_path(registry=registry, model_name=model_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(stored_form(config), indent=2) + "\n")
    os.replace(temporary, path)
    return path
