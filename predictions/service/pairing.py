"""The pairing of KServe's request and response events (table ``cloudevent_pairs``).

KServe's logger reports one inference as two CloudEvents sharing one ``ce-id``, which may reach different
processes in either order. :func:`offer_half` keeps the first half of a pair; the second completes it, and in
the same transaction the log rows the caller makes of the pair (``settle``) are inserted and the pair is
settled (its bodies dropped, ``settled_at`` and ``outcome`` set). A half that is already there, or whose pair
is settled, is a duplicate. :func:`sweep_pairs` settles the pairs whose wait is over (a request without its
response is still logged: its inputs count for drift) and forgets tombstones older than ``keep``.

A pair whose rows the database refuses for their values (a NUL in a text, a number out of range: a ``data``
failure of :func:`~predictions.service.inserts.database_failure`) never stops either: its rows go to the
caller's dead letter (``refuse``, with the database's message) and the pair is settled ``rejected``, so the
sweep goes on with the others instead of failing on it, oldest first, at every pass.

On PostgreSQL the second half's ``UPDATE ... WHERE <half>_at IS NULL`` locks the row, so of two copies of
one half arriving at once exactly one completes the pair, and the sweep takes only rows nobody holds
(``FOR UPDATE SKIP LOCKED``). SQLite serializes writers (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from sqlalchemy import Engine, Table, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.database import begin_sqlite, make_engine
from predictions.batch import LogBatch
from predictions.models import CloudEventPair
from predictions.service.inserts import database_failure, insert_batches

Half = Literal["request", "response"]
PAIRS = cast(Table, CloudEventPair.__table__)


@dataclass(frozen=True)
class Arrival:
    """One half as it arrived: its body, its event time (``ce-time``, else the arrival) and the arrival."""

    model_name: str
    event_id: str
    half: Half
    body: bytes
    time: datetime
    received_at: datetime


@dataclass(frozen=True)
class Pair:
    """What came of one inference: either half may be missing (when the wait is over)."""

    model_name: str
    event_id: str
    request: bytes | None
    request_time: datetime | None
    response: bytes | None
    response_time: datetime | None


Settle = Callable[[Pair], tuple[str, Sequence[LogBatch]]]
"""What a pair becomes: the outcome to record (``logged``, ``unanswered``, ...) and the log rows to insert."""


Refuse = Callable[[Pair, Sequence[LogBatch], str], None]
"""Where a pair's rows the database refused go (the dead letter), with the database's message; it must not
raise (a failing dead letter counts the rows lost)."""

REJECTED = "rejected"  # the outcome of a pair whose rows the database refused


def pairing_engine(url: str, *, wait_for_disk: bool) -> Engine:
    """The engine the pairing uses in a serving process: no ping before each use (a round trip in front of
    every event; a connection the server closed fails its event, which is spooled and offered again), TCP
    keepalives, and on PostgreSQL, unless ``wait_for_disk`` (``log_durability=durable``), commits that do
    not wait for the WAL's flush (``synchronous_commit=off``: a crash of the database server itself may lose
    the last fraction of a second of events, as ``fast`` mode's writer may lose its queue)."""
    kwargs: dict[str, Any] = {"pool_pre_ping": False}
    if not url.startswith("sqlite"):
        args: dict[str, Any] = {
            "connect_timeout": 5,
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        if not wait_for_disk:
            args["options"] = "-c synchronous_commit=off"
        kwargs["connect_args"] = args
    return make_engine(url, **kwargs)


def _key(model_name: str, event_id: str) -> Any:
    return (PAIRS.c.model_name == model_name) & (PAIRS.c.event_id == event_id)


def _values(arrival: Arrival) -> dict[str, Any]:
    h = arrival.half
    return {f"{h}_at": arrival.received_at, f"{h}_time": arrival.time, f"{h}_body": arrival.body}


def offer_half(*, session: Session, arrival: Arrival, settle: Settle, refuse: Refuse) -> str:
    """Keep a first half (``waiting``); with the second, log and settle the pair in one transaction (the
    outcome ``settle`` gives, or ``rejected``: its rows went to ``refuse``); ``duplicate`` for a half already
    there or a settled pair."""
    begin_sqlite(session, immediate=True)
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    mine = _values(arrival)
    first = session.execute(
        dialect.insert(PAIRS)
        .values(
            model_name=arrival.model_name,
            event_id=arrival.event_id,
            opened_at=arrival.received_at,
            **mine,
        )
        .on_conflict_do_nothing()
        .returning(PAIRS.c.event_id)
    ).first()
    if first is not None:
        session.commit()
        return "waiting"
    other = "response" if arrival.half == "request" else "request"
    row = session.execute(
        update(PAIRS)
        .where(
            _key(arrival.model_name, arrival.event_id),
            PAIRS.c[f"{arrival.half}_at"].is_(None),
            PAIRS.c.settled_at.is_(None),
        )
        .values(**mine)
        .returning(PAIRS.c[f"{other}_body"], PAIRS.c[f"{other}_time"])
    ).first()
    if row is None:
        session.rollback()
        return "duplicate"
    ours, theirs = (arrival.body, arrival.time), (row[0], row[1])
    request, response = (ours, theirs) if arrival.half == "request" else (theirs, ours)
    pair = Pair(
        model_name=arrival.model_name,
        event_id=arrival.event_id,
        request=request[0],
        request_time=request[1],
        response=response[0],
        response_time=response[1],
    )
    outcome = _settle(session, pair, settle, refuse, arrival.received_at)
    session.commit()
    return outcome


def _settle(session: Session, pair: Pair, settle: Settle, refuse: Refuse, now: datetime) -> str:
    """Insert what ``settle`` makes of ``pair`` and mark the pair settled (in the caller's transaction); rows
    the database refuses go to ``refuse`` and the pair is settled ``rejected``."""
    outcome, rows = settle(pair)
    try:
        insert_batches(connection=session.connection(), rows=rows)
    except Exception as exc:
        if database_failure(exc) != "data":
            raise
        refuse(pair, rows, f"{type(exc).__name__}: {exc}"[:2000])
        outcome = REJECTED
    session.execute(
        update(PAIRS)
        .where(_key(pair.model_name, pair.event_id))
        .values(request_body=None, response_body=None, settled_at=now, outcome=outcome)
    )
    return outcome


def sweep_pairs(
    *,
    session: Session,
    now: datetime,
    wait: timedelta,
    keep: timedelta,
    settle: Settle,
    refuse: Refuse,
    limit: int = 500,
) -> list[str]:
    """Settle up to ``limit`` pairs opened more than ``wait`` ago (what ``settle`` makes of what came; rows
    the database refuses go to ``refuse``) and forget tombstones settled more than ``keep`` ago; the
    outcomes, one per pair settled."""
    begin_sqlite(session, immediate=True)
    query = (
        select(PAIRS)
        .where(PAIRS.c.settled_at.is_(None), PAIRS.c.opened_at < now - wait)
        .order_by(PAIRS.c.opened_at)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    outcomes = [
        _settle(
            session,
            Pair(
                model_name=r.model_name,
                event_id=r.event_id,
                request=r.request_body,
                request_time=r.request_time,
                response=r.response_body,
                response_time=r.response_time,
            ),
            settle,
            refuse,
            now,
        )
        for r in session.execute(query).all()
    ]
    session.execute(delete(PAIRS).where(PAIRS.c.settled_at < now - keep))
    session.commit()
    return outcomes


def open_pairs(*, session: Session, model_name: str | None = None) -> int:
    """How many pairs wait for a half (of one model, or of all)."""
    query = select(PAIRS.c.event_id).where(PAIRS.c.settled_at.is_(None))
    if model_name is not None:
        query = query.where(PAIRS.c.model_name == model_name)
    return len(session.execute(query).all())


def settled_outcomes(*, session: Session, model_name: str) -> dict[str, int]:
    """The outcomes of the model's settled pairs still kept (tombstones), counted."""
    rows = session.execute(
        select(PAIRS.c.outcome).where(PAIRS.c.model_name == model_name, PAIRS.c.settled_at.is_not(None))
    ).all()
    counts: dict[str, int] = {}
    for (outcome,) in rows:
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts
