"""The request workflows: predict (check -> batch -> check output -> log) and feedback."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine

from alerts.flows import firing_findings
from core.runtime import Runtime
from predictions.lake.labels import store_lake_labels
from predictions.models import PredictionStatus
from predictions.pending import RequestRows
from predictions.service import new_prediction_ids, record_feedback
from predictions.writer import LogWriter
from registry.contracts import (
    OUTPUT_FLAG,
    Violation,
    check_inputs,
    check_outputs,
    check_vectors,
    output_flags,
)
from registry.schema import SUM_TOLERANCE, ModelSchema, OutputSpec
from registry.signature import SourceSignature
from service.serving.batcher import BatcherClosed
from service.serving.codecs import BadRequest, Columns
from service.serving.manager import ModelManager, NotServed
from service.serving.metrics import Metrics
from service.serving.readers import label_reader, log_layout

log = logging.getLogger("driftwarden.serving")

MAX_FEEDBACK_LABELS = 10_000
PREDICTION_ID = re.compile(r"^[\x21-\x7e]{1,36}$")  # a UUID; anything else can never be a logged id


@dataclass
class AppState(Runtime):
    """What the routes need: settings and database (every domain's), loaded models, log writer, counters."""

    manager: ModelManager
    writer: LogWriter | None
    metrics: Metrics
    pairing: Engine | None = None  # the CloudEvents pairing's engine (None: the database's own)

    def flush_predictions(self, timeout_s: float) -> None:
        if self.writer is not None:
            self.writer.flush(timeout_s)

    def extra_findings(self, model_name: str) -> list[dict[str, Any]]:
        """The model's firing alerts: the drift report's headline is never green while one stands."""
        return [
            {
                "kind": "alert",
                "subject": a["name"],
                "message": f"alert {a['name']} firing ({a['severity']}"
                + (", silenced" if a["silenced"] else "")
                + f") since {a['fired_at']}: {a['summary']}",
            }
            for a in firing_findings(db=self.db, model_name=model_name)
        ]


@dataclass(frozen=True)
class Prediction:
    """The answer to one predict request."""

    model_name: str
    version: int
    output_name: str
    values: list[Any]  # a number per row, or a probability vector per row (multi-class)
    prediction_ids: list[str]
    signature: SourceSignature | None = None  # an imported model's own signature: answered in its terms
    outputs: Mapping[str, Any] | None = None  # with a signature: the model's outputs (its own among them)


class OutputContractError(RuntimeError):
    """The model answered outside its output contract; the caller gets an error, never the value."""

    def __init__(self, violations: list[Violation], version: int) -> None:
        self.violations = violations
        self.version = version
        super().__init__(
            "the model's output broke its contract: " + "; ".join(v.describe() for v in violations[:5])
        )


async def predict(
    *,
    state: AppState,
    model_name: str,
    version: int | None,
    label: str | None,
    parse: Any,
    request_id: str | None,
    protocol: str,
    started: float,
) -> Prediction:
    """Resolve the version, check the inputs, run the batched model, check the outputs, log every row (with
    ``request_id``: the caller's, None when it sent none)."""
    for attempt in (1, 2):
        lv = state.manager.resolve(model_name, version=version, label=label)
        columns: Columns = parse(lv.schema, lv.signature)
        checked = check_inputs(
            lv.schema,
            columns.values,
            columns.n,
            max_rows=state.settings.max_rows_per_request,
            rows=columns.rows,
        )
        try:
            outputs = await lv.batcher.submit(checked.arrays, checked.n)
            break
        except BatcherClosed:  # the version was swapped out between resolve and submit: take the new one
            if attempt == 2:
                raise NotServed(f"model '{model_name}' is being reloaded; retry") from None
    answer = _answer(lv.schema, outputs, checked.flags)
    problems = answer.problems
    latency_ms = (time.perf_counter() - started) * 1000.0
    ids = new_prediction_ids(checked.n)
    values = answer.values
    floats = [v if math.isfinite(v) else None for v in values] if problems else values
    writer = state.writer
    if writer is not None:
        # the writer thread builds the rows and their typed copies (predictions/pending.py); the request's
        # columns are the logged values when the request's own row objects are logged
        rows = RequestRows(
            model_name=lv.model_name,
            model_version=lv.version,
            logged_at=datetime.now(UTC),
            request_id=request_id,
            protocol=protocol,
            latency_ms=latency_ms,
            status=(PredictionStatus.OUTPUT_VIOLATION if problems else PredictionStatus.OK).value,
            ids=ids,
            inputs=checked.rows,
            values=floats,
            flags=answer.flags,
            layout=log_layout(lv.schema),
            columns=columns.values if checked.rows is columns.rows else None,
            outputs=answer.vectors,
        )
        if not writer.offer(rows):  # durable mode, or a full queue: wait for the commit or the spool
            await writer.submit(rows)
    if problems:
        state.metrics.output_violation(model_name, sorted({p.rule for p in problems}))
        log.error("output contract violated by %s:%d: %s", model_name, lv.version, problems[0].describe())
        raise OutputContractError(problems, lv.version)
    state.metrics.predicted(model_name, lv.version, checked.n, answer.flags)
    shown: list[Any] = answer.vectors if answer.vectors is not None else values
    if lv.signature is not None:
        return Prediction(model_name, lv.version, lv.schema.output.name, shown, ids, lv.signature, outputs)
    return Prediction(model_name, lv.version, lv.schema.output.name, shown, ids)


@dataclass(frozen=True)
class Answer:
    """A batch's outputs as served and logged: one number per row, the vectors (multi-class), flags."""

    values: list[float]  # binary: probability; regression: value; multi-class: the predicted class's
    vectors: list[list[float | None]] | None
    flags: list[list[str] | None]
    problems: list[Violation]


def _answer(schema: ModelSchema, outputs: Mapping[str, Any], flags: list[list[str] | None]) -> Answer:
    """Check the model's outputs against the contract of its task (a regression value outside its expected
    range is flagged on its row)."""
    spec = schema.output
    raw = np.asarray(outputs[spec.name], dtype=np.float64)
    if spec.width > 1:
        return _vectors(spec, raw, flags)
    values: list[float] = raw.reshape(-1).tolist()
    outside = output_flags(spec, values)
    if outside:
        flags = list(flags)
        tag = f"{spec.name}:{OUTPUT_FLAG}"
        for i in outside:
            flags[i] = [*(flags[i] or []), tag]
    return Answer(values, None, flags, check_outputs(spec, values))


def _vectors(spec: OutputSpec, raw: np.ndarray, flags: list[list[str] | None]) -> Answer:
    """A multi-class answer: each row a probability vector (checked in Python: a request's few rows cost
    less than numpy's calls on them; :func:`registry.contracts.check_vectors` words a violation)."""
    rows: list[list[Any]] = raw.tolist() if raw.ndim == 2 and raw.shape[1] == spec.width else []
    if len(rows) == len(flags) and all(_is_probabilities(row) for row in rows):
        return Answer([max(row) for row in rows], rows, flags, [])
    problems = check_vectors(spec, raw) or [
        Violation("output_shape", f"model output has shape {list(raw.shape)}", feature=spec.name)
    ]
    if not rows or len(rows) != len(flags):
        rows = [[math.nan] * spec.width for _ in flags]  # logged as an output violation, answered 500
    vectors: list[list[float | None]] = [[v if math.isfinite(v) else None for v in row] for row in rows]
    tops = [max((v for v in row if v is not None), default=math.nan) for row in vectors]
    return Answer(tops, vectors, flags, problems)


def _is_probabilities(row: list[float]) -> bool:
    return all(0.0 <= v <= 1.0 for v in row) and abs(math.fsum(row) - 1.0) <= SUM_TOLERANCE


UUID_TEXT = re.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")


def parse_feedback(payload: Any, schema: ModelSchema | None = None) -> list[tuple[str, float]]:
    """``{"labels": [{"prediction_id": "...", "label": ...}]}`` -> pairs; errors name the item and rule.

    The label is the task's (``schema``'s; binary without one): 0 or 1; a class's index or name
    (multi-class, stored as the index); a finite number (regression). A UUID's hex digits are
    case-insensitive (RFC 9562): the ids this server hands out are lower case, and an id sent in upper case
    is the same id. A binary label may also be true or false (documented in the route's schema)."""
    read = label_reader(schema, booleans=True)
    if not isinstance(payload, Mapping) or not isinstance(payload.get("labels"), list):
        raise BadRequest(
            f'the body must be {{"labels": [{{"prediction_id": "...", "label": {read.hint}}}, ...]}}'
        )
    items = payload["labels"]
    if not items:
        raise BadRequest('"labels" is empty', "empty")
    if len(items) > MAX_FEEDBACK_LABELS:
        raise BadRequest(
            f"{len(items)} labels exceed the limit of {MAX_FEEDBACK_LABELS} per request", "max_rows"
        )
    out: list[tuple[str, float]] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise BadRequest(f"labels[{i}] must be an object", "format")
        pid = item.get("prediction_id")
        if not isinstance(pid, str) or not PREDICTION_ID.match(pid):
            raise BadRequest(
                f"labels[{i}].prediction_id must be a prediction id string (1 to 36 printable ASCII "
                "characters)",
                "type",
            )
        label = read(item.get("label"))
        if label is None:
            raise BadRequest(f"labels[{i}].label must be {read.allowed}, got {item.get('label')!r}", "label")
        out.append((pid.lower() if UUID_TEXT.match(pid) else pid, label))
    return out


async def feedback(*, state: AppState, model_name: str, labels: list[tuple[str, float]]) -> dict[str, Any]:
    """Store labels of known predictions; unknown ids and ids sent more than once are reported back.

    An id repeated within one request keeps its last label (in the request's order) and is listed in
    ``duplicate_ids``, so a client can tell that one of its labels was overridden.
    """
    if model_name not in state.manager.models:
        raise NotServed(f"Servable not found for request: model '{model_name}' is not served here")
    if state.writer is not None:  # predictions answered moments ago may still be on their way to the table
        await asyncio.to_thread(state.writer.flush, 5.0)

    def _store() -> tuple[int, list[str]]:
        writer = state.writer
        sink = writer.lake if writer is not None else None
        if (
            sink is not None and writer is not None and not writer.database
        ):  # lake_mode=only: see predictions.lake.labels
            return store_lake_labels(sink=sink, model_name=model_name, labels=labels), []
        with state.db.session() as session:
            stored, unknown = record_feedback(session=session, model_name=model_name, labels=labels)
        if sink is not None:  # lake_mode=also: the labels of known predictions, to the lake too
            store_lake_labels(sink=sink, model_name=model_name, labels=labels, skip=set(unknown))
        return stored, unknown

    stored, unknown = await asyncio.to_thread(_store)
    state.metrics.labels(model_name, stored, len(unknown))
    seen: Counter[str] = Counter(pid for pid, _ in labels)
    duplicates = [pid for pid, n in seen.items() if n > 1]
    return {"stored": stored, "unknown_ids": unknown, "duplicate_ids": duplicates}
