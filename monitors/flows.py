"""Monitor workflows: evaluate a model's serving version on its window, store the run, read runs back.

``run_monitor`` is the one evaluation path (the scheduler, ``POST .../monitors:run`` and
``driftwarden monitor`` all call it): serving version -> its ``profile.json`` -> the model's window
read from the prediction log in chunks -> :func:`monitors.engine.evaluate` -> ``monitor_runs``.
Errors a caller can act on are :class:`MonitorError` subclasses with an HTTP status and a message
naming what is wrong.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import Engine

from core.config import Settings
from core.database import Database, make_engine
from core.errors import DomainError
from core.events import MONITOR_RUN, publish
from monitors.config import MonitorConfig, config_path, load_config
from monitors.engine import evaluate
from monitors.findings import finding_from_dict, headline
from monitors.html import render_html
from monitors.log_window import SketchCache, Window, read_window
from monitors.models import MonitorRun
from monitors.profile import Profile, profile_from_dict
from monitors.report import DriftReport, report_from_dict
from monitors.service import latest_run, list_runs, prune_models, record_run
from predictions.windows import WindowSpec
from registry.models import ModelVersion
from registry.service import count_versions, read_meta, serving_model_names, serving_version


class MonitorError(DomainError):
    """A monitor request that cannot be answered; ``status_code`` is the HTTP status to answer with."""

    status_code = 409


class UnknownModel(MonitorError):
    status_code = 404


class NoServingVersion(MonitorError):
    status_code = 409


class NoProfile(MonitorError):
    status_code = 409


class EmptyWindow(MonitorError):
    status_code = 409


class NoRuns(MonitorError):
    status_code = 404


class InvalidConfig(MonitorError):
    status_code = 409


@dataclass
class Outcome:
    """One evaluation: the stored run, its window and its report."""

    run_id: int
    model_name: str
    model_version: int
    window: Window
    report: DriftReport

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "model_name": self.model_name,
            "model_version": self.model_version,
            "rows": self.window.rows,
            "dataset_drifted": self.report.drifted,
            "drifted_features": [f.name for f in self.report.features if f.drifted],
        }


_profiles: dict[tuple[str, float], Profile] = {}
_profiles_lock = threading.Lock()


def load_profile(*, path: Path) -> Profile:
    """The parsed profile of the version at ``path`` (cached: versions are immutable)."""
    file = path / "driftwarden" / "profile.json"
    key = (str(file), file.stat().st_mtime)
    with _profiles_lock:
        cached = _profiles.get(key)
    if cached is None:
        cached = profile_from_dict(read_meta(path=path, name="profile"))
        with _profiles_lock:
            if len(_profiles) > 32:
                _profiles.clear()
            _profiles[key] = cached
    return cached


_read_engines: dict[str, Engine] = {}
_read_engines_lock = threading.Lock()


def window_engine(*, db: Database, settings: Settings) -> Engine:
    """Where windows are read: the read replica of ``monitor_read_database_url`` (one engine per URL, kept
    for the process), else the database runs are stored in."""
    url = settings.monitor_read_database_url
    if url is None:
        return db.engine
    key = url.get_secret_value()
    with _read_engines_lock:
        engine = _read_engines.get(key)
        if engine is None:
            engine = _read_engines[key] = make_engine(key)
        return engine


def sketch_cache(*, db: Database, settings: Settings) -> SketchCache | None:
    """The sketch cache of the monitor runs (on the database runs are stored in), None when switched off or
    on SQLite (an embedded log is read whole: the cache pays on PostgreSQL's large logs)."""
    if not settings.monitor_sketch_cache or db.engine.dialect.name != "postgresql":
        return None
    return SketchCache(engine=db.engine, block_ids=settings.monitor_sketch_block_ids)


def window_spec(*, settings: Settings, config: MonitorConfig, version: int | None) -> WindowSpec:
    """The model's window: its own config first, then the server defaults."""
    rows = config.window_rows or settings.monitor_window_rows
    minutes = config.window_minutes or settings.monitor_window_minutes
    return WindowSpec(rows=rows, minutes=minutes, version=version)


def _known(*, db: Database, model_name: str) -> ModelVersion:
    """The serving version of a registered model; raises when unknown or not serving."""
    with db.session() as session:
        row = serving_version(session=session, model_name=model_name)
        if row is not None:
            return row
        registered = count_versions(session=session, model_name=model_name)
    if not registered:
        raise UnknownModel(f"unknown model '{model_name}': it has no registered version")
    raise NoServingVersion(
        f"model '{model_name}' has no serving version ({registered} registered, none promoted); "
        "promote one to monitor it"
    )


class Prepared(NamedTuple):
    """What an evaluation of a model needs besides its window: the serving version, its reference profile,
    the model's monitor config and where that config lives."""

    version: ModelVersion
    profile: Profile
    config: MonitorConfig
    where: Path


def prepare(*, db: Database, settings: Settings, model_name: str) -> Prepared:
    """The serving version of ``model_name``, its profile and its monitor config (MonitorError subclasses
    name what is missing or unreadable)."""
    version = _known(db=db, model_name=model_name)
    path = Path(version.path)
    try:
        profile = load_profile(path=path)
    except FileNotFoundError:
        raise NoProfile(
            f"{model_name}:{version.version} has no reference profile "
            f"at {path / 'driftwarden' / 'profile.json'}"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise NoProfile(
            f"the reference profile of {model_name}:{version.version} is unreadable: {exc}"
        ) from None
    where = config_path(registry=settings.registry_path, model_name=model_name)
    try:
        config = load_config(registry=settings.registry_path, model_name=model_name)
    except ValueError as exc:  # JSON or validation errors
        raise InvalidConfig(f"the monitor config of '{model_name}' at {where} is invalid: {exc}") from None
    return Prepared(version, profile, config, where)


def evaluate_window(
    prepared: Prepared, window: Window, *, model_name: str, every_s: float | None
) -> DriftReport:
    """The engine's report on ``window`` of runs every ``every_s`` seconds (a config the engine refuses is an
    InvalidConfig naming its file)."""
    try:
        return evaluate(
            profile=prepared.profile, sketch=window.sketch, config=prepared.config, every_s=every_s
        )
    except ValueError as exc:  # e.g. an unknown test name in the config
        raise InvalidConfig(
            f"the monitor config of '{model_name}' at {prepared.where} is invalid: {exc}"
        ) from None


def run_monitor(
    *,
    db: Database,
    settings: Settings,
    model_name: str,
    now: datetime | None = None,
) -> Outcome:
    """Evaluate the serving version of ``model_name`` on its window and store the run."""
    started = time.perf_counter()
    version, profile, config, where = prepare(db=db, settings=settings, model_name=model_name)
    spec = window_spec(settings=settings, config=config, version=version.version)
    window = read_window(
        engine=window_engine(db=db, settings=settings),
        profile=profile,
        model_name=model_name,
        spec=spec,
        threshold=config.classification_threshold,
        chunk_rows=settings.monitor_chunk_rows,
        now=now,
        cache=sketch_cache(db=db, settings=settings),
    )
    if window.rows < settings.monitor_min_rows:
        raise EmptyWindow(
            f"the window of {model_name}:{version.version} ({spec.describe()}) holds {window.rows} answered "
            f"predictions, fewer than the minimum of {settings.monitor_min_rows}"
        )
    report = evaluate_window(
        Prepared(version, profile, config, where),
        window,
        model_name=model_name,
        every_s=settings.monitor_interval_s,
    )
    with db.session() as session:
        run = record_run(
            session=session,
            model_name=model_name,
            model_version=version.version,
            report=report,
            window_start=window.start,
            window_end=window.end,
            duration_s=time.perf_counter() - started,
            extra={"window": window.as_dict()},
        )
        run_id = run.id
    outcome = Outcome(
        run_id=run_id, model_name=model_name, model_version=version.version, window=window, report=report
    )
    publish(MONITOR_RUN, db=db, settings=settings, outcome=outcome)  # the alert rules act on it (alerts/)
    return outcome


def serving_models(*, db: Database, only: list[str] | None = None) -> list[str]:
    """Names of models that have a serving version (optionally only those in ``only``)."""
    with db.session() as session:
        names = serving_model_names(session=session)
    return [n for n in names if not only or n in only]


def prune_sketches(*, db: Database, keep: list[str]) -> int:
    """Delete the cached window sketches of every model not in ``keep`` (those no longer served)."""
    with db.session() as session:
        return prune_models(session=session, keep=keep)


def is_due(*, db: Database, model_name: str, interval_s: float, now: datetime | None = None) -> bool:
    """True when the model's newest run STARTED at least ``interval_s`` ago (give or take 10 %), so that a
    scheduler sharing the database with another (replicas, a separate ``driftwarden monitor``) does not
    repeat it. Measured from the run's start (stored time minus its duration), as the schedulers measure
    their passes: a slow evaluation must not make the next pass skip the model."""
    now = now or datetime.now(UTC)
    with db.session() as session:
        run = latest_run(session=session, model_name=model_name)
        if run is None:
            return True
        started = run.created_at - timedelta(seconds=run.duration_s or 0.0)
    return now - started >= timedelta(seconds=interval_s * 0.9)


def run_document(run: MonitorRun) -> dict[str, Any]:
    """A stored run as the API shows it: run metadata and the full report."""
    report = dict(run.report)
    window = report.pop("window", None)
    return {
        "run_id": run.id,
        "model_name": run.model_name,
        "model_version": run.model_version,
        "created_at": run.created_at.isoformat(),
        "window": window,
        "drifted": run.dataset_drifted,
        "report": report,
    }


def run_summary(run: MonitorRun) -> dict[str, Any]:
    """One line of a model's history."""
    return {
        "run_id": run.id,
        "model_version": run.model_version,
        "created_at": run.created_at.isoformat(),
        "window_start": run.window_start.isoformat() if run.window_start else None,
        "window_end": run.window_end.isoformat() if run.window_end else None,
        "rows": run.rows,
        "rows_by_source": (run.report.get("window") or {}).get("rows_by_source"),  # None: stored before it
        "duration_s": run.duration_s,
        "dataset_drifted": run.dataset_drifted,
        "n_features": run.n_features,
        "n_drifted": run.n_drifted,
        "drifted_features": [f["name"] for f in run.report.get("features", []) if f.get("drifted")],
        "prediction_drifted": run.prediction_drifted,
        "multivariate_drifted": run.multivariate_drifted,
        "concept_drifted": run.concept_drifted,
        "backfill": bool(run.report.get("backfill")),  # a past window evaluated later, stored at its end
    }


def _registered(*, db: Database, model_name: str) -> None:
    with db.session() as session:
        registered = count_versions(session=session, model_name=model_name)
    if not registered:
        raise UnknownModel(f"unknown model '{model_name}': it has no registered version")


def latest_document(
    *, db: Database, model_name: str, extra: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The newest run of a model as JSON with its headline over every finding (and ``extra`` ones, e.g.
    firing alerts); raises when the model is unknown or never evaluated."""
    _registered(db=db, model_name=model_name)
    with db.session() as session:
        run = latest_run(session=session, model_name=model_name)
        if run is None:
            raise NoRuns(
                f"model '{model_name}' has no monitor run yet; POST /v1/models/{model_name}/monitors:run "
                "evaluates it now"
            )
        doc = run_document(run)
    summary = headline(report_from_dict(doc["report"]), extra=[finding_from_dict(f) for f in extra or ()])
    return {**doc, "headline": summary.as_dict()}


def history(*, db: Database, model_name: str, limit: int = 50) -> dict[str, Any]:
    """A model's runs, newest first."""
    _registered(db=db, model_name=model_name)
    with db.session() as session:
        runs = [run_summary(r) for r in list_runs(session=session, model_name=model_name, limit=limit)]
    return {"model_name": model_name, "runs": runs}


def latest_html(*, db: Database, model_name: str, extra: list[dict[str, Any]] | None = None) -> str:
    """The newest run of a model as an HTML report (its headline counts ``extra`` findings too)."""
    doc = latest_document(db=db, model_name=model_name, extra=extra)
    window = doc.get("window") or {}
    title = (
        f"Drift report: {model_name} v{doc['model_version']}, run {doc['run_id']} at {doc['created_at']}"
        + (f" ({window.get('start')} to {window.get('end')})" if window.get("start") else "")
    )
    report = report_from_dict(doc["report"])
    summary = headline(report, extra=[finding_from_dict(f) for f in extra or ()])
    return render_html(report, title=title, summary=summary)
