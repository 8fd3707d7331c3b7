"""A drift report with the fields that explain it (harm, attribution, impacts, segments, weak slices) in the
agreed shapes of issue 42, added to a real report of the engine: the renderings read exactly these keys."""

from __future__ import annotations

import copy
from typing import Any

CAUSE, SECOND, HARMLESS = "credit_score", "income", "age"  # the covariate shift drifts these three


def _rename(report: dict[str, Any], names: dict[str, str]) -> None:
    for f in report["features"]:
        f["name"] = names.get(f["name"], f["name"])


def explain(report: dict[str, Any], *, names: dict[str, str] | None = None) -> dict[str, Any]:
    """``report`` (``DriftReport.as_dict()`` of a covariate shift) with harm, attribution, each attributed
    feature's impact, two segments (one flagged) and two weak slices; ``names`` renames features (and the
    segment's values) everywhere, e.g. to hostile text."""
    out = copy.deepcopy(report)
    names = names or {}
    _rename(out, names)
    cause, second, harmless = (names.get(n, n) for n in (CAUSE, SECOND, HARMLESS))
    region = names.get("region", "region")
    north = names.get("north", "north")
    out["harm"] = {
        "estimate": "cbpe",
        "metric": "roc_auc",
        "value": 0.81,
        "reference": 0.86,
        "change": -0.05,
        "tolerance": 0.02,
        "limit": 0.83,
        "lower": 0.79,
        "upper": 0.83,
        "level": 8e-06,
        "rows": 8000,
        "harmful": True,
        "message": "estimated (CBPE) roc_auc 0.810 is below the reference 0.860 by 0.050, beyond the "
        "tolerance 0.02",
    }
    entries = [
        {
            "name": cause,
            "impact": 0.8,
            "effect": -0.04,
            "lower": -0.045,
            "upper": -0.035,
            "prediction_effect": 0.1,
            "harmless": False,
        },
        {
            "name": second,
            "impact": 0.2,
            "effect": -0.01,
            "lower": -0.015,
            "upper": -0.005,
            "prediction_effect": 0.02,
            "harmless": False,
        },
        {
            "name": harmless,
            "impact": 0.0,
            "effect": 0.0,
            "lower": -0.001,
            "upper": 0.001,
            "prediction_effect": 0.0,
            "harmless": True,
        },
    ]
    out["attribution"] = {
        "method": "model",
        "surrogate_fit": None,
        "estimate": "cbpe",
        "metric": "roc_auc",
        "change": -0.05,
        "prediction_change": 0.12,
        "features": entries,
        "grouped": [],
        "rows": 2000,
        "evaluations": 8,
        "resamples": 50,
        "seconds": 0.4,
        "message": f"{cause} explains 80% of the estimated roc_auc change (-0.050)",
    }
    messages = {
        cause: f"{cause} explains 80% of the estimated ROC AUC change",
        second: f"{second} explains 20% of the estimated ROC AUC change",
        harmless: f"{harmless} drifted 0.5 sd; it explains none of the estimated ROC AUC change",
    }
    for f in out["features"]:
        entry = next((e for e in entries if e["name"] == f["name"]), None)
        if entry is not None:
            f["impact"] = {**entry, "message": messages[f["name"]]}
    out["segments"] = [
        {
            "segment": f"{region}={north}",
            "feature": region,
            "value": north,
            "rows": 1200,
            "reference_rows": 400,
            "share": 0.15,
            "metric": "roc_auc",
            "estimate": "cbpe",
            "reference": 0.86,
            "current": 0.74,
            "change": -0.12,
            "quality": {"missing_rate": 0.0},
            "drift": {"drifted": True, "features": [cause], "p_value": 1e-9},
            "flagged": True,
            "reasons": [f"estimated roc_auc 0.740 is 0.120 below the reference in {region}={north}"],
        },
        {
            "segment": f"{region}=south",
            "feature": region,
            "value": "south",
            "rows": 2100,
            "reference_rows": 700,
            "share": 0.26,
            "metric": "roc_auc",
            "estimate": "cbpe",
            "reference": 0.86,
            "current": 0.85,
            "change": -0.01,
            "quality": {"missing_rate": 0.0},
            "drift": {"drifted": False, "features": [], "p_value": 0.4},
            "flagged": False,
            "reasons": [],
        },
    ]
    out["weak_slices"] = {
        "source": "estimated",
        "metric": "log_loss",
        "overall": 0.42,
        "min_rows": 100,
        "tried": 240,
        "level": 0.05,
        "slices": [
            {
                "features": [region, "loan_purpose"],
                "slice": f"{region}={north} & loan_purpose=business",
                "conditions": [
                    {"feature": region, "value": north},
                    {"feature": "loan_purpose", "value": "business"},
                ],
                "rows": 300,
                "value": 0.91,
                "lower": 0.8,
                "upper": 1.02,
                "gap": 0.49,
                "significant": True,
            },
            {
                "features": ["debt_to_income"],
                "slice": "debt_to_income in (0.5, 0.8]",
                "conditions": [{"feature": "debt_to_income", "low": 0.5, "high": 0.8}],
                "rows": 450,
                "value": 0.55,
                "lower": 0.47,
                "upper": 0.63,
                "gap": 0.13,
                "significant": False,
            },
        ],
    }
    return out
