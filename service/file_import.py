"""``driftwarden predictions import FILE``: a batch job's scored rows (CSV or Parquet) into the log.

A file that lacks a feature column of the version's contract is refused before it is read, naming the columns
(unless ``allow_missing_features``: they are logged as missing). The file is read twice in batches (bounded
memory whatever its size): the first pass checks every row the way the ingest route checks a record (the
prediction fits the version's task, the label the task's labels, the time parses, the id is usable) and stops
at the first bad row, naming it (:meth:`FileImport.row`: a CSV's line, a Parquet file's row from 1), before
anything is written; the second pass writes. Both read a batch column by column (numbers as arrays, each
distinct text once); a bad row is then read as a record, so that its error is the ingest route's. A row's
inputs are the columns of the version's contract; the contract flags, refusing only what no log holds (a
category over its ``max_length``: :func:`registry.contracts.flag_columns`, the flags of
:func:`~registry.contracts.flag_rows` by column). Rows
go through the log's own writer (:class:`predictions.writer.LogWriter`, its spool included: rows the database
cannot take now are replayed by the next server that adopts the spool slot), each run with its values by
feature, which the writer types by the contract's layout. With ``--id-column`` the rows' prediction ids derive
from their ids as the ingest route's do (per run of one time, up to 2048 rows), and runs the log already holds
are skipped, so an import run again stores no row twice. Labels are stored as feedback once their rows are
committed; a run again sends every label again (a label of a run whose rows were written before an import died
is stored then), and the labels the log already holds are counted apart (``labels_present``), not stored
again.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from core.config import Settings
from core.database import Database, make_engine
from core.errors import Invalid, NotFound
from core.http import NUL_RULE, nul_in_row
from core.tabular import SUFFIXES, CodedColumn, Column, TableStream, as_python
from core.times import RANGE, outside, utc_in_range
from predictions.lake.labels import store_lake_labels
from predictions.lake.setup import open_sink
from predictions.models import PredictionStatus
from predictions.pending import RequestRows
from predictions.service import logged_predictions, new_prediction_ids
from predictions.spool import Spool, spool_dir
from predictions.writer import LogWriter
from registry.contracts import OUTPUT_FLAG, ContractViolation, flag_columns, output_flags
from registry.schema import ModelSchema, Task
from registry.service import get_version, read_schema, serving_version
from service.serving.codecs import BadRequest
from service.serving.readers import label_reader, log_layout
from service.serving.records import (
    MAX_RUN,
    Checked,
    Record,
    check_id,
    check_records,
    keyed_ids,
    read_prediction,
)

log = logging.getLogger("driftwarden.service.file_import")

SOURCE = "import"
BATCH_ROWS = 20_000


@dataclass(frozen=True)
class FileImport:
    """What ``predictions import`` was asked to do."""

    path: Path
    model_name: str
    prediction_column: str
    id_column: str | None = None
    time_column: str | None = None
    label_column: str | None = None
    version: int | None = None
    dry_run: bool = False
    allow_missing_features: bool = False

    def row(self, index: int) -> str:
        """How an error names the file's row ``index`` (from 0): its line in a CSV (the header is line 1),
        its row counted from 1 in Parquet."""
        if SUFFIXES.get(self.path.suffix.lower()) == "parquet":
            return f"row {index + 1} (1-based)"
        return f"line {index + 2}"


@dataclass
class Imported:
    """What an import read and stored."""

    rows: int = 0
    stored: int = 0
    duplicates: int = 0
    flagged: int = 0
    labels: int = 0  # labels stored: new, or replacing another label of the same prediction
    labels_present: int = 0  # labels the log already held (the same label of the same prediction)
    spooled: int = 0
    version: int = 0
    seconds: float = 0.0


def import_file(
    *, spec: FileImport, db: Database, settings: Settings, progress: Callable[[int], None] | None = None
) -> Imported:
    """Check the whole file, then (unless ``dry_run``) log its rows; ``progress`` gets rows done per batch
    (both passes)."""
    started = time.perf_counter()
    version, schema = _contract(db=db, spec=spec)
    # decoded in this thread: the log's writer and the database keep the other cores busy (and less memory)
    stream = TableStream(spec.path, batch_rows=BATCH_ROWS, threads=False)
    columns = _columns(stream, spec, schema, version)
    result = Imported(version=version)
    seen: dict[str, int] = {}  # the file's ids so far (repeats are refused), kept during pass 1 only
    for batch, first in _batches(stream, columns):  # pass 1: every row checked, nothing written
        read = _read(batch, spec, schema, version, first)
        if read.ids is not None:
            _repeats(read.ids, first, seen, spec)
        n = read.n
        result.rows += n
        if progress is not None:
            progress(n)
    seen.clear()
    if not spec.dry_run:
        _write(
            spec=spec,
            db=db,
            settings=settings,
            stream=stream,
            columns=columns,
            schema=schema,
            version=version,
            result=result,
            progress=progress,
        )
    result.seconds = time.perf_counter() - started
    return result


def _contract(*, db: Database, spec: FileImport) -> tuple[int, ModelSchema]:
    with db.session() as session:
        row = (
            serving_version(session=session, model_name=spec.model_name)
            if spec.version is None
            else get_version(session=session, model_name=spec.model_name, version=spec.version)
        )
    if row is None:
        what = "no serving version" if spec.version is None else f"no version {spec.version}"
        raise NotFound(
            f"model '{spec.model_name}' has {what} (see `driftwarden models list`; register it with "
            "`driftwarden models import`)"
        )
    return row.version, read_schema(path=Path(row.path))


def _columns(stream: TableStream, spec: FileImport, schema: ModelSchema, version: int) -> list[str]:
    """The columns to read: the contract's features the file has, the prediction, id, time and label; a
    feature of the contract the file lacks refuses the import (unless ``allow_missing_features``)."""
    named = {
        "--prediction-column": spec.prediction_column,
        "--id-column": spec.id_column,
        "--time-column": spec.time_column,
        "--label-column": spec.label_column,
    }
    features = [f for f in schema.feature_names if f in stream.names]
    if not features:  # checked first: the columns of a file that is not the one meant are not shown
        raise Invalid(
            f"{spec.path} has none of the features of {spec.model_name}'s contract "
            f"({_listed(schema.feature_names)})"
        )
    for option, name in named.items():
        if name is not None and name not in stream.names:
            raise Invalid(
                f"{option} {name!r} is not a column of {spec.path} (its columns: {_listed(stream.names)})"
            )
    if spec.label_column is not None and spec.label_column in stream.booleans:
        raise Invalid(
            f"--label-column {spec.label_column!r} holds true/false: a label is a number or a class name "
            f"({label_reader(schema).allowed})"
        )
    missing = [f for f in schema.feature_names if f not in stream.names]
    if missing and not spec.allow_missing_features:
        raise Invalid(
            f"{spec.path} lacks {len(missing)} feature column(s) of {spec.model_name}:{version}'s contract: "
            f"{_listed(missing)} (rename the file's columns to the contract's, or pass "
            "--allow-missing-features to log them as missing)"
        )
    extra = [name for name in named.values() if name is not None and name not in features]
    return list(dict.fromkeys([*features, *extra]))


def _listed(names: Sequence[str], most: int = 20) -> str:
    """Column names in an error: the first ``most``, each cut at 40 characters."""
    shown = [name if len(name) <= 40 else name[:40] + "..." for name in names[:most]]
    return ", ".join(shown) + (f" and {len(names) - most} more" if len(names) > most else "")


def _batches(stream: TableStream, columns: Sequence[str]) -> Iterator[tuple[dict[str, Column], int]]:
    """The file's batches with the row number of each batch's first row (a CSV column that widens in a
    later block restarts the read from the top with the wider type, skipping the rows already given)."""
    done = 0
    while True:
        seen = 0
        try:
            for batch in stream.batches(columns):
                n = len(next(iter(batch.values())))
                if seen + n <= done:  # given before a restart
                    seen += n
                    continue
                if seen < done:
                    batch = {k: v[done - seen :] for k, v in batch.items()}
                    n -= done - seen
                    seen = done
                yield batch, seen
                seen += n
                done = seen
            return
        except Exception as exc:
            if type(exc).__name__ != "_Widened":
                raise
            continue


def _records(batch: dict[str, Column], spec: FileImport, schema: ModelSchema, first: int) -> list[Record]:
    """One record per row (``index``: the row number in the file, from 0; :meth:`FileImport.row` names it)."""
    features = [f for f in schema.feature_names if f in batch]
    inputs = [
        dict(zip(features, row, strict=True))
        for row in zip(*(as_python(batch[f]) for f in features), strict=True)
    ]
    n = len(inputs)
    column = batch[spec.prediction_column]
    parsed = _parsed(column, spec, spec.prediction_column, first)
    predictions = [parsed[c] for c in column.codes.tolist()] if isinstance(column, CodedColumn) else parsed
    ids = _ids(batch[spec.id_column], spec, spec.id_column, first) if spec.id_column else [None] * n
    times: list[datetime | None] = [None] * n
    if spec.time_column:
        moments, index = _times(batch[spec.time_column], spec, spec.time_column, first)
        times = [moments[k] for k in index.tolist()]
    labels = as_python(batch[spec.label_column]) if spec.label_column else [None] * n
    return [
        Record(
            index=first + i,
            id=ids[i],
            time=times[i],
            version=spec.version,
            inputs=inputs[i],
            prediction=predictions[i],
            label=labels[i],
            has_label=labels[i] is not None,
        )
        for i in range(n)
    ]


def _check_storable(batch: dict[str, Column], spec: FileImport, schema: ModelSchema, first: int) -> None:
    """Refuse the first row whose input text no log can store (``core.http.NUL_RULE``), naming it: its
    feature columns' distinct values are checked (text columns are coded), then the row is found."""
    for name in schema.feature_names:
        column = batch.get(name)
        if not isinstance(column, CodedColumn):
            continue
        refused = [k for k, c in enumerate(column.categories.tolist()) if nul_in_row({name: c}) is not None]
        rows = np.flatnonzero(np.isin(column.codes, refused)) if refused else np.empty(0, dtype=np.intp)
        if rows.size:
            raise Invalid(f"{spec.row(first + int(rows[0]))}: column {name!r}: {NUL_RULE}")


@dataclass
class _Read:
    """One batch read by the contract, column by column: each row's prediction as the log holds it (the
    value, a multi-class model's vector), its label (None: none), its id, and the runs of one time."""

    n: int
    values: list[float]
    vectors: list[list[float | None]] | None
    labels: list[float | None] | None
    ids: list[str] | None
    runs: list[tuple[int, int, datetime | None]]  # [start, end) of one time (None: no time column)


def _read(batch: dict[str, Column], spec: FileImport, schema: ModelSchema, version: int, first: int) -> _Read:
    """One batch read by the contract (both passes): the first row whose prediction, label, time or id is
    unusable stops the import, read as a record so that its error is the ingest route's."""
    _check_storable(batch, spec, schema, first)
    values, vectors, bad = _outputs(batch[spec.prediction_column], schema, spec, first)
    n = len(values)
    ids = _ids(batch[spec.id_column], spec, spec.id_column, first) if spec.id_column else None
    runs: list[tuple[int, int, datetime | None]] = [(0, n, None)] if n else []
    if spec.time_column:
        runs = _runs(*_times(batch[spec.time_column], spec, spec.time_column, first))
    labels = None
    if spec.label_column:
        labels, bad = _labels(batch[spec.label_column], schema, bad)
    try:  # the contract flags, but refuses what no log holds (a category over its max_length)
        flag_columns(schema, {f: batch[f] for f in schema.feature_names if f in batch}, n)
    except ContractViolation as exc:
        v = exc.violations[0]
        where = spec.row(first + (v.row or 0))
        raise Invalid(f"{where}: {v.feature}: {v.message} (rule: {v.rule})") from None
    if bad < n:
        one = {name: column[bad : bad + 1] for name, column in batch.items()}
        _check(_records(one, spec, schema, first + bad), spec, version, schema)  # raises, naming the row
        where = spec.row(first + bad)
        raise Invalid(f"{where}: its prediction or label does not fit the {schema.kind.short} task")
    return _Read(n, values, vectors, labels, ids, runs)


def _outputs(
    column: Column, schema: ModelSchema, spec: FileImport, first: int
) -> tuple[list[float], list[list[float | None]] | None, int]:
    """Each row's prediction as the log holds it, the vectors of a multi-class model, and the first row the
    task cannot take (``len`` when none); numbers checked as a column, each distinct text read once."""
    multi = schema.kind is Task.MULTICLASS
    if not isinstance(column, CodedColumn):
        numbers = column.astype(np.float64)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(numbers) & (not multi)
            if schema.kind is Task.BINARY:
                ok &= (numbers >= 0.0) & (numbers <= 1.0)
        wrong = np.flatnonzero(~ok)
        n = len(numbers)
        return numbers.tolist(), [[]] * n if multi else None, int(wrong[0]) if wrong.size else n
    read: list[tuple[float, list[float | None] | None] | None] = []
    for i, value in enumerate(_parsed(column, spec, spec.prediction_column, first)):
        try:
            read.append(read_prediction(Record(i, None, None, None, {}, value, None, False), schema))
        except BadRequest:
            read.append(None)
    codes = column.codes
    wrong = np.flatnonzero(np.array([r is None for r in read], dtype=bool)[codes])
    fallback: tuple[float, list[float | None] | None] = (float("nan"), [] if multi else None)
    rows = [read[c] or fallback for c in codes.tolist()]  # code -1: the null, read last
    vectors = [r[1] or [] for r in rows] if multi else None
    return [r[0] for r in rows], vectors, int(wrong[0]) if wrong.size else len(codes)


def _parsed(column: Column, spec: FileImport, name: str, first: int) -> list[Any]:
    """A prediction column's values: numbers (None: missing), or each distinct text read as JSON, the null
    last (text that is not JSON stops the import at its first row)."""
    if not isinstance(column, CodedColumn):
        return as_python(column.astype(np.float64))
    texts = column.categories.tolist()
    out: list[Any] = []
    broken = np.zeros(len(texts) + 1, dtype=bool)
    for k, text in enumerate(texts):
        try:
            out.append(json.loads(text) if text else None)
        except ValueError:
            out.append(None)
            broken[k] = True
    wrong = np.flatnonzero(broken[column.codes])
    if wrong.size:
        text = texts[column.codes[wrong[0]]]
        raise Invalid(
            f"{spec.row(first + int(wrong[0]))}: {name} holds {str(text)[:40]!r}, neither a number nor a "
            "JSON list of class probabilities"
        )
    return [*out, None]


def _labels(column: Column, schema: ModelSchema, bad: int) -> tuple[list[float | None], int]:
    """Each row's label as stored (None: no label) and the first row before ``bad`` whose label the task
    cannot take (``bad`` when none); each distinct value is read once."""
    read = label_reader(schema)
    if isinstance(column, CodedColumn):  # text (a Parquet string column): read as a CSV reads its cells
        distinct = [*(_label_text(t, schema) for t in column.categories.tolist()), None]
        index = column.codes
    else:  # floats by their bits: -0.0 is read apart from 0.0
        bits = column.dtype == np.float64
        uniques, index = np.unique(column.view(np.int64) if bits else column, return_inverse=True)
        distinct = as_python(uniques.view(np.float64) if bits else uniques)
    stored = [None if v is None else read(v) for v in distinct]
    refused = np.array([v is not None and s is None for v, s in zip(distinct, stored, strict=True)])
    wrong = np.flatnonzero(refused[index[:bad]])
    lookup = np.empty(len(stored), dtype=object)
    lookup[:] = stored
    return lookup[index].tolist(), int(wrong[0]) if wrong.size else bad


_INTEGER = re.compile(r"[+-]?\d{1,18}")


def _label_text(text: str, schema: ModelSchema) -> Any:
    """A label cell's text as a CSV's cell would be read: a class name of a multi-class model as it is, a
    number as that number (``"0"`` in Parquet is the 0 a CSV holds), else the text (refused by the task)."""
    if schema.kind is Task.MULTICLASS and text in schema.classes:
        return text
    if _INTEGER.fullmatch(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _ids(column: Column, spec: FileImport, name: str, first: int) -> list[str]:
    """Each row's id as text, by the ingest route's rule (:func:`service.serving.records.check_id`); an empty
    or unusable one stops the import, naming its row."""
    if isinstance(column, CodedColumn):  # text: each distinct id checked once
        texts = column.categories.tolist()
        usable = np.array([_id_error(t, "id") is None for t in texts] + [False], dtype=bool)
        wrong = np.flatnonzero(~usable[column.codes])
        if wrong.size:
            code = int(column.codes[wrong[0]])
            _refuse_id(texts[code] if code >= 0 else "", spec.row(first + int(wrong[0])), name)
        return list(column.categories[column.codes].tolist())
    out: list[str] = []
    for i, v in enumerate(as_python(column)):
        text = "" if v is None else str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
        if text == "" or _id_error(text, "id") is not None:
            _refuse_id(text, spec.row(first + i), name)
        out.append(text)
    return out


def _id_error(text: str, field: str) -> str | None:
    """What the route's id rule says of ``text`` (None: a usable id)."""
    try:
        check_id(text, field=field)
    except BadRequest as exc:
        return str(exc)
    return None


def _refuse_id(text: str, row: str, name: str) -> NoReturn:
    if text == "":
        raise Invalid(_no_id(row, name))
    raise Invalid(_id_error(text, f"{row}: {name}") or f"{row}: {name} is not a usable id")


def _repeats(ids: list[str], first: int, seen: dict[str, int], spec: FileImport) -> None:
    """Stop the import at the first row whose id an earlier row of the file has (``seen``: id -> row)."""
    for i, key in enumerate(ids):
        earlier = seen.setdefault(key, first + i)
        if earlier != first + i:
            raise Invalid(
                f"{spec.row(first + i)}: {spec.id_column} repeats the id of {spec.row(earlier)}: each row's "
                "id must be unique in the file, as in one ingest request"
            )


def _no_id(row: str, name: str) -> str:
    return f"{row}: {name} is empty: every row needs its id (or leave --id-column out)"


def _times(column: Column, spec: FileImport, name: str, first: int) -> tuple[list[datetime], np.ndarray]:
    """The distinct times (RFC 3339 text or a Parquet timestamp; without an offset: UTC) and each row's index
    into them; a row whose time does not parse stops the import."""
    if not isinstance(column, CodedColumn):
        raise Invalid(f"{name} holds numbers; give times as RFC 3339 text or a Parquet timestamp column")
    distinct: dict[datetime, int] = {}
    found: list[int] = []  # per category: its time's index; -1: not a time, -2: outside the range
    for text in column.categories.tolist():
        try:
            moment = utc_in_range(datetime.fromisoformat(text))
        except ValueError:
            found.append(-1)
            continue
        found.append(-2 if moment is None else distinct.setdefault(moment, len(distinct)))
    index = np.array([*found, -1], dtype=np.int64)[column.codes]
    wrong = np.flatnonzero(index < 0)
    if wrong.size:
        row = int(wrong[0])
        code = int(column.codes[row])
        shown = str(column.categories[code])[:40] if code >= 0 else "(empty)"
        if index[row] == -2:
            raise Invalid(f"{spec.row(first + row)}: {name} {outside(shown)}")
        raise Invalid(
            f"{spec.row(first + row)}: {name} {shown!r} is not a time (RFC 3339, e.g. 2026-12-01T10:00:00Z, "
            f"from {RANGE})"
        )
    return list(distinct), index


def _runs(moments: list[datetime], index: np.ndarray) -> list[tuple[int, int, datetime | None]]:
    """The rows split where their time changes (one log row holds one time): ``[start, end)`` and the time."""
    n = len(index)
    starts = [0, *(np.flatnonzero(index[1:] != index[:-1]) + 1).tolist()] if n else []
    return [(s, e, moments[int(index[s])]) for s, e in zip(starts, [*starts[1:], n], strict=True)]


def _check(records: Sequence[Record], spec: FileImport, version: int, schema: ModelSchema) -> list[Checked]:
    """The records read by the contract; a bad one is one line naming its row and field."""
    try:
        return check_records(records, {records[0].version if records else None: (version, schema)})
    except BadRequest as exc:
        named = re.sub(r"records\[(\d+)\]\.", lambda m: f"{spec.row(int(m.group(1)))}: ", str(exc))
        raise Invalid(named) from None


def _write(
    *,
    spec: FileImport,
    db: Database,
    settings: Settings,
    stream: TableStream,
    columns: list[str],
    schema: ModelSchema,
    version: int,
    result: Imported,
    progress: Callable[[int], None] | None,
) -> None:
    """Pass 2: the rows through the log's writer (ids the log holds skipped), their labels as feedback once
    their rows are committed; a batch is read, and the labels of the one before stored, while the writer
    writes."""
    url = settings.database_url.get_secret_value()
    lake = open_sink(settings, strict=True)  # lake_mode also/only: a lake that cannot be written stops here
    engine = make_engine(url)
    writer = LogWriter(
        engine=engine,
        spool=Spool.claim(spool_dir(settings.spool_path, url), max_bytes=settings.spool_max_bytes),
        durability="fast",
        queue_max_rows=4 * BATCH_ROWS,
        batch_max_rows=BATCH_ROWS,
        flush_interval_s=0.05,
        retry_interval_s=settings.log_retry_interval_s,
        lake=lake,
        database=settings.lake_mode != "only",
    )
    writer.start()
    now = datetime.now(UTC)
    labels: list[tuple[str, float]] = []  # the previous batch's, stored once its rows are in the table
    try:
        for batch, first in _batches(stream, columns):
            read = _read(batch, spec, schema, version, first)
            if not read.n:
                continue
            parts = _segments(spec.model_name, read)
            rows = _log_rows(batch, spec, schema, version, read, parts, now)
            firsts = [seg.ids[0] for seg in parts if seg.keyed]
            if firsts or labels:
                writer.flush(60.0)  # the file's earlier rows are in the table: their labels, this batch's ids
            fresh = _unlogged(db, spec.model_name, parts, firsts)
            for i in fresh:
                _put(writer, rows[i])
                result.stored += len(rows[i])
                result.flagged += sum(1 for f in rows[i].flags if f)
            result.duplicates += read.n - sum(len(rows[i]) for i in fresh)
            _store_labels(db, spec.model_name, labels, result, writer)  # while the writer writes this batch
            # every part's labels, those of runs the log already held too: a run cut short after writing rows
            # and before storing their labels gets them now (a resent label replaces the same one)
            labels = _labelled(read, parts)
            if progress is not None:
                progress(read.n)
        if labels:
            writer.flush(60.0)
            _store_labels(db, spec.model_name, labels, result, writer)
    finally:
        writer.close(settings.shutdown_timeout_s)
        result.spooled = writer.spool.pending_rows + (lake.wal.pending_rows if lake is not None else 0)
        engine.dispose()


def _unlogged(db: Database, model_name: str, parts: list[_Segment], firsts: list[str]) -> list[int]:
    """The positions of ``parts`` the log does not hold (``firsts``: the first id of each named part)."""
    known: set[str] = set()
    if firsts:
        with db.session() as session:
            known = set(logged_predictions(session=session, model_name=model_name, ids=firsts))
    return [i for i, seg in enumerate(parts) if not (seg.keyed and seg.ids[0] in known)]


@dataclass(frozen=True)
class _Segment:
    """Rows ``[start, end)`` of a batch that become one log row: one time, their prediction ids."""

    start: int
    end: int
    ids: list[str]
    keyed: bool
    at: datetime | None


def _segments(model_name: str, read: _Read) -> list[_Segment]:
    """The batch's log rows, as the ingest route cuts records (:func:`service.serving.records.segments`):
    a run of one time, named runs cut every :data:`MAX_RUN` rows with :func:`keyed_ids`, others fresh ids."""
    out: list[_Segment] = []
    for start, end, at in read.runs:
        if read.ids is None:
            out.append(_Segment(start, end, new_prediction_ids(end - start), False, at))
            continue
        for s in range(start, end, MAX_RUN):
            e = min(s + MAX_RUN, end)
            out.append(_Segment(s, e, keyed_ids(model_name, read.ids[s:e]), True, at))
    return out


def _log_rows(
    batch: dict[str, Column],
    spec: FileImport,
    schema: ModelSchema,
    version: int,
    read: _Read,
    parts: list[_Segment],
    now: datetime,
) -> list[RequestRows]:
    """The log rows of ``parts``: the inputs as columns (the writer types them by the contract's layout) and
    as row documents, the contract's flags computed column by column."""
    features = [f for f in schema.feature_names if f in batch]
    flags = flag_columns(schema, {f: batch[f] for f in features}, read.n)
    output = schema.output
    for i in output_flags(output, read.values):
        flags[i] = [*(flags[i] or []), f"{output.name}:{OUTPUT_FLAG}"]
    values = {f: as_python(batch[f]) for f in features}
    documents = [dict(zip(features, row, strict=True)) for row in zip(*values.values(), strict=True)]
    layout = log_layout(schema)
    absent = [None] * read.n
    by_name = {f: values.get(f, absent) for f in (*layout.numeric, *layout.categorical)}
    return [
        RequestRows(
            model_name=spec.model_name,
            model_version=version,
            logged_at=seg.at or now,
            request_id="import",
            protocol=SOURCE,
            latency_ms=0.0,
            status=PredictionStatus.OK.value,
            ids=seg.ids,
            inputs=documents[seg.start : seg.end],
            values=read.values[seg.start : seg.end],
            flags=flags[seg.start : seg.end],
            layout=layout,
            columns={name: column[seg.start : seg.end] for name, column in by_name.items()},
            outputs=read.vectors[seg.start : seg.end] if read.vectors is not None else None,
            source=SOURCE,
        )
        for seg in parts
    ]


def _labelled(read: _Read, parts: list[_Segment]) -> list[tuple[str, float]]:
    """The labels of the rows of ``parts``, by prediction id."""
    if read.labels is None:
        return []
    out: list[tuple[str, float]] = []
    for seg in parts:
        for pid, label in zip(seg.ids, read.labels[seg.start : seg.end], strict=True):
            if label is not None:
                out.append((pid, label))
    return out


def _store_labels(
    db: Database, model_name: str, labels: list[tuple[str, float]], result: Imported, writer: LogWriter
) -> None:
    """Store ``labels`` as feedback (their predictions are in the table), and in the lake (lake_mode)."""
    from predictions.service import store_feedback

    if labels and writer.lake is not None and not writer.database:  # lake_mode=only
        result.labels += store_lake_labels(sink=writer.lake, model_name=model_name, labels=labels)
    elif labels:
        with db.session() as session:
            stored = store_feedback(session=session, model_name=model_name, labels=labels)
        result.labels += stored.stored
        result.labels_present += stored.present
        if writer.lake is not None:
            store_lake_labels(
                sink=writer.lake, model_name=model_name, labels=labels, skip=set(stored.unknown)
            )


def _put(writer: LogWriter, rows: RequestRows) -> None:
    """Queue ``rows``, waiting for the writer while its queue is full."""
    while not writer.offer(rows):
        writer.flush(5.0)
