"""Storing monitor runs: a report becomes one ``monitor_runs`` row and its feature results."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from monitors.models import FeatureResult, MonitorRun
from monitors.report import DriftReport, FeatureDrift


def _feature_row(f: FeatureDrift) -> FeatureResult:
    r = f.as_dict()["result"]
    return FeatureResult(
        feature=f.name,
        kind=f.kind,
        test=r["test"],
        statistic=r["statistic"],
        p_value=r["p_value"],
        adjusted_p_value=r["adjusted_p_value"],
        effect=r["effect"],
        threshold=r["threshold"],
        drifted=bool(r["drifted"]),
    )


def record_run(
    *,
    session: Session,
    model_name: str,
    model_version: int,
    report: DriftReport,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
    duration_s: float | None = None,
    extra: dict[str, Any] | None = None,
) -> MonitorRun:
    """Persist ``report`` (plus ``extra`` keys in its JSON) as a monitor run with one row per feature."""
    run = MonitorRun(
        model_name=model_name,
        model_version=model_version,
        window_start=window_start,
        window_end=window_end,
        rows=report.rows,
        duration_s=duration_s,
        dataset_drifted=report.drifted,
        n_features=report.dataset.n_features,
        n_drifted=report.dataset.n_drifted,
        prediction_drifted=report.prediction.drifted if report.prediction else None,
        multivariate_drifted=report.multivariate.drifted if report.multivariate else None,
        concept_drifted=bool(report.concept_drift["drifted"]) if report.concept_drift else None,
        report={**report.as_dict(), **(extra or {})},
    )
    more = [x for x in (report.prediction, report.multivariate) if x is not None]
    run.features = [_feature_row(f) for f in [*report.features, *more]]
    session.add(run)
    session.flush()
    return run


def list_runs(*, session: Session, model_name: str, limit: int = 50) -> list[MonitorRun]:
    """A model's runs, newest first."""
    stmt = (
        select(MonitorRun)
        .where(MonitorRun.model_name == model_name)
        .order_by(MonitorRun.created_at.desc(), MonitorRun.id.desc())
        .limit(limit)
    )
    return list(session.scalars(stmt))


def latest_run(*, session: Session, model_name: str) -> MonitorRun | None:
    """The newest run of a model, or None."""
    runs = list_runs(session=session, model_name=model_name, limit=1)
    return runs[0] if runs else None


def latest_runs(*, session: Session, model_names: list[str]) -> dict[str, MonitorRun]:
    """The newest run of each of ``model_names`` that has one (one query, whatever the number of models)."""
    if not model_names:
        return {}
    newest = (
        select(
            MonitorRun.id,
            func.row_number()
            .over(
                partition_by=MonitorRun.model_name,
                order_by=(MonitorRun.created_at.desc(), MonitorRun.id.desc()),
            )
            .label("rank"),
        )
        .where(MonitorRun.model_name.in_(model_names))
        .subquery()
    )
    stmt = select(MonitorRun).join(newest, MonitorRun.id == newest.c.id).where(newest.c.rank == 1)
    return {run.model_name: run for run in session.scalars(stmt)}
