"""``driftwarden alerts backtest``: what a backtest of a model's alert rules needs, read from the registry,
the model's monitor config, its reference rows and the rules; then :func:`alerts.backtest.backtest`.

The version backtested is the serving one (else the newest). Its traffic is resampled from its reference
rows: the file its lineage names (``reference`` of a version registered by ``driftwarden models import``,
``data_source`` of a trained one), the model's answers from the file's prediction column (a model served
elsewhere) or from the version's SavedModel, the labels from the contract's target column. Half of those
rows (even positions) are profiled as the version was, the traffic is drawn from the other half
(:func:`split_reference`): a window never holds a row of the profile it is compared with; its numeric
features' tails are drawn from a tail fit of that half (:func:`alerts.backtest_traffic.fit_tails`), so the
traffic leaves the reference's range as real traffic does. The rules are
the model's (its own, the ``*`` ones, else the defaults) or those a rules file gives it; only the rules a
monitor run evaluates, and enabled, take part. Every refusal is a :class:`core.errors.DomainError` (one
line, exit 2): nothing is written anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from alerts import service
from alerts.backtest import BacktestResult, Judge, Plan, Progress, Setup, backtest
from alerts.backtest_traffic import Pool, Shift, ShiftKind, fit_tails
from alerts.config import WILDCARD, load_rules_file
from alerts.flows import check_rule_features, check_rule_sets
from alerts.specs import MONITOR_KINDS, RuleSpec
from core.bounds import (
    BACKTEST_MAX_COUNTED_ROWS,
    BACKTEST_MAX_RATE,
    BACKTEST_MAX_RUNS,
    BACKTEST_MAX_WINDOW,
    MAX_PROCESSES,
    MAX_SEED,
)
from core.config import Settings
from core.database import Database
from core.durations import require_duration
from core.errors import Invalid, NotFound
from core.tabular import Columns, as_float, read_table
from monitors.config import MonitorConfig, load_config
from monitors.flows import load_profile
from monitors.profile import Profile, build_reference_profile, profile_from_dict
from registry.models import ModelVersion
from registry.names import check_name
from registry.schema import FeatureKind, ModelSchema, Task, label_codes
from registry.service import latest_version, read_schema, serving_version

DEFAULT_RATE = 100.0  # rows a minute
DEFAULT_DAYS = 30.0
DEFAULT_INTERVAL = "5m"
MIN_HALF_ROWS = 500


@dataclass(frozen=True)
class BacktestRequest:
    """What ``driftwarden alerts backtest`` was asked."""

    model_name: str
    days: float = DEFAULT_DAYS
    interval: str = DEFAULT_INTERVAL
    window: int | None = None  # None: the model's monitor window
    rules_file: Path | None = None
    rate: float = DEFAULT_RATE
    shifts: tuple[str, ...] = ()  # () : every shift the model allows
    feature: str | None = None  # the numeric feature of the mean shifts (None: the contract's first)
    category: str | None = None  # the categorical feature of the new category (None: the first)
    seed: int = 0
    workers: int = 1


@dataclass(frozen=True)
class _Version:
    """The version backtested: its row, contract, profile and the model's monitor config."""

    row: ModelVersion
    schema: ModelSchema
    profile: Profile
    config: MonitorConfig

    @property
    def label(self) -> str:
        return f"{self.row.model_name}:{self.row.version}"


def run_backtest(
    *, db: Database, settings: Settings, request: BacktestRequest, progress: Progress | None = None
) -> BacktestResult:
    """Prepare the backtest (every check first) and run it."""
    setup, shifts = prepare(db=db, settings=settings, request=request)
    return backtest(setup=setup, shifts=shifts, workers=request.workers, progress=progress)


def prepare(*, db: Database, settings: Settings, request: BacktestRequest) -> tuple[Setup, list[Shift]]:
    """The backtest's setup and shifts; a DomainError names the first thing that is wrong."""
    check_name(request.model_name, given_as="--model")
    version = _version(db=db, settings=settings, model_name=request.model_name)
    plan = _plan(request, settings=settings, config=version.config)
    rules = _rules(db=db, request=request)
    profile, pool = split_reference(_pool(version), version.schema)
    every_s = require_duration(request.interval, where="--interval").total_seconds()
    judge = Judge(profile, version.config, tuple(rules), request.model_name, every_s)
    return Setup(judge=judge, pool=pool, plan=plan), _shifts(request, version.schema, pool)


def split_reference(pool: Pool, schema: ModelSchema) -> tuple[Profile, Pool]:
    """The reference's rows at even positions profiled as the version's were, those at odd positions the
    traffic: no window ever holds a row of the profile, as fresh production traffic does not (resampling the
    profiled rows themselves would hide the reference's own sampling noise from every test)."""
    n = pool.rows
    if n < 2 * MIN_HALF_ROWS:
        raise Invalid(
            f"the reference has {n} rows: a backtest profiles half of them and resamples the other half, "
            f"at least {MIN_HALF_ROWS} each"
        )
    profiled, drawn = np.arange(0, n, 2), np.arange(1, n, 2)

    def half(index: np.ndarray) -> Pool:
        labels = None if pool.labels is None else pool.labels[index]
        columns = {name: values[index] for name, values in pool.columns.items()}
        return Pool(columns=columns, predictions=pool.predictions[index], labels=labels, task=pool.task)

    ref, traffic = half(profiled), half(drawn)
    built = build_reference_profile(ref.columns, schema, predictions=ref.predictions, labels=ref.labels)
    numeric = [f.name for f in schema.features if f.kind is FeatureKind.NUMERIC]
    return profile_from_dict(built), replace(traffic, tails=fit_tails(traffic.columns, numeric))


def _version(*, db: Database, settings: Settings, model_name: str) -> _Version:
    """The serving (else the newest) version, its contract, its profile and the model's monitor config."""
    with db.session() as session:
        row = serving_version(session=session, model_name=model_name) or latest_version(
            session=session, model_name=model_name
        )
    if row is None:
        raise NotFound(f"unknown model {model_name!r}: it has no registered version")
    path = Path(row.path)
    try:
        schema = read_schema(path=path)
        profile = load_profile(path=path)
    except FileNotFoundError as exc:
        raise Invalid(f"{model_name}:{row.version} lacks {exc.filename}: its files are gone") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise Invalid(f"the documents of {model_name}:{row.version} are unreadable: {exc}") from None
    try:
        config = load_config(registry=settings.registry_path, model_name=model_name)
    except ValueError as exc:
        raise Invalid(f"the monitor config of {model_name!r} is invalid: {exc}") from None
    return _Version(row=row, schema=schema, profile=profile, config=config)


def _plan(request: BacktestRequest, *, settings: Settings, config: MonitorConfig) -> Plan:
    """The runs asked for: window, rows per run, number of runs, each bound (``core.bounds``) checked before
    any work starts."""
    interval = require_duration(request.interval, where="--interval").total_seconds()
    if not 0 <= request.seed <= MAX_SEED:
        raise Invalid(f"--seed {request.seed}: a seed is a whole number from 0 to {MAX_SEED}")
    if not 1 <= request.workers <= MAX_PROCESSES:
        raise Invalid(
            f"--workers {request.workers}: from 1 to {MAX_PROCESSES} processes on this machine (4 per CPU, "
            "at most 64)"
        )
    if not (request.days > 0 and np.isfinite(request.days)):
        raise Invalid(f"--days: {request.days:g} must be a number of days above 0")
    if not (0 < request.rate <= BACKTEST_MAX_RATE):
        raise Invalid(
            f"--rate: {request.rate:g} must be a number of rows a minute above 0 and at most "
            f"{BACKTEST_MAX_RATE:,.0f}"
        )
    step = round(interval / 60.0 * request.rate)
    if step < 1:
        raise Invalid(
            f"--interval {request.interval} at --rate {request.rate:g} rows a minute adds no row per run"
        )
    runs_asked = request.days * 86_400 // interval  # a float: no overflow before the check
    if not 1 <= runs_asked <= BACKTEST_MAX_RUNS:
        raise Invalid(
            f"--days {request.days:g} at --interval {request.interval} makes {runs_asked:,.0f} runs "
            f"(1 to {BACKTEST_MAX_RUNS:,})"
        )
    runs = int(runs_asked)
    window = request.window or config.window_rows or settings.monitor_window_rows
    if window is None:
        raise Invalid("the model's window has no row limit (a window of minutes): give --window N")
    given = "--window" if request.window else "the model's window"
    if window < settings.monitor_min_rows:
        raise Invalid(f"{given} {window}: a monitor runs on at least {settings.monitor_min_rows} rows")
    if window > BACKTEST_MAX_WINDOW:
        raise Invalid(
            f"{given} {window:,} rows: a backtest holds at most {BACKTEST_MAX_WINDOW:,} rows in its window "
            "(give a smaller --window)"
        )
    counted = window + runs * min(step, window)
    if counted > BACKTEST_MAX_COUNTED_ROWS:
        raise Invalid(
            f"{runs:,} runs of {min(step, window):,} new rows (--rate {request.rate:g} a minute every "
            f"--interval {request.interval}, window {window:,}) draw {counted:,} rows: at most "
            f"{BACKTEST_MAX_COUNTED_ROWS:,} (lower --rate, --days or --window)"
        )
    days = runs * interval / 86_400
    return Plan(
        window=window,
        step=step,
        runs=runs,
        days=days,
        rate=request.rate,
        seed=request.seed,
        threshold=config.classification_threshold,
    )


def _rules(*, db: Database, request: BacktestRequest) -> list[RuleSpec]:
    """The enabled monitor-run rules of the model, from the rules file when one is given."""
    name = request.model_name
    with db.session() as session:
        if request.rules_file is None:
            specs = service.effective_rules(session=session, model_name=name).rules
        else:
            where = str(request.rules_file)
            rule_sets = load_rules_file(request.rules_file)
            check_rule_sets(session=session, rule_sets=rule_sets, where=where)
            key = name if name in rule_sets else WILDCARD
            if key not in rule_sets:
                raise Invalid(f"{where}: no rules for model {name!r} nor for '*'")
            specs = rule_sets[key]
            check_rule_features(session=session, model_name=name, specs=specs, where=f"{where}: models.{key}")
    chosen = [spec for spec in specs if spec.enabled and spec.kind in MONITOR_KINDS]
    if not chosen:
        raise Invalid(f"model {name!r} has no enabled rule that a monitor run evaluates: nothing to backtest")
    return chosen


def _pool(version: _Version) -> Pool:
    """The reference rows of the version: features, the model's answers and the labels."""
    table, where = _reference(version)
    schema = version.schema
    missing = [name for name in schema.feature_names if name not in table]
    if missing:
        raise Invalid(f"the reference {where} of {version.label} lacks the feature(s) {', '.join(missing)}")
    columns = {name: np.asarray(table[name]) for name in schema.feature_names}
    predictions = _answers(version, table, columns, where)
    return Pool(columns=columns, predictions=predictions, labels=_labels(schema, table), task=schema.kind)


def _reference(version: _Version) -> tuple[Columns, str]:
    """The rows the version was registered with (a reference) or trained on, as its lineage names them."""
    lineage = version.row.lineage or {}
    where = lineage.get("reference") or lineage.get("data_source")
    if not where:
        raise Invalid(
            f"{version.label} has no reference to resample: its lineage names no reference or training data "
            "(register it with `driftwarden models import --reference FILE`)"
        )
    if not Path(where).is_file():
        raise Invalid(f"the reference of {version.label}, {where}, is gone: nothing to resample")
    table = read_table(where)
    if not table or not len(next(iter(table.values()))):
        raise Invalid(f"the reference of {version.label}, {where}, has no rows")
    return table, str(where)


def _answers(version: _Version, table: Columns, columns: Columns, where: str) -> np.ndarray:
    """The model's answers on the reference rows: its prediction column, else its SavedModel's."""
    from training.imports import read_prediction_column  # one reading of a prediction column

    column = (version.row.lineage or {}).get("prediction_column")
    if column:
        raw = read_prediction_column(table, str(column), Path(where))
        binary_pair = version.schema.kind is Task.BINARY and raw.ndim == 2
        return raw[:, 1] if binary_pair else raw
    path = Path(version.row.path)
    if not (path / "saved_model.pb").is_file():
        raise Invalid(
            f"{version.label} has neither a prediction column nor a SavedModel to answer its reference"
        )
    from training.retraining.job import (
        score_version,  # the version's answers, as the validation gate scores it
    )

    return score_version(path, version.schema, columns)


def _labels(schema: ModelSchema, table: Columns) -> np.ndarray | None:
    """The contract's target as labels (0/1, class indexes, values; NaN unknown), None without it."""
    if not schema.target or schema.target not in table:
        return None
    target = np.asarray(table[schema.target])
    if schema.kind is Task.MULTICLASS:
        return label_codes(target, schema.classes)
    return as_float(target)


def _shifts(request: BacktestRequest, schema: ModelSchema, pool: Pool) -> list[Shift]:
    """The shifts asked for (every one the model allows by default), each with its feature."""
    kinds = {
        FeatureKind.NUMERIC: [f.name for f in schema.features if f.kind is FeatureKind.NUMERIC],
        FeatureKind.CATEGORICAL: [f.name for f in schema.features if f.kind is FeatureKind.CATEGORICAL],
    }
    numeric = _feature(request.feature, kinds[FeatureKind.NUMERIC], option="--feature", kind="numeric")
    category = _feature(
        request.category, kinds[FeatureKind.CATEGORICAL], option="--category", kind="categorical"
    )
    sd = None if numeric is None else pool.sd(numeric)
    allowed: dict[ShiftKind, Shift | None] = {
        ShiftKind.ABRUPT_MEAN: None if sd is None else Shift(ShiftKind.ABRUPT_MEAN, numeric, sd),
        ShiftKind.GRADUAL_MEAN: None if sd is None else Shift(ShiftKind.GRADUAL_MEAN, numeric, sd),
        ShiftKind.NEW_CATEGORY: None if category is None else Shift(ShiftKind.NEW_CATEGORY, category),
        ShiftKind.PERFORMANCE_DROP: None if pool.labels is None else Shift(ShiftKind.PERFORMANCE_DROP),
    }
    if not request.shifts:
        return [s for s in allowed.values() if s is not None]
    out = []
    for name in dict.fromkeys(request.shifts):
        try:
            kind = ShiftKind(name)
        except ValueError:
            raise Invalid(f"--shift {name!r}: not a shift; choose from {', '.join(ShiftKind)}") from None
        chosen = allowed[kind]
        if chosen is None:
            raise Invalid(f"--shift {name}: the model has no {_needs(kind)}")
        out.append(chosen)
    return out


def _needs(kind: ShiftKind) -> str:
    if kind is ShiftKind.PERFORMANCE_DROP:
        return "labels (its reference has no target column)"
    return "categorical feature" if kind is ShiftKind.NEW_CATEGORY else "numeric feature"


def _feature(given: str | None, names: list[str], *, option: str, kind: str) -> str | None:
    """The feature an option names (it must be of ``kind``), else the first of ``names`` (None: none)."""
    if given is None:
        return names[0] if names else None
    if given not in names:
        shown = ", ".join(names) or "none"
        raise Invalid(f"{option} {given!r} is not a {kind} feature of the model ({kind}: {shown})")
    return given
