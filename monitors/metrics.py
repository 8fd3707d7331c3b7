"""Drift and quality series for Prometheus, read from the latest stored monitor run of each serving model.

The values come from the database (``monitor_runs``), not from a process's memory, so every worker and
replica reports the same numbers and they survive restarts. A periodic job reads them every
``drift_metrics_cache_s`` (half a second at the least; one query for all models) into a cache; a scrape only
reads that cache, so it never waits on the database; when the database cannot be read the last values are
kept. Per model at most ``metrics_max_features`` features are exported (the most severe first, as the report
orders them); beyond that one log line per run names the cap.

Series (one value per model, feature, ...): ``driftwarden_drift_statistic{model,feature,test}``,
``driftwarden_drift_p_value{model,feature}`` (adjusted for multiple testing when the verdict used it),
``driftwarden_drift_effect_size{model,feature}``, ``driftwarden_drift_detected{model,feature}``,
``driftwarden_dataset_drift_share{model}``, ``driftwarden_dataset_drifted{model}``,
``driftwarden_prediction_drift_statistic{model}``, ``driftwarden_prediction_drifted{model}``,
``driftwarden_data_quality_rate{model,feature,check}``,
``driftwarden_model_performance{model,metric,source}`` (source ``estimated`` = CBPE, ``realized`` = labels),
``driftwarden_model_reference_performance{model,metric}``,
``driftwarden_label_coverage_ratio{model}``, ``driftwarden_monitor_last_run_timestamp_seconds{model}``,
``driftwarden_monitor_run_duration_seconds{model}``, ``driftwarden_monitor_window_rows{model}``,
``driftwarden_monitor_window_predictions{model,source}`` (the window's predictions by the source of their log
rows: ``serve``, ``ingest``, ``import``, ``cloudevents``; a source without a prediction in the window has no
series, nor has a run stored before the count).

Per segment of the window (``monitors/segments.py``; a report without segments has none):
``driftwarden_segment_rows{model,segment}`` (the window's rows in it, from its sample's share),
``driftwarden_segment_performance{model,segment,metric,source}`` (``source`` ``realized`` or ``estimated``),
``driftwarden_segment_drifted_features{model,segment}`` and ``driftwarden_segment_flagged{model,segment}``.
The ``segment`` label is bounded: the ``metrics_max_segments`` segments with the most rows keep their name
(cut at :data:`MAX_SEGMENT_LABEL` characters), the rest are summed as ``segment="other"`` (rows, drifted
features, flagged segments; no performance, which does not add up). The segments themselves come from the
reference's levels and the settings' bins, never from the window's values.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from core.cached_metrics import CachedCollector
from core.config import Settings
from core.database import Database
from monitors.flows import serving_models
from monitors.models import MonitorRun
from monitors.service import latest_runs

log = logging.getLogger("driftwarden.monitors.metrics")

NOT_METRICS = {"rows", "label_coverage"}  # keys of a performance dict that are not a metric
OTHER_SEGMENT = "other"  # the label of every segment beyond metrics_max_segments (a name has "=": no clash)
MAX_SEGMENT_LABEL = 128


@dataclass(frozen=True)
class RunView:
    """What the series need from one stored run (read inside the session)."""

    run_id: int
    model_name: str
    created_at: datetime
    duration_s: float | None
    rows: int
    report: dict[str, Any]

    @classmethod
    def of(cls, run: MonitorRun) -> RunView:
        return cls(run.id, run.model_name, run.created_at, run.duration_s, run.rows, dict(run.report))


def read_latest(*, db: Database, only: list[str] | None = None) -> list[RunView]:
    """The latest stored run of each serving model (models without a run are left out)."""
    names = serving_models(db=db, only=only)
    with db.session() as session:
        runs = latest_runs(session=session, model_names=names)
        return [RunView.of(runs[n]) for n in names if n in runs]


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"driftwarden_{name}", doc, labels=labels)


def _num(value: Any) -> float | None:
    """A finite number from the report, or None (the report stores NaN and infinity as null)."""
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) else None


def label_coverage(report: dict[str, Any]) -> float:
    """Labelled rows / window rows (0 when no label has arrived)."""
    window = report.get("window") or {}
    if window.get("rows"):
        return float(window.get("labelled") or 0) / float(window["rows"])
    performance = report.get("performance") or {}
    return float(_num(performance.get("label_coverage")) or 0.0)


def window_sources(report: dict[str, Any]) -> dict[str, float]:
    """The window's predictions by source as the run stored them (empty for a run stored before the count)."""
    found = (report.get("window") or {}).get("rows_by_source") or {}
    return {str(source): n for source, value in sorted(found.items()) if (n := _num(value))}


class DriftFamilies:
    """The gauge families of the drift and quality series, filled run by run."""

    def __init__(self) -> None:
        self.statistic = _gauge(
            "drift_statistic", "Drift statistic of the feature's test.", ["model", "feature", "test"]
        )
        self.p_value = _gauge(
            "drift_p_value", "P-value the drift verdict used (adjusted).", ["model", "feature"]
        )
        self.effect = _gauge(
            "drift_effect_size", "Effect size of the feature's drift test.", ["model", "feature"]
        )
        self.detected = _gauge(
            "drift_detected", "1 if the feature drifted in the latest run.", ["model", "feature"]
        )
        self.share = _gauge(
            "dataset_drift_share", "Drifted features / features in the latest run.", ["model"]
        )
        self.dataset = _gauge("dataset_drifted", "1 if the dataset drifted in the latest run.", ["model"])
        self.pred_stat = _gauge(
            "prediction_drift_statistic", "Drift statistic of the model output.", ["model"]
        )
        self.pred = _gauge(
            "prediction_drifted", "1 if the model output drifted in the latest run.", ["model"]
        )
        self.quality = _gauge(
            "data_quality_rate",
            "Share of window rows failing a data-quality check.",
            ["model", "feature", "check"],
        )
        self.performance = _gauge(
            "model_performance",
            "Model performance on the window: estimated (CBPE, no labels) or realized (labels).",
            ["model", "metric", "source"],
        )
        self.reference = _gauge(
            "model_reference_performance",
            "Model performance on the held-out reference data.",
            ["model", "metric"],
        )
        self.coverage = _gauge("label_coverage_ratio", "Labelled rows / window rows.", ["model"])
        self.last_run = _gauge(
            "monitor_last_run_timestamp_seconds", "Unix time of the latest monitor run.", ["model"]
        )
        self.duration = _gauge(
            "monitor_run_duration_seconds", "Duration of the latest monitor run.", ["model"]
        )
        self.window_rows = _gauge(
            "monitor_window_rows", "Rows in the window of the latest monitor run.", ["model"]
        )
        self.window_sources = _gauge(
            "monitor_window_predictions",
            "Predictions in the window of the latest monitor run by the source of their log rows.",
            ["model", "source"],
        )

        self.segment_rows = _gauge(
            "segment_rows", "Rows of the window in the segment (from its sample).", ["model", "segment"]
        )
        self.segment_performance = _gauge(
            "segment_performance",
            "Model performance on the segment's rows: realized (labels) or estimated (CBPE/DLE).",
            ["model", "segment", "metric", "source"],
        )
        self.segment_drifted = _gauge(
            "segment_drifted_features",
            "Features drifted in the segment against the reference's segment.",
            ["model", "segment"],
        )
        self.segment_flagged = _gauge(
            "segment_flagged",
            "1 if the segment's own change is significant (other: how many).",
            ["model", "segment"],
        )

    def families(self) -> list[GaugeMetricFamily]:
        return list(vars(self).values())

    def add_segments(self, run: RunView, *, max_segments: int) -> None:
        """The segment series of one run: the ``max_segments`` largest segments by name, the rest as other."""
        found = [s for s in run.report.get("segments") or [] if isinstance(s, dict)]
        if not found:
            return
        ranked = sorted(found, key=lambda s: -float(_num(s.get("share")) or 0.0))
        named, rest = ranked[:max_segments], ranked[max_segments:]
        m = run.model_name
        for s in named:
            label = str(s.get("segment"))[:MAX_SEGMENT_LABEL]
            self.segment_rows.add_metric([m, label], round(float(_num(s.get("share")) or 0.0) * run.rows))
            self.segment_drifted.add_metric(
                [m, label], float(len((s.get("drift") or {}).get("features") or []))
            )
            self.segment_flagged.add_metric([m, label], float(bool(s.get("flagged"))))
            value, metric = _num(s.get("current")), s.get("metric")
            if value is not None and metric:
                source = "realized" if s.get("estimate") == "realised" else "estimated"
                self.segment_performance.add_metric([m, label, str(metric), source], value)
        if rest:
            share = sum(float(_num(s.get("share")) or 0.0) for s in rest)
            drifted = sum(len((s.get("drift") or {}).get("features") or []) for s in rest)
            self.segment_rows.add_metric([m, OTHER_SEGMENT], round(share * run.rows))
            self.segment_drifted.add_metric([m, OTHER_SEGMENT], float(drifted))
            self.segment_flagged.add_metric(
                [m, OTHER_SEGMENT], float(sum(bool(s.get("flagged")) for s in rest))
            )

    def add(self, run: RunView, *, max_features: int) -> None:
        """The series of one model's latest run (at most ``max_features`` features)."""
        m, report = run.model_name, run.report
        features = list(report.get("features") or [])[:max_features]
        exported = set()
        for f in features:
            name, r = str(f["name"]), f.get("result") or {}
            exported.add(name)
            if (stat := _num(r.get("statistic"))) is not None:
                self.statistic.add_metric([m, name, str(r.get("test", ""))], stat)
            p = r.get("adjusted_p_value") if r.get("adjusted_p_value") is not None else r.get("p_value")
            if (p := _num(p)) is not None:
                self.p_value.add_metric([m, name], p)
            if (effect := _num(r.get("effect"))) is not None:
                self.effect.add_metric([m, name], effect)
            self.detected.add_metric([m, name], float(bool(f.get("drifted"))))
        dataset = report.get("dataset") or {}
        self.share.add_metric([m], float(_num(dataset.get("share")) or 0.0))
        self.dataset.add_metric([m], float(bool(dataset.get("drifted"))))
        prediction = report.get("prediction")
        if prediction:
            if (stat := _num((prediction.get("result") or {}).get("statistic"))) is not None:
                self.pred_stat.add_metric([m], stat)
            self.pred.add_metric([m], float(bool(prediction.get("drifted"))))
        seen: set[tuple[str, str]] = set()
        for q in report.get("quality") or []:
            key = (str(q.get("feature")), str(q.get("check")))
            if key[0] in exported and key not in seen and (rate := _num(q.get("rate"))) is not None:
                seen.add(key)
                self.quality.add_metric([m, *key], rate)
        for source, part in (("estimated", "estimated_performance"), ("realized", "performance")):
            for metric, value in sorted((report.get(part) or {}).items()):
                if metric not in NOT_METRICS and (v := _num(value)) is not None:
                    self.performance.add_metric([m, metric, source], v)
        for metric, value in sorted((report.get("reference_performance") or {}).items()):
            if metric not in NOT_METRICS and (v := _num(value)) is not None:
                self.reference.add_metric([m, metric], v)
        self.coverage.add_metric([m], label_coverage(report))
        self.last_run.add_metric([m], run.created_at.timestamp())
        if run.duration_s is not None:
            self.duration.add_metric([m], run.duration_s)
        self.window_rows.add_metric([m], float(run.rows))
        for source, n in window_sources(report).items():
            self.window_sources.add_metric([m, source], n)


class DriftCollector(CachedCollector[list[RunView]]):
    """Yields the drift and quality gauges of every serving model's latest run, from a cache.

    :meth:`refresh` (a periodic job, every :meth:`refresh_interval_s`) reads the database; :meth:`collect`
    (a scrape) only reads the cache, so a slow or unreachable database never holds up ``/metrics``.
    """

    what = "drift metrics"

    def __init__(self, *, db: Database, settings: Settings) -> None:
        super().__init__(settings=settings, empty=[])
        self.db = db
        self._capped: dict[str, int] = {}  # model -> run already logged as capped

    def read(self) -> list[RunView]:
        return read_latest(db=self.db, only=self.settings.serve_models or None)

    def runs(self) -> list[RunView]:
        """The cached latest runs (never reads the database)."""
        return self.snapshot()

    def families(self, snapshot: list[RunView], *, now: float) -> list[Metric]:
        cap = self.settings.metrics_max_features
        families = DriftFamilies()
        for run in snapshot:
            n = len(run.report.get("features") or [])
            if n > cap and self._capped.get(run.model_name) != run.run_id:
                self._capped[run.model_name] = run.run_id
                log.warning(
                    "drift metrics: model %s has %d features, exporting the %d most severe of run %d "
                    "(raise DRIFTWARDEN_METRICS_MAX_FEATURES to see all)",
                    run.model_name,
                    n,
                    cap,
                    run.run_id,
                )
            families.add(run, max_features=cap)
            families.add_segments(run, max_segments=self.settings.metrics_max_segments)
        return list(families.families())
