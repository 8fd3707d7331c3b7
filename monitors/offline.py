"""Offline drift (``driftwarden drift``): files read in Arrow batches into the service's profile and sketch,
checked and compared (:func:`compare`).

Nothing here measures anything: the reference's columns go to :func:`monitors.profile.build_reference_profile`
and each batch of the current file is folded into a :class:`monitors.sketch.WindowSketch`, the engine the
service runs. What is particular to files:

- text is read as dictionary codes (:class:`core.tabular.CodedColumn`), never one Python object per cell;
- the current file is read batch by batch (Parquet row groups, CSV blocks) and each batch folded into the
  sketch, so its size is not bounded by memory; the reference keeps its numeric columns (8 bytes a value:
  exact quantiles need them all) and its text as codes (4 bytes a value);
- the pre-flight checks of :mod:`monitors.checks` read only a column's length and the set of values it holds
  (or, for numbers, their range), so each column's :class:`ColumnFacts` are gathered while reading and the
  checks run on a small stand-in of each column (:meth:`FileFacts.for_checks`) with the same findings.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.errors import Invalid
from core.memory import trim_heap
from core.tabular import (
    BATCH_ROWS,
    CSV_BLOCK_BYTES,
    CodedColumn,
    Column,
    MemoryTable,
    TableStream,
    as_float,
    fold_batches,
    release_memory,
)
from monitors.checks import Finding, check_options, check_rows, check_table, raise_findings
from monitors.file_facts import Assembled, FileFacts, column_facts
from monitors.profile import WORKERS, Profile, build_reference_profile, profile_from_dict
from monitors.profile.held import HeldRows
from monitors.profile.ordered import Sorted, SortedPass
from monitors.reservoir import RowReservoir
from monitors.rows import RowSample
from monitors.task_options import check_task_options
from registry.schema import (
    MAX_CATEGORIES,
    FeatureKind,
    FeatureSpec,
    ModelSchema,
    OutputSpec,
    Task,
    check_classes,
    infer_features,
    is_missing,
)

if TYPE_CHECKING:  # types only; monitors.sketch is imported when sketching: it loads the statistics
    from monitors.config import MonitorConfig
    from monitors.report import DriftReport
    from monitors.sketch import WindowSketch

CURRENT_SAMPLE_SEED = 0  # the seed of CURRENT's row sample: the same file gives the same rows

THREADS_IMPORT = ("numpy.ma",)
"""What the reference's threads would otherwise import on first use, imported before they start: numpy loads
``numpy.ma`` when ``np.unique`` first runs (numpy 2), which the sort threads call (``registry.tails``)."""

Source = Path | MemoryTable
"""One side of a comparison: a ``.csv`` / ``.parquet`` file, or a table in memory (the Python API's)."""


def _present(names: Sequence[str], wanted: Sequence[str | None]) -> list[str]:
    return list(dict.fromkeys(w for w in wanted if w is not None and w in names))


def _to_read(names: Sequence[str], wanted: Sequence[str | None]) -> list[str]:
    """The wanted columns the file has; its first column when it has none of them (to count its rows)."""
    return _present(names, wanted) or list(names[:1])


def read_reference(
    path: Source,
    *,
    columns: Sequence[str | None] | None = None,
    target: str | None = None,
    prediction: str | None = None,
    numeric_target: bool = False,
    batch_rows: int = BATCH_ROWS,
    block_bytes: int = CSV_BLOCK_BYTES,
    on_column: Callable[[str, Column], bool] | None = None,
    features_only: bool = False,
) -> tuple[FileFacts, dict[str, Column]]:
    """Read the reference's ``columns`` (those it has; default all, or with ``features_only`` all that can be
    features: not its dates and times): numbers as arrays, text as codes.

    The facts keep the distinct values of ``target`` (its range with ``numeric_target``: a regression's)
    and the range of ``prediction`` (the checks report labels that are not the task's and probabilities
    outside [0, 1]). ``batch_rows`` / ``block_bytes``: the size of a Parquet / CSV batch. ``on_column`` is
    handed each column once it is whole: a Parquet file (or a table in memory) is then read one column after
    the other (whole, by row group: :meth:`core.tabular.TableStream.pieces`; the same values, the same
    facts), so the caller's work on a column overlaps the reading of the next; a CSV is read in one pass (its
    rows hold every column), its columns handed over at the end.
    When ``on_column`` returns True it has taken the column: it is left out of the columns returned (and,
    read column after column, is not held while the next ones are read).
    Column after column, a Parquet file is decoded in this thread (the caller's threads keep the cores busy:
    Arrow's for one column cost more than they save) and Arrow's memory is handed back once, at the end.
    """
    stream = TableStream(path, batch_rows=batch_rows, block_bytes=block_bytes, threads=on_column is None)
    every = [name for name in stream.names if not (features_only and name in stream.temporal)]
    keep = _to_read(stream.names, every if columns is None else columns)
    rows = partial(_read_rows, stream, target=target, prediction=prediction, numeric_target=numeric_target)
    if on_column is None or stream.format == "csv":
        facts, read = rows(keep)
        for name in keep:
            if on_column is not None and on_column(name, read[name]):
                del read[name]
        return facts, read
    facts, read = FileFacts(names=stream.names), {}
    try:
        for name in keep:
            facts.columns[name] = column_facts(name, target, prediction, numeric_target)
            whole = Assembled(stream.rows)
            for piece in stream.pieces(name):
                facts.columns[name].add(piece)
                whole.add(piece)
            values = whole.column()
            facts.rows = len(values)
            if not on_column(name, values):
                read[name] = values
            del values, whole  # a taken column is not held while the next one is read
    finally:
        release_memory()  # the pages the columns shared, once
    return facts, read


def _read_rows(
    stream: TableStream,
    keep: list[str],
    *,
    target: str | None,
    prediction: str | None,
    numeric_target: bool,
) -> tuple[FileFacts, dict[str, Column]]:
    """The columns ``keep`` of ``stream`` in one pass over its batches, and their facts."""

    @dataclass
    class State:
        facts: FileFacts
        columns: dict[str, Assembled]

    def start() -> State:
        facts = FileFacts(names=stream.names)
        facts.columns = {name: column_facts(name, target, prediction, numeric_target) for name in keep}
        return State(facts=facts, columns={name: Assembled(stream.rows) for name in keep})

    def add(state: State, batch: dict[str, Column]) -> None:
        state.facts.rows += len(next(iter(batch.values()))) if batch else 0
        for name, values in batch.items():
            state.facts.columns[name].add(values)
            state.columns[name].add(values)

    state = fold_batches(stream, columns=keep, start=start, add=add)
    return state.facts, {name: state.columns.pop(name).column() for name in keep}


def reference_schema(
    columns: dict[str, Column],
    facts: FileFacts,
    *,
    exclude: set[str],
    target: str | None,
    task: Task = Task.BINARY,
    classes: tuple[str, ...] = (),
    inferred: dict[str, FeatureSpec] | None = None,
) -> ModelSchema:
    """The schema inferred from the reference, as ``registry.schema.infer_feature`` infers it, with the
    output of ``task`` (a multi-class model's ``classes``; a regression's expected range from the target's).

    Text is inferred from its distinct values; its missing rate is the counted one; text of more than
    ``MAX_CATEGORIES`` values is a wide categorical (no model is trained here to embed it). The columns are
    inferred on threads (:func:`registry.schema.infer_features`), but those ``inferred`` already (by name),
    which ``columns`` need not hold. The features are in the order the facts were gathered (the file's).
    """
    names = [name for name in facts.columns if name not in exclude]  # in the file's order
    done = inferred or {}
    rest = infer_features(
        {
            name: facts.columns[name].sample() if isinstance(values := columns[name], CodedColumn) else values
            for name in names
            if name not in done
        },
        wide_above=MAX_CATEGORIES,
    )
    found = iter(rest)
    features: list[FeatureSpec] = []
    for name in names:
        spec = done[name] if name in done else next(found)
        if isinstance(columns.get(name), CodedColumn):
            rate = facts.missing_rate(name)
            spec = dataclasses.replace(spec, missing_rate=rate, nullable=rate > 0)
        features.append(spec)
    expected = None
    if (
        task is Task.REGRESSION
        and target in facts.columns
        and facts.columns[target].high >= facts.columns[target].low
    ):
        expected = (facts.columns[target].low, facts.columns[target].high)
    outputs = (OutputSpec.for_task(task, classes=len(classes), expected=expected),)
    return ModelSchema(
        features=tuple(features), outputs=outputs, target=target or "", task=task.value, classes=classes
    )


def sketch_current(
    path: Source,
    *,
    profile: Profile | None,
    features: Sequence[str],
    prediction: str | None,
    labels: str | None,
    target: str | None,
    threshold: float,
    numeric_target: bool = False,
    batch_rows: int = BATCH_ROWS,
    block_bytes: int = CSV_BLOCK_BYTES,
    reservoir: RowReservoir | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[FileFacts, WindowSketch | None]:
    """Read the current file batch by batch: gather its facts and fold it into a sketch on ``profile``.

    Each batch's features are counted on up to :data:`monitors.profile.WORKERS` threads while a thread
    reads the next batch. Without a profile (the reference failed its checks) only the facts are gathered.
    With a ``reservoir``, the rows (features, ``prediction``, ``labels``) are offered to it as well (it is
    reset when the file is read again from its start).
    ``labels`` are counted only with a prediction column, as :func:`monitors.engine.compare` counts them;
    the facts keep the distinct values of ``target`` (the checked label column; its range with
    ``numeric_target``) and the range of ``prediction``. With a profile, ``meanwhile`` runs once in this
    thread while the read-ahead thread decodes the first batch (:func:`core.tabular.fold_batches`; it must not
    start a thread that imports: :func:`_load_what_follows`).
    """
    from monitors.sketch import WindowSketch

    stream = TableStream(path, batch_rows=batch_rows, block_bytes=block_bytes)
    features = _present(stream.names, features)
    prediction = prediction if prediction in stream.names else None
    labels = labels if labels in stream.names and prediction is not None else None
    keep = _to_read(stream.names, [*features, prediction, labels, target])

    @dataclass
    class State:
        facts: FileFacts
        sketch: WindowSketch | None

    def start() -> State:
        if reservoir is not None:
            reservoir.reset()
        facts = FileFacts(names=stream.names)
        facts.columns = {name: column_facts(name, target, prediction, numeric_target) for name in keep}
        return State(facts=facts, sketch=None if profile is None else WindowSketch(threshold=threshold))

    def add(state: State, batch: dict[str, Column]) -> None:
        rows = len(next(iter(batch.values()))) if batch else 0
        state.facts.rows += rows
        if state.sketch is None or profile is None:
            for name, values in batch.items():
                state.facts.columns[name].add(values)
            return
        columns = {name: batch[name] for name in features}
        answers = None if prediction is None else as_float(batch[prediction])
        found = None if labels is None else as_float(batch[labels])

        def facts_and_sample() -> None:  # this thread's work on the batch, while the pool counts it
            for name, values in batch.items():
                state.facts.columns[name].add(values)
            if reservoir is not None:
                reservoir.add(columns, predictions=answers, labels=found)

        state.sketch.update(
            profile, columns, predictions=answers, labels=found, pool=pool, meanwhile=facts_and_sample
        )
        state.sketch.rows = state.facts.rows

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="sketch") as pool:
        state = fold_batches(
            stream, columns=keep, start=start, add=add, meanwhile=None if profile is None else meanwhile
        )
    return state.facts, state.sketch


def numeric_features(schema: ModelSchema) -> list[str]:
    """Names of the schema's numeric features."""
    return [f.name for f in schema.features if f.kind is FeatureKind.NUMERIC]


@dataclass(frozen=True)
class RegisteredReference:
    """A registered version's reference profile and schema, compared with instead of a reference file;
    ``ref`` (NAME:VERSION) names it in messages. ``registered=False``: a profile kept elsewhere (the Python
    API's ``driftwarden.Profile``), whose CURRENT need not hold labels, as with a reference file."""

    ref: str
    profile: Profile
    schema: ModelSchema
    path: Path | None = None  # the version's folder (its model answers the attribution)
    registered: bool = True


@dataclass
class _Sides:
    """A comparison's two sides as they are read and checked: how messages name the reference, each file's
    columns as the checks read them (by how messages name the file), the findings so far, the schema and
    the label column, the reference profile, and why that profile could not be built (reported after the
    current file's findings)."""

    source: str
    registered: bool
    tables: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    schema: ModelSchema | None = None
    label: str | None = None
    profile: Profile | None = None
    failure: Exception | None = None
    ignored: list[str] = field(default_factory=list)  # CURRENT's columns that are not compared
    document: dict[str, Any] | None = None  # the reference profile as JSON (built from REFERENCE's rows)
    current_sample: RowSample | None = None  # a uniform sample of CURRENT's rows (sketch_current's reservoir)

    @property
    def reference_sample(self) -> RowSample | None:
        """The reference's row sample: the registered profile's, or the one built from REFERENCE's rows."""
        return None if self.profile is None else self.profile.sample

    @property
    def task(self) -> Task:
        """The task of the contract compared with (binary for a schema inferred from a file)."""
        return Task.BINARY if self.schema is None else self.schema.kind

    @property
    def classes(self) -> tuple[str, ...]:
        return () if self.schema is None else self.schema.classes


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found: the drift report, the reference profile and contract compared with, and
    the row samples of both sides (the reference profile's, and CURRENT's: None with ``sample_rows=0``)."""

    report: DriftReport
    profile: Profile
    schema: ModelSchema
    reference_sample: RowSample | None
    current_sample: RowSample | None


def compare(
    current: Source,
    *,
    reference: Source | RegisteredReference,
    schema: ModelSchema | None,
    schema_source: str,
    target: str | None,
    prediction: str | None,
    min_rows: int,
    config: MonitorConfig,
    hint: str = "",
    sample_rows: int | None = None,
    task: Task | None = None,
) -> Comparison:
    """Compare the ``current`` file with a reference file (on ``schema``, or one inferred from the file) or
    a registered version's profile, after the checks of both sides: the drift report and both sides' row
    samples (CURRENT's: at most ``sample_rows`` rows, uniformly; None: the setting ``monitor_sample_rows``).

    ``schema_source`` names the given schema in messages; ``hint`` ends the message of a comparison that
    the engine refuses (e.g. which config to check). ``task`` (without ``schema``): the task of the schema
    inferred from REFERENCE (default binary). Whatever stops the comparison raises
    :class:`core.errors.Invalid`: the checks' findings first (:class:`monitors.checks.DataCheckFailed`).
    The contract's task (a registered version's, or ``schema``'s) decides what the labels of ``target`` are
    and what ``prediction`` holds; only the contract's features are compared (CURRENT's other columns are
    the report's ``ignored_columns``).
    """
    _check_options_of(
        reference,
        schema=schema,
        schema_source=schema_source,
        task=task,
        prediction=prediction,
        config=config,
        hint=hint,
    )
    if isinstance(reference, RegisteredReference):
        sides = _registered_side(reference, target=target, min_rows=min_rows)
    else:
        sides = reference_side(
            reference,
            schema=schema,
            schema_source=schema_source,
            target=target,
            prediction=prediction,
            min_rows=min_rows,
            task=task,
            meanwhile=_load_what_follows,  # while the PCA is fitted
        )
        trim_heap()  # the reference's columns and the sorts' buffers are gone: CURRENT grows in their place
    if sample_rows is None:
        from core.config import get_settings

        sample_rows = get_settings().monitor_sample_rows
    sketch = _current_side(
        current,
        sides,
        target=target,
        prediction=prediction,
        min_rows=min_rows,
        config=config,
        sample_rows=sample_rows,
        meanwhile=_load_what_follows,  # while CURRENT's first batch is decoded (a registered reference's)
    )
    failed = f"cannot compare CURRENT {current} with {sides.source}"
    if sides.failure is not None:
        raise Invalid(f"{failed}: {sides.failure}{hint}")
    assert sides.profile is not None and sketch is not None  # no finding: both sides were read and checked
    from monitors.engine import evaluate

    try:
        report = evaluate(profile=sides.profile, sketch=sketch, config=config)
    except (ValueError, TypeError) as exc:
        raise Invalid(f"{failed}: {exc}{hint}") from None
    report.ignored_columns = sides.ignored
    assert sides.schema is not None  # a profile was built or registered on it
    return Comparison(
        report=report,
        profile=sides.profile,
        schema=sides.schema,
        reference_sample=sides.reference_sample,
        current_sample=sides.current_sample,
    )


def _check_options_of(
    reference: Source | RegisteredReference,
    *,
    schema: ModelSchema | None,
    schema_source: str,
    task: Task | None,
    prediction: str | None,
    config: MonitorConfig,
    hint: str,
) -> None:
    """Check the options against the task of the contract that decides it: the registered version's, the
    given schema's, or the given task."""
    if isinstance(reference, RegisteredReference):
        kind, classes, named = reference.schema.kind, reference.schema.classes, reference.ref
    elif schema is not None:
        kind, classes, named = schema.kind, schema.classes, schema_source
    elif task is not None:
        kind, classes, named = task, (), f"task {task.value!r}"
    else:
        return
    check_task_options(kind, classes, named=named, prediction=prediction, config=config, hint=hint)


def _registered_side(reference: RegisteredReference, *, target: str | None, min_rows: int) -> _Sides:
    sides = _Sides(
        source=f"the registered version {reference.ref}" if reference.registered else reference.ref,
        registered=reference.registered,
        schema=reference.schema,
        label=target or (reference.schema.target or None),
        profile=reference.profile,
    )
    where = f"the reference profile of {reference.ref}" if reference.registered else reference.ref
    sides.findings += check_rows(reference.profile.rows, where=where, min_rows=min_rows)
    return sides


def reference_side(
    path: Source,
    *,
    schema: ModelSchema | None,
    schema_source: str,
    target: str | None,
    prediction: str | None,
    min_rows: int,
    task: Task | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> _Sides:
    """Read and check the reference file, then (when it passed) infer its schema (of ``task``, default
    binary) unless one is given and build its profile (``document``: as JSON); the file's columns are
    dropped once the profile holds what is needed of them. Each numeric column is put in order once (a partial
    sort), for its spec and its summary, on threads, while the next columns are read (:class:`SortedPass`).
    ``meanwhile`` runs in this thread while the profile's threads fit its PCA (when it is built)."""
    where = f"REFERENCE {path}"
    exclude = {c for c in (target, prediction) if c}
    task = (task or Task.BINARY) if schema is None else schema.kind
    only = None if schema is None else numeric_features(schema)
    for module in THREADS_IMPORT:
        importlib.import_module(module)
    held: HeldRows | None = None
    whole = task is Task.REGRESSION and prediction is not None  # its loss model reads every row

    def take(name: str, values: Column) -> bool:
        """Hand a column to the sorts; keep only its profiled rows when they take it."""
        nonlocal held
        if not sorter.add(name, values) or whole or isinstance(values, CodedColumn):
            return False
        held = held or HeldRows(len(values))
        held.hold(name, values)
        return True

    with SortedPass(infer=schema is None, skip=exclude, only=only) as sorter:
        facts, columns = read_reference(
            path,
            columns=None  # all: the features are inferred from them
            if schema is None
            else [*schema.feature_names, target, prediction, schema.target or None],
            target=target,
            prediction=prediction,
            numeric_target=task is Task.REGRESSION,
            on_column=take,
            features_only=True,  # a date or a time is no feature unless the schema names one
        )
        sides = _Sides(source=where if schema is None else schema_source, registered=False, label=target)
        sides.tables[where] = facts.for_checks()
        classes = schema.classes if schema is not None else _inferred_classes(facts, task=task, target=target)
        sides.findings += check_table(
            sides.tables[where],
            where=where,
            min_rows=min_rows,
            features=schema.feature_names
            if schema is not None
            else [c for c in facts.names if c not in exclude and c in facts.columns],
            feature_source=sides.source,
            target=target,
            prediction=prediction,
            task=task,
            classes=classes,
        )
        if sides.findings:
            return sides
        try:
            passed = sorter.results()
            sides.schema = schema or reference_schema(
                columns,
                facts,
                exclude=exclude,
                target=target,
                task=task,
                classes=classes,
                inferred={name: p.spec for name, p in passed.items() if p.spec is not None},
            )
        except ValueError as exc:
            raise Invalid(f"{where}: {exc}") from None
    _profile_reference(sides, columns, prediction=prediction, passed=passed, held=held, meanwhile=meanwhile)
    return sides


LOADED_WHILE_FITTING = ("scipy.special", "monitors.engine", "monitors.explain")
"""What a comparison imports while the reference's PCA is fitted (or, for a registered reference, while
CURRENT's first batch is read): the statistics' tail functions (``scipy.special``, ~0.15 CPU-seconds; see
:mod:`monitors.drift.base`), the engine and the explanations (~0.05 s)."""


def _load_what_follows() -> None:
    """Import :data:`LOADED_WHILE_FITTING`: :func:`compare` has :func:`reference_side` call it while the
    profile's threads fit the reference's PCA (numpy and BLAS, mostly without the GIL: this thread would only
    wait for them), and :func:`sketch_current` while a thread decodes CURRENT's first batch (a second call
    imports nothing; the only one for a registered reference), instead of loading them on one core before
    reading or between the stages (a profile alone needs none of them). Run while the pool counted CURRENT's
    first batch instead, it left the cores idle: the counting is over long before the import (~0.15 s).

    No thread but this one imports anything in a comparison (what the sort threads would import on first use
    is imported before they start: :data:`THREADS_IMPORT`), so no two threads import at once
    (tests/monitors/test_offline_threads.py).
    """
    for module in LOADED_WHILE_FITTING:
        importlib.import_module(module)


def _profile_reference(
    sides: _Sides,
    columns: dict[str, Column],
    *,
    prediction: str | None,
    passed: dict[str, Sorted],
    held: HeldRows | None,
    meanwhile: Callable[[], None] | None = None,
) -> None:
    """Build the reference profile on the sides' schema (the numeric summaries ``passed`` made already, of
    columns ``held`` at the profiled rows or whole in ``columns``); why it could not be built is the sides'
    ``failure``. ``meanwhile``: as :func:`monitors.profile.build_reference_profile`'s."""
    assert sides.schema is not None
    failed = [p.failure for p in passed.values() if p.failure is not None]
    if failed:  # the summary the profile would make again of the column fails the same way
        sides.failure = failed[0]
        return
    sides.label = sides.label or (sides.schema.target or None)
    preds = columns.get(prediction) if prediction else None
    labels = columns.get(sides.label) if sides.label and preds is not None else None
    try:
        built = build_reference_profile(
            columns,
            sides.schema,
            predictions=None if preds is None else np.asarray(preds, dtype=np.float64),
            labels=None if labels is None else np.asarray(labels),
            summaries={name: p.summary for name, p in passed.items() if p.summary is not None},
            held=held,
            meanwhile=meanwhile,
        )
        sides.profile = profile_from_dict(built)
        sides.document = built
    except (ValueError, TypeError) as exc:
        sides.failure = exc


def _inferred_classes(facts: FileFacts, *, task: Task, target: str | None) -> tuple[str, ...]:
    """The classes of a multi-class schema inferred from REFERENCE: its target's distinct labels, sorted."""
    if task is not Task.MULTICLASS:
        return ()
    if target is None or target not in facts.columns:
        raise Invalid(
            f"a multi-class comparison needs its labels: name the target column (--target) among "
            f"REFERENCE's columns {facts.names[:10]}; its distinct values are the classes"
        )
    values = facts.columns[target].sample()
    try:
        return check_classes(values[~is_missing(values)], target=target)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def _current_side(
    path: Source,
    sides: _Sides,
    *,
    target: str | None,
    prediction: str | None,
    min_rows: int,
    config: MonitorConfig,
    sample_rows: int = 0,
    meanwhile: Callable[[], None] | None = None,
) -> WindowSketch | None:
    """Read the current file into a sketch (when the reference passed and gave a profile) and check it and
    the options against both sides; raise every finding. ``sample_rows`` > 0: ``sides.current_sample``
    keeps a uniform sample of at most that many of its rows (:class:`monitors.reservoir.RowReservoir`).
    ``meanwhile``: as :func:`sketch_current`."""
    where = f"CURRENT {path}"
    features = [] if sides.schema is None else sides.schema.feature_names
    reservoir = None
    if sides.schema is not None and sample_rows > 0:
        kinds = {spec.name: spec.kind for spec in sides.schema.features}
        reservoir = RowReservoir(kinds, rows=sample_rows, seed=CURRENT_SAMPLE_SEED)
    facts, sketch = sketch_current(
        path,
        profile=sides.profile if not sides.findings and sides.failure is None else None,
        features=features,
        prediction=prediction,
        labels=sides.label if sides.task is not Task.MULTICLASS else None,  # its labels need its vectors
        target=target,
        threshold=config.classification_threshold,
        numeric_target=sides.task is Task.REGRESSION,
        reservoir=reservoir,
        meanwhile=meanwhile,
    )
    if reservoir is not None and sketch is not None:
        sides.current_sample = reservoir.sample()
    if sides.schema is not None:
        compared = {*features, target, prediction, sides.label}
        sides.ignored = [name for name in facts.names if name not in compared]
    sides.tables[where] = facts.for_checks()
    findings = check_options(
        sides.tables, target=target, prediction=prediction, target_in=list(sides.tables)[:1]
    )
    findings += sides.findings
    findings += check_table(
        sides.tables[where],
        where=where,
        min_rows=min_rows,
        features=features,
        feature_source=sides.source,
        numeric=[] if sides.schema is None else numeric_features(sides.schema),
        target=target,
        prediction=prediction,
        target_required=sides.registered,
        task=sides.task,
        classes=sides.classes,
    )
    raise_findings(findings)
    return sketch


def explain_comparison(
    comparison: Comparison, *, config: MonitorConfig, version_dir: Path | None
) -> DriftReport:
    """The comparison's report with why its drift matters (:func:`monitors.explain.explain`): the version's
    model answers the attribution when ``version_dir`` holds one, else the surrogate fitted on the reference's
    answers (a reference file with a prediction column); a one-off comparison tests at ``config.alpha``."""
    from monitors.explain import explain
    from monitors.predictors import predictor_for

    profile = comparison.profile
    return explain(
        comparison.report,
        profile=profile,
        window=comparison.current_sample,
        predictor=lambda: predictor_for(version_dir=version_dir, profile=profile, schema=comparison.schema),
        config=config,
        level=config.alpha,
    )
