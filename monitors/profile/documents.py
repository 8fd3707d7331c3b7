"""A profile dict parsed into the typed view; ``profile.json`` written and read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from monitors.profile.profiles import (
    PROFILE_FORMAT,
    CategoricalProfile,
    FeatureProfile,
    NumericProfile,
    PCAProfile,
    Profile,
)
from registry.schema import FeatureKind, Task


def _arr(values: Any) -> np.ndarray:
    return np.asarray(values if values is not None else [], dtype=np.float64)


def numeric_from_dict(d: Mapping[str, Any]) -> NumericProfile:
    return NumericProfile(
        name=str(d["name"]),
        count=int(d["count"]),
        missing=int(d["missing"]),
        mean=float(d["mean"]),
        std=float(d["std"]),
        min=float(d["min"]) if d.get("min") is not None else float("nan"),
        max=float(d["max"]) if d.get("max") is not None else float("nan"),
        quantiles=_arr(d["quantiles"]),
        grid=_arr(d["grid"]),
        grid_counts=np.asarray(d["grid_counts"], dtype=np.int64),
        grid_sums=_arr(d.get("grid_sums")),
        bin_cuts=_arr(d["bin_cuts"]),
        bin_counts=np.asarray(d["bin_counts"], dtype=np.int64),
        observed_min=d.get("observed_min"),
        observed_max=d.get("observed_max"),
        allowed_min=d.get("allowed_min"),
        allowed_max=d.get("allowed_max"),
        allowed_chance=d.get("allowed_chance"),
    )


def _feature_from_dict(d: Mapping[str, Any]) -> FeatureProfile:
    if FeatureKind(d["kind"]) is FeatureKind.NUMERIC:
        return numeric_from_dict(d)
    return categorical_from_dict(d)


def categorical_from_dict(d: Mapping[str, Any]) -> CategoricalProfile:
    return CategoricalProfile(
        name=str(d["name"]),
        count=int(d["count"]),
        missing=int(d["missing"]),
        categories={str(k): int(v) for k, v in d["categories"].items()},
    )


def profile_from_dict(data: Mapping[str, Any]) -> Profile:
    """Parse a profile dict (as built by :func:`build_reference_profile`)."""
    if data.get("format") != PROFILE_FORMAT:
        raise ValueError(f"unsupported profile format {data.get('format')!r} (expected {PROFILE_FORMAT!r})")
    mv = data.get("multivariate")
    pca = None
    if mv:
        pca = PCAProfile(
            features=tuple(mv["features"]),
            center=_arr(mv["center"]),
            scale=_arr(mv["scale"]),
            components=np.asarray(mv["components"], dtype=np.float64),
            residual_components=np.asarray(mv["residual_components"], dtype=np.float64),
            explained_variance=float(mv["explained_variance"]),
            error=numeric_from_dict(mv["error"]),
        )
    known = {
        "format",
        "rows",
        "features",
        "prediction",
        "performance",
        "calibration",
        "multivariate",
        "performance_spread",
        "sample",
    }
    classes = data.get("classes") or {}
    predicted = classes.get("predicted")
    return Profile(
        rows=int(data["rows"]),
        features={name: _feature_from_dict(d) for name, d in data["features"].items()},
        prediction=numeric_from_dict(data["prediction"]) if data.get("prediction") else None,
        performance=data.get("performance"),
        calibration=data.get("calibration"),
        multivariate=pca,
        extra={k: v for k, v in data.items() if k not in known},
        task=Task.parse(str(data.get("task") or Task.BINARY.value)),
        class_probabilities={
            n: numeric_from_dict(d) for n, d in (classes.get("probabilities") or {}).items()
        },
        predicted_class=categorical_from_dict(predicted) if predicted else None,
        loss_model=data.get("loss_model"),
        performance_spread=data.get("performance_spread"),
        sample_data=data.get("sample"),
    )


def profile_json(document: Mapping[str, Any]) -> str:
    """A profile document (or a document holding one) as JSON text. A numeric column that holds an infinity
    keeps it in its profile (its minimum or maximum, a quantile, a grid point, a cell's sum; its schema's
    observed range): it is written as ``Infinity`` / ``-Infinity``, the extension of JSON that Python's
    ``json`` (and so :func:`read_profile`) reads back, as the registry writes a version's ``profile.json``."""
    return json.dumps(document, separators=(",", ":"))


def write_profile(profile: Mapping[str, Any], path: str | Path) -> Path:
    """Write a profile dict as JSON (:func:`profile_json`)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(profile_json(profile))
    return p


def read_profile(path: str | Path) -> Profile:
    """Read and parse a ``profile.json``."""
    return profile_from_dict(json.loads(Path(path).read_text()))
