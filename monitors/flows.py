"""Monitor workflows: evaluate a model's serving version on its window, store the run, read runs back.

``run_monitor`` is the one evaluation path (the scheduler, ``POST .../monitors:run`` and
``driftwarden monitor`` all call it): serving version -> its ``profile.json`` -> the model's window
read from the prediction log in chunks -> :func:`monitors.engine.evaluate` -> ``monitor_runs``.
Errors a caller can act on are :class:`MonitorError` subclasses with an HTTP status and a message
naming what is wrong.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import Engine

from core.config import Settings
from core.database import Database, make_engine
from core.durations import in_words
from core.errors import DomainError, Invalid
from core.events import MONITOR_RUN, publish
from core.times import iso_or_none, utc_in_range
from monitors.config import MonitorConfig, config_path, load_config, parse_config, save_config, stored_form
from monitors.engine import evaluate
from monitors.findings import finding_from_dict, headline
from monitors.history import build_history, run_point
from monitors.horizon import run_alpha
from monitors.html import RunInfo, render_html
from monitors.log_window import SketchCache, Window, read_window
from monitors.models import MonitorRun
from monitors.profile import Profile, profile_from_dict
from monitors.report import DriftReport, report_from_dict
from monitors.rows import Predictor
from monitors.service import latest_run, list_runs, prune_models, record_run
from predictions.windows import WindowSpec
from registry.models import ModelVersion
from registry.schema import FeatureKind
from registry.service import (
    count_versions,
    latest_version,
    read_meta,
    read_schema,
    require_model,
    serving_model_names,
    serving_version,
)


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


class EngineUnavailable(MonitorError):
    """The spark engine cannot read the window: the lake or the Spark master (one line naming it)."""

    status_code = 503


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
    """The model's window: its own (``window_rows`` and/or ``window_minutes``, as a whole: a time window
    alone has no row limit), else the server's default."""
    if config.window_rows is not None or config.window_minutes is not None:
        return WindowSpec(rows=config.window_rows, minutes=config.window_minutes, version=version)
    return WindowSpec(
        rows=settings.monitor_window_rows, minutes=settings.monitor_window_minutes, version=version
    )


def interval_of(*, settings: Settings, config: MonitorConfig) -> float:
    """Seconds between the scheduled runs of a model: its own ``interval_s``, never less than the server's
    (a pass evaluates a model at most once)."""
    return max(config.interval_s or 0.0, settings.monitor_interval_s)


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


def explain_run(
    report: DriftReport,
    *,
    version: ModelVersion,
    profile: Profile,
    window: Window,
    config: MonitorConfig,
    every_s: float | None,
) -> DriftReport:
    """Add why the drift matters to a run's report (:func:`monitors.explain.explain`): the version's own model
    or its surrogate answers the attribution, loaded only when a feature drifted."""
    from monitors.explain import explain
    from monitors.predictors import predictor_for

    path = Path(version.path)

    def predictor() -> Predictor | None:
        try:
            schema = read_schema(path=path)
        except (OSError, ValueError):  # a version folder without its contract: the surrogate alone
            schema = None
        return predictor_for(version_dir=path, profile=profile, schema=schema)

    level = run_alpha(alpha=config.alpha, budget=config.false_alarms_per_30d, every_s=every_s)
    return explain(
        report, profile=profile, window=window.sample, predictor=predictor, config=config, level=level
    )


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
    if settings.monitor_engine == "spark":
        window = read_on_spark(
            db=db,
            settings=settings,
            profile=profile,
            model_name=model_name,
            spec=spec,
            config=config,
            now=now,
        )
    else:
        window = read_window(
            engine=window_engine(db=db, settings=settings),
            profile=profile,
            model_name=model_name,
            spec=spec,
            threshold=config.classification_threshold,
            chunk_rows=settings.monitor_chunk_rows,
            now=now,
            cache=sketch_cache(db=db, settings=settings),
            sample_rows=settings.monitor_sample_rows,
        )
    if window.rows < settings.monitor_min_rows:
        raise EmptyWindow(
            f"the window of {model_name}:{version.version} ({spec.describe()}) holds {window.rows} answered "
            f"predictions, fewer than the minimum of {settings.monitor_min_rows}"
        )
    every_s = interval_of(settings=settings, config=config)
    report = evaluate_window(
        Prepared(version, profile, config, where), window, model_name=model_name, every_s=every_s
    )
    explain_run(report, version=version, profile=profile, window=window, config=config, every_s=every_s)
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


def read_on_spark(
    *,
    db: Database,
    settings: Settings,
    profile: Profile,
    model_name: str,
    spec: WindowSpec,
    config: MonitorConfig,
    now: datetime | None,
) -> Window:
    """The window read from the lake (``lake_url``) on the Spark master of ``spark_master``, whole hours'
    counts cached in the control database; the lake or the master failing is one line naming it."""
    if not settings.lake_url:
        raise EngineUnavailable("monitor_engine=spark reads the lake: set lake_url (DRIFTWARDEN_LAKE_URL)")
    from monitors.spark.session import spark_failure, spark_session
    from monitors.spark.window import read_lake_window

    try:
        return read_lake_window(
            spark=spark_session(settings.spark_master),
            lake=settings.lake_url,
            profile=profile,
            model_name=model_name,
            spec=spec,
            threshold=config.classification_threshold,
            now=now,
            cache=db.engine,
            chunk_rows=settings.monitor_chunk_rows,
            sample_rows=settings.monitor_sample_rows,
        )
    except DomainError as exc:
        raise EngineUnavailable(str(exc)) from None
    except Exception as exc:
        reason = spark_failure(exc)
        if reason is None:
            raise
        raise EngineUnavailable(f"the Spark job on {settings.spark_master} failed: {reason}") from None


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
        "window_start": iso_or_none(run.window_start),
        "window_end": iso_or_none(run.window_end),
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


def history(
    *,
    db: Database,
    model_name: str,
    limit: int = 50,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """A model's runs, newest first, stored in [``since``, ``until``), one page of ``limit`` after
    ``cursor``; ``next_cursor`` continues it (None: the last page)."""
    if since is not None and until is not None and since >= until:
        raise Invalid(f"since ({since.isoformat()}) must be before until ({until.isoformat()})")
    before = None if cursor is None else decode_cursor(cursor)
    _registered(db=db, model_name=model_name)
    with db.session() as session:
        found = list_runs(
            session=session, model_name=model_name, limit=limit + 1, since=since, until=until, before=before
        )
        page = found[:limit]
        runs = [run_summary(r) for r in page]
        more = len(found) > limit
        next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if more and page else None
    return {"model_name": model_name, "runs": runs, "next_cursor": next_cursor}


def encode_cursor(at: datetime, run_id: int) -> str:
    """The opaque page cursor of ``history``: the last run's time and id."""
    raw = json.dumps({"t": at.astimezone(UTC).isoformat(), "id": run_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """A cursor ``history`` gave back into its run's time and id; ``Invalid`` naming ``cursor`` otherwise."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        given, run_id = datetime.fromisoformat(raw["t"]), raw["id"]
        at = utc_in_range(given) if given.tzinfo is not None else None
        if at is None or not isinstance(run_id, int) or isinstance(run_id, bool) or not 0 < run_id < 2**63:
            raise ValueError("not a cursor")
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
        raise Invalid(
            "cursor: not a page cursor of this route; pass the next_cursor of the previous answer as it is"
        ) from None
    return at, run_id


HISTORY_RUNS = 200
"""The most runs a report's history charts (the newest in its period)."""


def report_html(
    *,
    db: Database,
    model_name: str,
    settings: Settings | None = None,
    since: timedelta | None = None,
    extra: list[dict[str, Any]] | None = None,
    now: datetime | None = None,
) -> str:
    """A model's HTML report for a period: its newest run in the last ``since`` (None: ever) as the report,
    the period's runs (the newest :data:`HISTORY_RUNS`) as its history; the headline counts ``extra``
    findings too; ``settings`` give the model's false-alarm budget the page explains its level by."""
    now = now or datetime.now(UTC)
    _registered(db=db, model_name=model_name)
    with db.session() as session:
        runs = list_runs(
            session=session,
            model_name=model_name,
            limit=HISTORY_RUNS,
            since=None if since is None else now - since,
        )
        points = [
            run_point(
                run_id=r.id,
                created_at=r.created_at,
                window_start=r.window_start,
                window_end=r.window_end,
                report=dict(r.report),
            )
            for r in runs
        ]
        newest = runs[0] if runs else None
        doc = run_document(newest) if newest is not None else None
        stored = (newest.window_start, newest.window_end) if newest is not None else (None, None)
    if doc is None:
        period = " yet" if since is None else f" in the last {in_words(since.total_seconds())}"
        raise NoRuns(
            f"model '{model_name}' has no monitor run{period}; POST /v1/models/{model_name}/monitors:run "
            f"(or `driftwarden monitor --once --model {model_name}`) evaluates it now"
        )
    budget = alpha = None
    if settings is not None:
        try:
            config = load_config(registry=settings.registry_path, model_name=model_name)
            budget, alpha = config.false_alarms_per_30d, config.alpha
        except (OSError, ValueError):  # an unreadable config: the page says what the report alone knows
            pass
    run = RunInfo(
        model_name=model_name,
        model_version=doc["model_version"],
        run_id=doc["run_id"],
        created_at=datetime.fromisoformat(doc["created_at"]),
        window_start=stored[0],
        window_end=stored[1],
        backfill=bool(doc["report"].get("backfill")),
        budget=budget,
        alpha=alpha,
    )
    report = report_from_dict(doc["report"])
    summary = headline(report, extra=[finding_from_dict(f) for f in extra or ()])
    title = f"Drift report: {model_name} v{doc['model_version']}"
    return render_html(report, title=title, summary=summary, history=build_history(points), run=run, now=now)


def latest_html(
    *,
    db: Database,
    model_name: str,
    extra: list[dict[str, Any]] | None = None,
    settings: Settings | None = None,
) -> str:
    """The newest run of a model as an HTML report, with the history of its stored runs (its headline counts
    ``extra`` findings too)."""
    return report_html(db=db, model_name=model_name, settings=settings, extra=extra)


def settings_document(*, db: Database, settings: Settings, model_name: str) -> dict[str, Any]:
    """A model's monitor settings: what its ``monitor.json`` holds, every setting in effect, its window."""
    with db.session() as session:
        require_model(session=session, model_name=model_name)
    where = config_path(registry=settings.registry_path, model_name=model_name)
    try:
        config = load_config(registry=settings.registry_path, model_name=model_name)
    except ValueError as exc:
        raise InvalidConfig(f"the monitor config of '{model_name}' at {where} is invalid: {exc}") from None
    return _document(settings=settings, model_name=model_name, config=config)


def _document(*, settings: Settings, model_name: str, config: MonitorConfig) -> dict[str, Any]:
    own = config.window_rows is not None or config.window_minutes is not None
    spec = window_spec(settings=settings, config=config, version=None)
    return {
        "model_name": model_name,
        "stored": stored_form(config),
        "settings": config.model_dump(mode="json"),
        "window": {
            "rows": spec.rows,
            "minutes": spec.minutes,
            "source": "model" if own else "server default",
            "describe": spec.describe(),
        },
        "interval_s": interval_of(settings=settings, config=config),
    }


def check_features(*, db: Database, model_name: str, config: MonitorConfig, where: str = "") -> None:
    """Every feature the settings name (``features``, ``segments``) is a feature of the model's contract
    (serving, else newest version), and segment bins are given for numeric features only."""
    if not config.features and not config.segments:
        return
    with db.session() as session:
        require_model(session=session, model_name=model_name)
        row = serving_version(session=session, model_name=model_name) or latest_version(
            session=session, model_name=model_name
        )
        path = None if row is None else (Path(row.path), row.version)
    if path is None:
        return
    try:
        schema = read_schema(path=path[0])
    except (OSError, ValueError, KeyError):  # the version's files are gone: nothing to check against
        return
    features = schema.feature_names
    for name in config.features:
        if name not in features:
            raise Invalid(
                f"{where}features.{name}: {name!r} is not a feature of model {model_name!r} "
                f"(version {path[1]} has {', '.join(features)})"
            )
    kinds = {spec.name: spec.kind for spec in schema.features}
    for i, segment in enumerate(config.segments):
        if segment.feature not in kinds:
            raise Invalid(
                f"{where}segments[{i}].feature: {segment.feature!r} is not a feature of model {model_name!r} "
                f"(version {path[1]} has {', '.join(features)})"
            )
        if segment.bins is not None and kinds[segment.feature] is not FeatureKind.NUMERIC:
            raise Invalid(
                f"{where}segments[{i}].bins: {segment.feature!r} is categorical: its segments are its "
                "levels, give bins for a numeric feature only"
            )


def put_settings(
    *,
    db: Database,
    settings: Settings,
    model_name: str,
    data: Any,
    name: Callable[[str], str] = lambda field: field,
) -> dict[str, Any]:
    """Replace a model's monitor settings with ``data`` after checking them (``{}``: back to the defaults);
    nothing is written when a check fails (``name`` words a field in the refusal)."""
    with db.session() as session:
        require_model(session=session, model_name=model_name)
    config = parse_config(data, name=name)
    check_features(db=db, model_name=model_name, config=config)
    save_config(registry=settings.registry_path, model_name=model_name, config=config)
    return _document(settings=settings, model_name=model_name, config=config)
