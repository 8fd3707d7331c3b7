"""Predictions answered by another serving stack, written into the same prediction log (``source``).

``POST /v1/models/{name}/predictions`` takes ``{"records": [{"id"?, "time"?, "version"?, "inputs": {...},
"prediction": ..., "label"?}]}``. The whole body is checked before anything is written, so a refused body
stores nothing: a record without an ``inputs`` object, a value that is not a JSON scalar, a prediction that
does not fit the version's task, a label the task cannot take or a time that does not parse is a 400 naming
``records[i].<field>`` and the rule. The model has already answered, so the input contract flags a record
(``"<feature>:<rule>"``, hard rules too) and refuses only a value no log should hold (a category over its
``max_length``: :data:`registry.contracts.REFUSED_WHEN_LOGGED`).

Records that carry an ``id`` (the caller's own, up to 128 printable characters) form runs (consecutive
records of one time, up to 2048) whose prediction ids derive from the model and every id of the run
(:func:`keyed_ids`): one log row per run, and a run sent again (a retried batch) gets the same ids, is found
in the log and skipped (``duplicate_ids``); its labels the log already holds are counted in
``labels_already_stored``, not in ``labels_stored``. Labels sent later go to the feedback route under
``prediction_ids[i]``. A record without ``time`` is logged at its arrival; one without ``version`` belongs to
the model's serving version (served here or elsewhere).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.database import unreachable
from predictions.lake.labels import store_lake_labels
from predictions.service import StoredFeedback, logged_predictions, store_feedback
from service.serving.flows import AppState
from service.serving.records import SOURCE, check_records, parse_records, request_rows, segments

log = logging.getLogger("driftwarden.ingest")


class LogOff(RuntimeError):
    """The server runs without its prediction log (``serve --no-log``): nothing can be ingested."""


@dataclass
class Ingested:
    """What one ingest request stored."""

    stored: int
    duplicate_ids: list[str]
    prediction_ids: list[str]
    flagged: int
    labels_stored: int
    labels_already_stored: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "stored": self.stored,
            "duplicate_ids": self.duplicate_ids,
            "prediction_ids": self.prediction_ids,
            "flagged": self.flagged,
            "labels_stored": self.labels_stored,
            "labels_already_stored": self.labels_already_stored,
        }


async def ingest(*, state: AppState, model_name: str, payload: Any, request_id: str | None) -> Ingested:
    """Check a whole body of records, then log them (a named run the log has is skipped), store labels."""
    writer = state.writer
    if writer is None:
        raise LogOff("this server runs without its prediction log (serve --no-log): it cannot ingest")
    records = parse_records(payload)
    contracts = {v: state.manager.contract(model_name, version=v) for v in {r.version for r in records}}
    now = datetime.now(UTC)
    parts = [seg for group in check_records(records, contracts) for seg in segments(model_name, group, now)]
    firsts = [seg.ids[0] for seg in parts if seg.keyed]
    known = await _known(state, model_name, firsts) if firsts else set()
    ids: dict[int, str] = {}
    result = Ingested(0, [], [], 0, 0)
    labels: list[tuple[str, float]] = []
    for seg in parts:
        group = seg.group
        for i, pid in zip(seg.keep, seg.ids, strict=True):
            ids[group.records[i].index] = pid
            label = group.labels[i]
            if label is not None:
                labels.append((pid, label))
        if seg.keyed and seg.ids[0] in known:
            result.duplicate_ids += [group.records[i].id or "" for i in seg.keep]
            continue
        rows = request_rows(model_name, group, seg.keep, seg.ids, now, request_id)
        if not writer.offer(rows):
            await writer.submit(rows)
        state.metrics.ingested(model_name, SOURCE, len(rows), rows.flags)
        result.stored += len(rows)
        result.flagged += sum(1 for f in rows.flags if f)
    if labels:
        stored = await _store_labels(state, model_name, labels)
        result.labels_stored, result.labels_already_stored = stored.stored, stored.present
    result.prediction_ids = [ids[r.index] for r in records]
    return result


async def _known(state: AppState, model_name: str, ids: list[str]) -> set[str]:
    """Which of ``ids`` the log already holds (the writer's queue flushed first, so a retry just after its
    first attempt is seen)."""
    writer = state.writer
    if writer is not None:
        await asyncio.to_thread(writer.settle, 5.0)

    def _find() -> set[str]:
        with state.db.session() as session:
            return set(logged_predictions(session=session, model_name=model_name, ids=ids))

    try:
        return await asyncio.to_thread(_find)
    except Exception as exc:
        if not unreachable(exc):
            raise
        # the database down: log the runs (the writer spools them); a run the log has, sent again with its
        # records' times, has the same ids and times, and the replay skips it as the writer's insert does
        log.warning("ingest: the database is unavailable (%s); %d named run(s) not checked", exc, len(ids))
        return set()


async def _store_labels(state: AppState, model_name: str, labels: list[tuple[str, float]]) -> StoredFeedback:
    """Store the records' labels once their predictions are committed (a label the log holds is counted,
    not written again)."""
    writer = state.writer
    if writer is not None:
        await asyncio.to_thread(writer.flush, 5.0)

    def _store() -> StoredFeedback:
        sink = writer.lake if writer is not None else None
        if sink is not None and writer is not None and not writer.database:  # lake_mode=only
            return StoredFeedback(store_lake_labels(sink=sink, model_name=model_name, labels=labels), 0, [])
        with state.db.session() as session:
            stored = store_feedback(session=session, model_name=model_name, labels=labels)
        if sink is not None:  # lake_mode=also: the labels of known predictions, to the lake too
            store_lake_labels(sink=sink, model_name=model_name, labels=labels, skip=set(stored.unknown))
        return stored

    stored = await asyncio.to_thread(_store)
    state.metrics.labels(model_name, stored.stored, len(stored.unknown))
    return stored
