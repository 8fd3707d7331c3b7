"""KServe's inference logger as a source of the prediction log: ``POST /v1/cloudevents``.

An arriving half (:func:`receive`) is read and checked on its own (a 400 names what is wrong; nothing is
kept), then offered to the pairing table (:mod:`predictions.service.pairing`): the first half of an
inference waits there, the second completes the pair, whose rows (source ``cloudevents``, at the response's
``ce-time``) are logged and the pair settled in one transaction, so a pair is logged once, whichever worker
or replica each half reached. With the database down the half goes to a local spool
(:class:`predictions.halves.HalfSpool`, fsynced before the answer: KServe never resends) and a periodic pass
(:func:`sweep`) offers it again once the database is back; the same pass settles the pairs whose wait
(``cloudevents_wait_s``) is over. Every outcome is counted in ``driftwarden_cloudevents_total{model,outcome}``
and the logged rows in ``driftwarden_ingested_predictions_total{model,source="cloudevents"}``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core.database import session_scope
from core.runtime import Runtime
from core.scheduling import every
from predictions.batch import LogBatch
from predictions.halves import HalfSpool
from predictions.service import database_failure
from predictions.service.pairing import REJECTED, Arrival, Pair, Refuse, offer_half, sweep_pairs
from predictions.spool import spool_dir
from registry.schema import ModelSchema
from service.serving.codecs import BadRequest
from service.serving.flows import AppState
from service.serving.ingest import LogOff
from service.serving.kserve import SOURCE, check_half, pair_rows, prediction_ids, read_event
from service.serving.manager import NotServed

log = logging.getLogger("driftwarden.serving.cloudevents")


@dataclass(frozen=True)
class Receipt:
    """What became of one event: its outcome and, once its pair is logged, the prediction ids."""

    outcome: str
    model: str
    event_id: str
    prediction_ids: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "model": self.model,
            "id": self.event_id,
            "prediction_ids": self.prediction_ids,
        }


class HalfLost(LogOff):
    """The database is down and the spool of halves is full (``spool_max_bytes``) or its disk failed: the
    half is kept nowhere (a 503; its rows are counted lost)."""


def half_spool(state: Runtime) -> HalfSpool:
    """The server's spool of halves (beside the log's spool of the same database), capped at
    ``spool_max_bytes`` as the log's spool is."""
    url = state.settings.database_url.get_secret_value()
    return HalfSpool(
        spool_dir(state.settings.spool_path, url) / "cloudevents", max_bytes=state.settings.spool_max_bytes
    )


async def receive(*, state: AppState, headers: Mapping[str, str], body: bytes, model: str | None) -> Receipt:
    """Read one event, check its half, offer it to the pairing table (or the spool, the database down)."""
    if state.writer is None:
        raise LogOff("this server runs without its prediction log (serve --no-log): it cannot take events")
    event = read_event(headers, body, model)
    contract = state.manager.contract(event.model)  # NotServed: an unknown model is a 404
    rows = check_half(contract[1], event)
    now = datetime.now(UTC)
    arrival = Arrival(
        model_name=event.model,
        event_id=event.id,
        half=event.half,
        body=event.body,
        time=event.time or now,
        received_at=now,
    )
    try:
        outcome, logged = await asyncio.to_thread(_offer, state, arrival, contract)
    except Exception as exc:
        failure = database_failure(exc)
        if failure is None:
            raise
        if failure != "unavailable":  # the half's own values (a pair's rows the database refuses are settled)
            raise BadRequest(f"the database refused the event: {exc}"[:500], "database") from None
        log.warning("cloudevents: database unavailable (%s); the %s half is spooled", exc, event.half)
        try:
            await asyncio.to_thread(half_spool(state).put, arrival)
        except OSError as full:  # SpoolFull, or the disk's own error: nothing was kept
            state.writer.count_lost(rows or 0, f"the {event.half} half of event {event.id} not spooled", full)
            state.metrics.cloudevent(event.model, "lost")
            raise HalfLost(f"the database is down and the event cannot be spooled: {full}") from None
        outcome, logged = "spooled", []
    _count(state, event.model, outcome, logged)
    ids = prediction_ids(event.model, event.id, rows) if outcome == "logged" and rows else []
    return Receipt(outcome=outcome, model=event.model, event_id=event.id, prediction_ids=ids)


def _offer(state: Runtime, arrival: Arrival, contract: tuple[int, ModelSchema]) -> tuple[str, list[LogBatch]]:
    """Offer one half in one transaction; the outcome and the rows it logged."""
    logged: list[LogBatch] = []
    only = _lake_only(state)

    def settle(pair: Pair) -> tuple[str, list[LogBatch]]:
        outcome, rows = pair_rows(pair, contract, received_at=arrival.received_at)
        logged.extend(rows)
        return outcome, [] if only else rows  # lake_mode=only: the rows go to the lake alone

    with _session(state) as session:
        outcome = offer_half(session=session, arrival=arrival, settle=settle, refuse=_refuser(state))
    done = logged if outcome not in ("waiting", "duplicate", REJECTED) else []
    _to_lake(state, done)
    return outcome, done


def _lake_only(state: Runtime) -> bool:
    """``lake_mode=only``: a pair's rows go to the lake, not the database."""
    writer = getattr(state, "writer", None)
    return writer is not None and writer.lake is not None and not writer.database


def _to_lake(state: Runtime, rows: list[LogBatch]) -> None:
    """A settled pair's rows (committed with the pair) into the lake's write-ahead spool (lake_mode also or
    only). The pair is settled first: a crash between the two leaves its rows out of the lake (the only
    window where a logged pair can miss it); a disk refusing them counts them lost."""
    writer = getattr(state, "writer", None)
    if writer is None or writer.lake is None or not rows:
        return
    try:
        writer.lake.append(rows, sync=writer.durability == "durable")
    except OSError as exc:
        writer.count_lost(sum(b.size for b in rows), "the lake's spool refused a CloudEvents pair", exc)


def _refuser(state: Runtime) -> Refuse:
    """The pairing's dead letter: the log writer's (``<spool slot>/rejected.jsonl``, source ``cloudevents``,
    counted in ``rows_rejected`` and the ``prediction_log`` health check), so ``predictions rejected``
    re-imports them as it does the writer's."""
    writer = getattr(state, "writer", None)

    def refuse(pair: Pair, rows: Sequence[LogBatch], error: str) -> None:
        log.error(
            "cloudevents: the database refused the rows of pair %s of %s (%s): moved to the dead letter",
            pair.event_id,
            pair.model_name,
            error.splitlines()[0] if error else "",
        )
        if writer is None:
            log.critical("cloudevents: no log writer: the refused rows of pair %s are lost", pair.event_id)
            return
        writer.reject([(row, error) for row in rows], source="cloudevents")

    return refuse


Settled = tuple[str, str, list[LogBatch]]
"""One event or pair settled by a pass: its model, its outcome and the rows it logged."""


_FACTORIES: weakref.WeakKeyDictionary[Engine, sessionmaker[Session]] = weakref.WeakKeyDictionary()


def _session(state: Runtime) -> Any:
    """A session on the pairing's engine (the database's own where the state has none)."""
    engine = getattr(state, "pairing", None)
    if engine is None:
        return state.db.session()
    factory = _FACTORIES.get(engine)
    if factory is None:
        factory = _FACTORIES[engine] = sessionmaker(engine)
    return session_scope(factory)


def _count(state: AppState, model: str, outcome: str, rows: list[LogBatch]) -> None:
    """Count on the event loop's thread (the metrics' dictionaries are bumped there only)."""
    state.metrics.cloudevent(model, outcome)
    for batch in rows:
        state.metrics.ingested(model, SOURCE, batch.size, batch.flags or [])


async def sweep(state: AppState) -> dict[str, int]:
    """One pass (:func:`sweep_once` in a thread), its outcomes counted; returns them by outcome."""
    settled = await asyncio.to_thread(sweep_once, state)
    counts: dict[str, int] = {}
    for model, outcome, rows in settled:
        _count(state, model, outcome, rows)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def sweep_once(state: AppState) -> list[Settled]:
    """Offer the spooled halves again (until the database fails), then settle the pairs whose wait is over
    and forget old tombstones."""
    settled: list[Settled] = []
    spool = half_spool(state)
    claimed = spool.claim()
    left = [path for path, _ in claimed]  # claimed, not yet done: given back whatever happens
    try:
        for path, arrival in claimed:
            try:
                contract = state.manager.contract(arrival.model_name)
                outcome, logged = _offer(state, arrival, contract)
            except NotServed:
                log.warning(
                    "cloudevents: spooled half of %s: the model is no longer known", arrival.model_name
                )
                outcome, logged = "unknown_model", []
            except Exception as exc:
                if not isinstance(exc, BadRequest) and database_failure(exc) == "unavailable":
                    return settled  # the rest is given back below, offered again next pass
                # a pair refused by its contract (checked on arrival: a contract changed since, or a half an
                # older version spooled), the database refusing the half itself, or a bug: set aside with its
                # reason (the halves' dead letter), never offered again; the pass goes on
                if not isinstance(exc, BadRequest):
                    log.exception("cloudevents: spooled half %s of %s failed", path.name, arrival.model_name)
                spool.set_aside(path, f"{type(exc).__name__}: {exc}")
                left.remove(path)
                settled.append((arrival.model_name, "refused", []))
                continue
            spool.done(path)
            left.remove(path)
            settled.append((arrival.model_name, outcome, logged))
    finally:
        for path in left:
            spool.release(path)
    return settled + _settle_due(state)


def _settle_due(state: AppState) -> list[Settled]:
    """Settle the pairs whose wait is over, each by its model's contract."""
    settings = state.settings
    now = datetime.now(UTC)
    done: dict[tuple[str, str], Settled] = {}  # by pair: a pair's rows the database refused are not counted

    def settle(pair: Pair) -> tuple[str, list[LogBatch]]:
        try:
            contract = state.manager.contract(pair.model_name)
            outcome, rows = pair_rows(pair, contract, received_at=now)
        except (NotServed, BadRequest) as exc:
            log.warning("cloudevents: pair %s of %s not logged: %s", pair.event_id, pair.model_name, exc)
            outcome, rows = "refused", []
        except Exception:  # one pair must never stop the pass for the others
            log.exception(
                "cloudevents: pair %s of %s cannot be read: not logged", pair.event_id, pair.model_name
            )
            outcome, rows = "refused", []
        done[(pair.model_name, pair.event_id)] = (pair.model_name, outcome, rows)
        return outcome, [] if only else rows  # lake_mode=only: the rows go to the lake alone

    def refuse(pair: Pair, rows: Sequence[LogBatch], error: str) -> None:
        refused.add((pair.model_name, pair.event_id))
        dead_letter(pair, rows, error)

    refused: set[tuple[str, str]] = set()
    dead_letter = _refuser(state)
    only = _lake_only(state)

    try:
        with _session(state) as session:
            sweep_pairs(
                session=session,
                now=now,
                wait=timedelta(seconds=settings.cloudevents_wait_s),
                keep=timedelta(seconds=settings.cloudevents_keep_s),
                settle=settle,
                refuse=refuse,
            )
    except Exception as exc:
        if database_failure(exc) is None:
            raise
        log.warning("cloudevents: pairs not swept (%s); the next pass tries again", exc)
        return []
    out: list[Settled] = [
        (m, REJECTED, []) if key in refused else (m, outcome, rows)
        for key, (m, outcome, rows) in done.items()
    ]
    _to_lake(state, [b for _, _, rows in out for b in rows])
    return out


def start_sweeps(state: AppState) -> asyncio.Task[None] | None:
    """Run :func:`sweep` every ``cloudevents_sweep_interval_s`` (None when 0)."""
    return every(state.settings.cloudevents_sweep_interval_s, partial(sweep, state), name="cloudevent pairs")
