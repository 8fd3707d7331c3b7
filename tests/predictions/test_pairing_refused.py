"""A pair whose rows the database refuses stops neither the pairing nor its sweep (issue 41, item 1).

The pairing is called directly, with rows the edge would have refused (a NUL in a text: PostgreSQL's jsonb
cannot hold it; no model name: NOT NULL on both backends), so the deeper path is what is tested: the
refused pair's rows go to the dead letter (``refuse``) with the database's error and the pair is settled
``rejected``; the other pairs of the same pass are logged, the lone response expires, the old tombstone is
deleted, and nothing stays open for the next pass to fail on. On main the driver's own error escaped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import select

from core.database import open_database
from predictions.batch import LogBatch, ids_from
from predictions.models import PredictionBatch
from predictions.service import database_failure
from predictions.service.pairing import REJECTED, Arrival, Pair, offer_half, open_pairs, sweep_pairs
from tests.predictions.logdata import ids, make_rows
from tests.predictions.poisondata import _no_model, _nul

NOW = datetime.now(UTC).replace(microsecond=0)


class Refused:
    """A dead letter that keeps what it is given: the pairs, their rows and the database's errors."""

    def __init__(self) -> None:
        self.pairs: list[str] = []
        self.rows: list[Sequence[LogBatch]] = []
        self.errors: list[tuple[str, str]] = []

    def __call__(self, pair: Pair, rows: Sequence[LogBatch], error: str) -> None:
        self.pairs.append(pair.event_id)
        self.rows.append(rows)
        self.errors.append((pair.event_id, error))


def _arrival(event_id: str, half: str, at: datetime) -> Arrival:
    return Arrival("m", event_id, half, b"{}", at, at)  # type: ignore[arg-type]


def _poisons(url: str) -> list[tuple[str, object]]:
    kinds: list[tuple[str, object]] = [("no model name", _no_model)]
    if url.startswith("postgresql"):
        kinds.append(("NUL in a text", _nul))
    return kinds


def test_the_sweep_dead_letters_a_refused_pair_and_settles_the_others(database_url: str) -> None:
    db = open_database(database_url)
    rows = {f"clean-{k}": make_rows(2, start=10 * k, when=NOW - timedelta(hours=1)) for k in range(2)}
    poisons = _poisons(database_url)
    for k, (_, poison) in enumerate(poisons):
        rows[f"poison-{k}"] = [poison(r) for r in make_rows(2, start=100 + 10 * k)]  # type: ignore[operator]
    rows["old"] = make_rows(1, start=500, when=NOW - timedelta(hours=5))
    refused = Refused()

    def settle(pair: Pair) -> tuple[str, Sequence[LogBatch]]:
        if pair.request is None:
            return "expired_response", []
        return "unanswered", rows[pair.event_id]

    with db.session() as s:  # a tombstone settled long ago, then the poisoned requests first (oldest)
        for half in ("request", "response"):
            offer_half(
                session=s,
                arrival=_arrival("old", half, NOW - timedelta(hours=5)),
                settle=settle,
                refuse=refused,
            )
    order = [k for k in rows if k.startswith("poison")] + [
        k for k in rows if k.startswith("clean")
    ]  # oldest first
    with db.session() as s:
        for m, event_id in enumerate(order):
            at = NOW - timedelta(hours=3) + timedelta(minutes=m)
            assert offer_half(
                session=s, arrival=_arrival(event_id, "request", at), settle=settle, refuse=refused
            )
        offer_half(
            session=s,
            arrival=_arrival("lone", "response", NOW - timedelta(hours=2)),
            settle=settle,
            refuse=refused,
        )
    with db.session() as s:
        outcomes = sweep_pairs(
            session=s,
            now=NOW,
            wait=timedelta(minutes=10),
            keep=timedelta(hours=1),
            settle=settle,
            refuse=refused,
        )
    assert sorted(outcomes) == sorted(
        [REJECTED] * len(poisons) + ["unanswered"] * 2 + ["expired_response"]
    ), outcomes
    assert sorted(refused.pairs) == sorted(k for k in rows if k.startswith("poison"))
    for (_, reason), (name, _) in zip(refused.errors, poisons, strict=True):
        assert (
            ("UntranslatableCharacter" in reason) if name == "NUL in a text" else ("null" in reason.lower())
        )
    with db.session() as s:
        stored = [pid for b in s.scalars(select(PredictionBatch)) for pid in ids_from(b.first_id, b.size)]
        assert sorted(stored) == sorted(ids(rows["clean-0"] + rows["clean-1"] + rows["old"]))
        assert open_pairs(session=s) == 0  # nothing left for the next pass to fail on
        again = sweep_pairs(
            session=s,
            now=NOW + timedelta(hours=2),
            wait=timedelta(minutes=10),
            keep=timedelta(hours=1),
            settle=settle,
            refuse=refused,
        )
        assert again == []
    db.dispose()


@pytest.mark.parametrize("first", ["request", "response"])
def test_a_second_half_whose_rows_are_refused_settles_its_pair_rejected(
    database_url: str, first: str
) -> None:
    db = open_database(database_url)
    poison = _poisons(database_url)[-1][1]
    bad = [poison(r) for r in make_rows(1, start=7)]  # type: ignore[operator]
    good = make_rows(1, start=8)
    refused = Refused()

    def settle(pair: Pair) -> tuple[str, Sequence[LogBatch]]:
        return "logged", bad if pair.event_id == "bad" else good

    second = "response" if first == "request" else "request"
    with db.session() as s:
        for event_id in ("bad", "good"):
            assert (
                offer_half(session=s, arrival=_arrival(event_id, first, NOW), settle=settle, refuse=refused)
                == "waiting"
            )
        assert (
            offer_half(session=s, arrival=_arrival("bad", second, NOW), settle=settle, refuse=refused)
            == REJECTED
        )
        assert (
            offer_half(session=s, arrival=_arrival("good", second, NOW), settle=settle, refuse=refused)
            == "logged"
        )
        assert (
            offer_half(session=s, arrival=_arrival("bad", second, NOW), settle=settle, refuse=refused)
            == "duplicate"
        )
        assert [ids(r) for r in refused.rows] == [ids(bad)]
        assert [
            pid for b in s.scalars(select(PredictionBatch)) for pid in ids_from(b.first_id, b.size)
        ] == ids(good)
        assert open_pairs(session=s) == 0
    db.dispose()


def test_database_failure_tells_a_refused_row_from_an_outage_and_from_a_bug() -> None:
    """The drivers' own errors (the pairing's raw-cursor insert raises them) count as SQLAlchemy's do; an
    error that is not the database's is None, so the replay never keeps retrying a bug as an outage."""
    assert database_failure(psycopg.errors.UntranslatableCharacter("unsupported Unicode escape")) == "data"
    assert database_failure(psycopg.errors.NotNullViolation("null value")) == "data"
    assert database_failure(sqlite3.IntegrityError("NOT NULL constraint failed")) == "data"
    assert database_failure(psycopg.OperationalError("connection refused")) == "unavailable"
    assert database_failure(sa_exc.OperationalError("select 1", {}, Exception("gone"))) == "unavailable"
    assert database_failure(KeyError("request")) is None
    assert database_failure(RuntimeError("a bug")) is None
