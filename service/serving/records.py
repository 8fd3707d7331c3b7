"""Records of predictions another stack answered, read by a version's contract: the one path of every source
that is not driftwarden's own serving (the ingest route, file imports).

A record is shape-checked on its own (:func:`parse_records` for a JSON body), then read by its version's
contract (:func:`check_records`: the prediction by the task, the label by the task's labels; the input
contract flags, since the model has already answered, and refuses only what no log should hold), then cut
into log rows (:func:`segments`: one time, all named or none, at most :data:`MAX_RUN` named records) whose
prediction ids derive from the records' own ids (:func:`keyed_ids`), so the same run sent again gets the
same ids.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.http import NUL_RULE, nul_in_row
from core.numbers import finite_float
from core.times import outside, utc_in_range
from predictions.models import PredictionStatus
from predictions.pending import RequestRows
from predictions.service import new_prediction_ids
from registry.contracts import OUTPUT_FLAG, ContractViolation, flag_rows, output_flags
from registry.schema import SUM_TOLERANCE, ModelSchema, Task
from service.serving.codecs import BadRequest
from service.serving.readers import LabelReader, label_reader, log_layout

MAX_RECORDS = 10_000  # records per request
MAX_ID_LENGTH = 128
MAX_RUN = 2048  # named records per log row (the ids' three counted hex digits, as the serving path's)
SOURCE = "ingest"
_NAMESPACE = uuid.UUID(
    "6f1d3a52-8f0e-4c59-9a3e-0d5b1f7c2e41"
)  # driftwarden's UUIDv5 namespace for record ids
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Record:
    """One record as sent, its shape checked (its prediction and label are read by the version's task)."""

    index: int
    id: str | None
    time: datetime | None
    version: int | None
    inputs: dict[str, Any]
    prediction: Any
    label: Any
    has_label: bool


def keyed_ids(model_name: str, keys: Sequence[str]) -> list[str]:
    """The prediction ids of a run of records the caller named ``keys`` (in order, at most
    :data:`MAX_RUN`): one UUIDv5 prefix of the model and every key, counted in its last three hex digits, so
    the run is one log row and the same run sent again gets the same ids (and is found in the log)."""
    base = str(uuid.uuid5(_NAMESPACE, "\n".join((model_name, *keys))))
    return [f"{base[:33]}{i:03x}" for i in range(len(keys))]


def parse_records(payload: Any) -> list[Record]:
    """The body's records, each shape checked; a :class:`BadRequest` names the first bad field."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("records"), list):
        raise BadRequest(
            'the body must be {"records": [{"inputs": {...}, "prediction": ..., "id"?: "...", "time"?: '
            '"RFC 3339", "version"?: N, "label"?: ...}, ...]}'
        )
    items = payload["records"]
    if not items:
        raise BadRequest('"records" is empty', "empty")
    if len(items) > MAX_RECORDS:
        raise BadRequest(f"{len(items)} records exceed the limit of {MAX_RECORDS} per request", "max_rows")
    records = [_record(i, item) for i, item in enumerate(items)]
    seen: dict[str, int] = {}
    for r in records:
        if r.id is not None:
            if r.id in seen:
                raise BadRequest(
                    f"records[{r.index}].id repeats records[{seen[r.id]}].id ({r.id!r})", "unique"
                )
            seen[r.id] = r.index
    return records


def _record(i: int, item: Any) -> Record:
    where = f"records[{i}]"
    if not isinstance(item, Mapping):
        raise BadRequest(f"{where} must be an object", "format")
    unknown = sorted(set(item) - {"id", "time", "version", "inputs", "prediction", "label"})
    if unknown:
        raise BadRequest(
            f"{where} has unknown field(s) {', '.join(map(repr, unknown))} (allowed: id, time, version, "
            "inputs, prediction, label)",
            "format",
        )
    inputs = item.get("inputs")
    if not isinstance(inputs, Mapping):
        raise BadRequest(f"{where}.inputs is required: an object of feature values", "required")
    for key, value in inputs.items():
        if not isinstance(value, _SCALARS):
            raise BadRequest(f"{where}.inputs.{key} must be a number, a string or null", "type")
    check_storable(inputs, f"{where}.inputs")
    if "prediction" not in item:
        raise BadRequest(f"{where}.prediction is required: the model's answer", "required")
    return Record(
        index=i,
        id=check_id(item.get("id"), field=f"{where}.id"),
        time=_time(where, item.get("time")),
        version=_version(where, item.get("version")),
        inputs=dict(inputs),
        prediction=item["prediction"],
        label=item.get("label"),
        has_label="label" in item and item["label"] is not None,
    )


def check_storable(row: Mapping[str, Any], where: str) -> None:
    """Refuse a row of inputs that no log can store (``core.http.NUL_RULE``): a 400 naming the feature."""
    name = nul_in_row(row)
    if name is not None:
        raise BadRequest(f"{where}[{name!r}]: {NUL_RULE}", "nul")


def check_id(value: Any, *, field: str) -> str | None:
    """A record's own id (None: none): the one rule of the ingest route and ``predictions import``
    (``field`` names it in the error)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_ID_LENGTH
        or not value.isprintable()
        or value != value.strip()
    ):
        raise BadRequest(
            f"{field} must be a string of 1 to {MAX_ID_LENGTH} printable characters without surrounding "
            "spaces",
            "type",
        )
    return value


def _time(where: str, value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            at = utc_in_range(moment)
            if at is None:
                raise BadRequest(f"{where}.time {outside(value)}", "time")
            return at
    raise BadRequest(
        f"{where}.time must be an RFC 3339 time with its UTC offset, e.g. 2026-12-01T10:00:00Z, "
        f"got {value!r}",
        "time",
    )


def _version(where: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{where}.version must be a version number (an integer from 1)", "type")
    return value


UNANSWERED: Any = object()
"""The prediction of a record whose model never answered (a KServe request whose response did not come): the
log keeps its inputs (they count for input drift) and NaN as its output."""


def read_prediction(record: Record, schema: ModelSchema) -> tuple[float, list[float | None] | None]:
    """The record's prediction as the log holds it: the value, and the vector of a multi-class model."""
    if record.prediction is UNANSWERED:
        vector: list[float | None] | None = (
            [None] * len(schema.classes) if schema.kind is Task.MULTICLASS else None
        )
        return math.nan, vector
    return read_value(record.prediction, schema, f"records[{record.index}].prediction")


def read_value(value: Any, schema: ModelSchema, where: str) -> tuple[float, list[float | None] | None]:
    """A prediction ``value`` read by the task (``where`` names it in the 400): the value the log holds, and
    the vector of a multi-class model."""
    kind = schema.kind
    if kind is Task.MULTICLASS:
        k = len(schema.classes)
        if (
            isinstance(value, list)
            and len(value) == k
            and all(finite_float(v) is not None and 0.0 <= v <= 1.0 for v in value)
            and abs(sum(value) - 1.0) <= SUM_TOLERANCE
        ):
            vector = [float(v) for v in value]
            return max(vector), list(vector)
        raise BadRequest(
            f"{where} must be the {k} class probabilities (each in [0, 1], summing to 1) in the order "
            f"{', '.join(map(repr, schema.classes))}, got {str(value)[:60]}",
            "prediction",
        )
    number = finite_float(value)
    if kind is Task.BINARY:
        if number is None or not 0.0 <= number <= 1.0:
            raise BadRequest(
                f"{where} must be the positive class's probability, a number in [0, 1], got {value!r}",
                "prediction",
            )
        return number, None
    if number is None:
        raise BadRequest(
            f"{where} must be a finite number (the regression's value), got {value!r}", "prediction"
        )
    return number, None


@dataclass
class Checked:
    """The records of one version, read by its contract."""

    version: int
    schema: ModelSchema
    records: list[Record]
    values: list[float]
    vectors: list[list[float | None]] | None
    flags: list[list[str] | None]
    labels: list[float | None]


def check_records(
    records: Sequence[Record], contracts: Mapping[int | None, tuple[int, ModelSchema]]
) -> list[Checked]:
    """Read every record by its version's contract (``contracts[record.version]``); raise BadRequest."""
    groups: dict[int, Checked] = {}
    readers: dict[int, LabelReader] = {}  # one per version: a multi-class reader indexes its classes once
    for r in records:
        version, schema = contracts[r.version]
        group = groups.get(version)
        if group is None:
            multi = schema.kind is Task.MULTICLASS
            group = groups[version] = Checked(version, schema, [], [], [] if multi else None, [], [])
            readers[version] = label_reader(schema)
        value, vector = read_prediction(r, schema)
        label: float | None = None
        if r.has_label:
            reader = readers[version]
            label = reader.read(r.label)
            if label is None:
                raise BadRequest(
                    f"records[{r.index}].label must be {reader.allowed}, got {r.label!r}", "label"
                )
        group.records.append(r)
        group.values.append(value)
        if group.vectors is not None:
            group.vectors.append(vector or [])
        group.labels.append(label)
    for group in groups.values():
        try:
            group.flags = flag_rows(group.schema, [r.inputs for r in group.records])
        except ContractViolation as exc:  # a value no log holds (a category over its max_length)
            v = exc.violations[0]
            where = f"records[{group.records[v.row or 0].index}].inputs.{v.feature}"
            raise BadRequest(f"{where}: {v.message}", v.rule) from None
        spec = group.schema.output
        for i in output_flags(spec, group.values):
            group.flags[i] = [*(group.flags[i] or []), f"{spec.name}:{OUTPUT_FLAG}"]
    return list(groups.values())


@dataclass(frozen=True)
class Segment:
    """Records of one group, one time and one kind (all named by the caller, or none) that become one log
    row: their positions in the group and their prediction ids."""

    group: Checked
    keep: list[int]
    ids: list[str]
    keyed: bool


def segments(model_name: str, group: Checked, now: datetime) -> list[Segment]:
    """The group's log rows: split where the time changes, where records start or stop carrying an ``id``,
    and every :data:`MAX_RUN` named records; named runs get :func:`keyed_ids`, the others fresh ids."""
    out: list[Segment] = []
    for run in runs(group, now):
        start = 0
        while start < len(run):
            keyed = group.records[run[start]].id is not None
            end = start + 1
            while end < len(run) and (group.records[run[end]].id is not None) == keyed:
                end += 1
            part = run[start:end]
            if keyed:
                for k in range(0, len(part), MAX_RUN):
                    chunk = part[k : k + MAX_RUN]
                    keys = [group.records[i].id or "" for i in chunk]
                    out.append(Segment(group, chunk, keyed_ids(model_name, keys), True))
            else:
                out.append(Segment(group, part, new_prediction_ids(len(part)), False))
            start = end
    return out


def runs(group: Checked, now: datetime) -> list[list[int]]:
    """The group's records split where their time changes (one request row holds one time)."""
    out: list[list[int]] = []
    last: datetime | None = None
    for i, r in enumerate(group.records):
        moment = r.time or now
        if not out or moment != last:
            out.append([])
        out[-1].append(i)
        last = moment
    return out


def request_rows(
    model_name: str,
    group: Checked,
    keep: list[int],
    ids: list[str],
    now: datetime,
    request_id: str | None,
    *,
    source: str = SOURCE,
    protocol: str | None = None,
) -> RequestRows:
    """The log rows of records ``keep`` of one run of ``group`` (one time), with their prediction ids."""
    first = group.records[keep[0]]
    return RequestRows(
        model_name=model_name,
        model_version=group.version,
        logged_at=first.time or now,
        request_id=request_id,
        protocol=protocol or source,
        latency_ms=0.0,
        status=PredictionStatus.OK.value,
        ids=ids,
        inputs=[group.records[i].inputs for i in keep],
        values=[group.values[i] for i in keep],
        flags=[group.flags[i] for i in keep],
        layout=log_layout(group.schema),
        outputs=[group.vectors[i] for i in keep] if group.vectors is not None else None,
        source=source,
    )
