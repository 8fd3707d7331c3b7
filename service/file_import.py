"""``driftwarden predictions import FILE``: a batch job's scored rows (CSV or Parquet) into the log.

The file is read twice in batches (bounded memory whatever its size): the first pass checks every row the way
the ingest route checks a record (the prediction fits the version's task, the label the task's labels, the
time parses, the id is usable) and stops at the first bad row, naming it, before anything is written; the
second pass writes. A row's inputs are the columns of the version's contract; the contract flags, never
refuses. Rows go through the log's own writer (:class:`predictions.writer.LogWriter`, its spool included:
rows the database cannot take now are replayed by the next server that adopts the spool slot). With
``--id-column`` the rows' prediction ids derive from their ids as the ingest route's do (per run of one time,
up to 2048 rows), and runs the log already holds are skipped, so an import run again stores nothing twice.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from core.config import Settings
from core.database import Database, make_engine
from core.errors import Invalid, NotFound
from core.tabular import CodedColumn, Column, TableStream
from predictions.pending import RequestRows
from predictions.service import logged_predictions
from predictions.spool import Spool, spool_dir
from predictions.writer import LogWriter
from registry.schema import ModelSchema, Task
from registry.service import get_version, read_schema, serving_version
from service.serving.codecs import BadRequest
from service.serving.readers import label_reader
from service.serving.records import Checked, Record, check_records, read_prediction, request_rows, segments

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


@dataclass
class Imported:
    """What an import read and stored."""

    rows: int = 0
    stored: int = 0
    duplicates: int = 0
    flagged: int = 0
    labels: int = 0
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
    stream = TableStream(spec.path, batch_rows=BATCH_ROWS)
    columns = _columns(stream, spec, schema)
    result = Imported(version=version)
    for batch, first in _batches(stream, columns):  # pass 1: every row checked, nothing written
        n = _validate(batch, spec, schema, version, first)
        result.rows += n
        if progress is not None:
            progress(n)
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


def _columns(stream: TableStream, spec: FileImport, schema: ModelSchema) -> list[str]:
    """The columns to read: the contract's features the file has, the prediction, id, time and label."""
    named = {
        "--prediction-column": spec.prediction_column,
        "--id-column": spec.id_column,
        "--time-column": spec.time_column,
        "--label-column": spec.label_column,
    }
    for option, name in named.items():
        if name is not None and name not in stream.names:
            raise Invalid(
                f"{option} {name!r} is not a column of {spec.path} (its columns: {', '.join(stream.names)})"
            )
    features = [f for f in schema.feature_names if f in stream.names]
    if not features:
        raise Invalid(
            f"{spec.path} has none of the features of {spec.model_name}'s contract "
            f"({', '.join(schema.feature_names)})"
        )
    extra = [name for name in named.values() if name is not None and name not in features]
    return list(dict.fromkeys([*features, *extra]))


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


def _values(column: Column) -> list[Any]:
    """A column as Python values: None for a missing number or text."""
    if isinstance(column, CodedColumn):
        return column.decode().tolist()
    values = column.tolist()
    if column.dtype.kind == "f":
        return [None if v != v else v for v in values]
    return values


def _records(batch: dict[str, Column], spec: FileImport, schema: ModelSchema, first: int) -> list[Record]:
    """One record per row (``index``: the row number in the file, from 0)."""
    features = [f for f in schema.feature_names if f in batch]
    inputs = [
        dict(zip(features, row, strict=True))
        for row in zip(*(_values(batch[f]) for f in features), strict=True)
    ]
    n = len(inputs)
    predictions = _predictions(batch[spec.prediction_column], schema, spec.prediction_column, first)
    ids = _ids(batch[spec.id_column], spec.id_column, first) if spec.id_column else [None] * n
    times = _times(batch[spec.time_column], spec.time_column, first) if spec.time_column else [None] * n
    labels = _values(batch[spec.label_column]) if spec.label_column else [None] * n
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


def _validate(
    batch: dict[str, Column], spec: FileImport, schema: ModelSchema, version: int, first: int
) -> int:
    """Pass 1 over one batch: what can refuse a row (its prediction, label, time, id), checked by column;
    the first bad row is read as a record, so its error is the ingest route's. Returns the batch's rows."""
    predictions = _predictions(batch[spec.prediction_column], schema, spec.prediction_column, first)
    n = len(predictions)
    if spec.id_column:
        _ids(batch[spec.id_column], spec.id_column, first)
    if spec.time_column:
        _times(batch[spec.time_column], spec.time_column, first)
    bad = _bad_predictions(predictions, schema)
    labels = _values(batch[spec.label_column]) if spec.label_column else None
    if labels is not None:
        read = label_reader(schema)
        verdict: dict[Any, bool] = {}
        for i, label in enumerate(labels):
            if label is None or i >= bad:
                continue
            ok = verdict.get(label)
            if ok is None:
                ok = verdict[label] = read(label) is not None
            if not ok:
                bad = i
                break
    if bad < n:
        one = {name: column[bad : bad + 1] for name, column in batch.items()}
        _check(_records(one, spec, schema, first + bad), version, schema)  # raises, naming the row
        raise Invalid(f"row {first + bad}: its prediction or label does not fit the {schema.kind.short} task")
    return n


def _bad_predictions(predictions: list[Any], schema: ModelSchema) -> int:
    """The index of the first prediction the task cannot take (``len`` when none)."""
    if schema.kind is Task.MULTICLASS:
        for i, value in enumerate(predictions):
            try:
                read_prediction(Record(i, None, None, None, {}, value, None, False), schema)
            except BadRequest:
                return i
        return len(predictions)
    values = np.array([np.nan if v is None else v for v in predictions], dtype=np.float64)
    ok = np.isfinite(values)
    if schema.kind is Task.BINARY:
        ok &= (values >= 0.0) & (values <= 1.0)
    wrong = np.flatnonzero(~ok)
    return int(wrong[0]) if wrong.size else len(predictions)


def _predictions(column: Column, schema: ModelSchema, name: str, first: int) -> list[Any]:
    if isinstance(column, CodedColumn):  # text: a multi-class model's lists (JSON arrays, or a list column)
        import json

        out: list[Any] = []
        parsed: dict[int, Any] = {}
        for i, code in enumerate(column.codes.tolist()):
            if code not in parsed:
                text = column.categories[code] if code >= 0 else None
                try:
                    parsed[code] = json.loads(text) if text else None
                except ValueError:
                    raise Invalid(
                        f"row {first + i}: {name} holds {str(text)[:40]!r}, neither a number nor a JSON list "
                        "of class probabilities"
                    ) from None
            out.append(parsed[code])
        return out
    return [None if v != v else v for v in column.astype(np.float64).tolist()]


def _ids(column: Column, name: str, first: int) -> list[str | None]:
    values = _values(column)
    out: list[str | None] = []
    for i, v in enumerate(values):
        if v is None or v == "":
            raise Invalid(
                f"row {first + i}: {name} is empty: every row needs its id (or leave --id-column out)"
            )
        out.append(str(int(v)) if isinstance(v, float) and v.is_integer() else str(v))
    return out


def _times(column: Column, name: str, first: int) -> list[datetime | None]:
    """Each row's time: RFC 3339 text or a Parquet timestamp; a time without its offset is UTC."""
    if not isinstance(column, CodedColumn):
        raise Invalid(f"{name} holds numbers; give times as RFC 3339 text or a Parquet timestamp column")
    parsed: list[datetime | None] = []
    for text in column.categories.tolist():
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            parsed.append(None)
            continue
        parsed.append(moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC))
    out: list[datetime | None] = []
    for i, code in enumerate(column.codes.tolist()):
        found = parsed[code] if code >= 0 else None
        if found is None:
            shown = column.categories[code] if code >= 0 else "(empty)"
            raise Invalid(
                f"row {first + i}: {name} {shown!r} is not a time (RFC 3339, e.g. 2026-12-01T10:00:00Z)"
            )
        out.append(found)
    return out


def _check(records: Sequence[Record], version: int, schema: ModelSchema) -> list[Checked]:
    """The records read by the contract; a bad one is one line naming its row and field."""
    try:
        return check_records(records, {records[0].version if records else None: (version, schema)})
    except BadRequest as exc:
        raise Invalid(re.sub(r"records\[(\d+)\]\.", r"row \1: ", str(exc))) from None


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
    """Pass 2: the rows through the log's writer (ids the log holds skipped), their labels as feedback."""
    from predictions.service import record_feedback

    url = settings.database_url.get_secret_value()
    engine = make_engine(url)
    writer = LogWriter(
        engine=engine,
        spool=Spool.claim(spool_dir(settings.spool_path, url), max_bytes=settings.spool_max_bytes),
        durability="fast",
        queue_max_rows=4 * BATCH_ROWS,
        batch_max_rows=BATCH_ROWS,
        flush_interval_s=0.05,
        retry_interval_s=settings.log_retry_interval_s,
    )
    writer.start()
    now = datetime.now(UTC)
    try:
        for batch, first in _batches(stream, columns):
            records = _records(batch, spec, schema, first)
            if not records:
                continue
            (group,) = _check(records, version, schema)
            parts = segments(spec.model_name, group, now)
            firsts = [seg.ids[0] for seg in parts if seg.keyed]
            known: set[str] = set()
            if firsts:
                writer.flush(60.0)  # this file's earlier rows are in the table before its ids are looked up
                with db.session() as session:
                    known = set(logged_predictions(session=session, model_name=spec.model_name, ids=firsts))
            labels: list[tuple[str, float]] = []
            for seg in parts:
                if seg.keyed and seg.ids[0] in known:
                    result.duplicates += len(seg.keep)
                    continue
                rows = request_rows(spec.model_name, group, seg.keep, seg.ids, now, "import", source=SOURCE)
                _put(writer, rows)
                result.stored += len(rows)
                result.flagged += sum(1 for f in rows.flags if f)
                for pid, i in zip(seg.ids, seg.keep, strict=True):
                    label = group.labels[i]
                    if label is not None:
                        labels.append((pid, label))
            if labels:
                writer.flush(60.0)
                with db.session() as session:
                    result.labels += record_feedback(
                        session=session, model_name=spec.model_name, labels=labels
                    )[0]
            if progress is not None:
                progress(len(records))
    finally:
        writer.close(settings.shutdown_timeout_s)
        result.spooled = writer.spool.pending_rows
        engine.dispose()


def _put(writer: LogWriter, rows: RequestRows) -> None:
    """Queue ``rows``, waiting for the writer while its queue is full."""
    while not writer.offer(rows):
        writer.flush(5.0)
