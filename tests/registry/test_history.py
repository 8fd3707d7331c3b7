"""State changes and their history on SQLite and PostgreSQL: events, rollback, conflicts, migration 0004."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from core import migrate
from core.database import Database, make_engine, open_database
from core.errors import Conflict, Invalid, NotFound
from registry.models import EventAction, VersionState
from registry.names import InvalidName, InvalidVersion
from registry.service import (
    history,
    labels_of,
    next_version,
    promote,
    register_version,
    reject,
    rollback,
    serving_plans,
    serving_version,
    set_label,
    show,
)

S, A, R, G = VersionState.STAGED, VersionState.SERVING, VersionState.REJECTED, VersionState.ARCHIVED


def _register(s: Session, tmp_path: Path, *versions: int, model: str = "m") -> None:
    for v in versions:
        register_version(
            session=s,
            model_name=model,
            version=v,
            path=tmp_path / str(v),
            metrics={"accuracy": round(0.8 + v / 100, 2)},
            lineage={"mode": "local"},
            actor="test",
        )


def _trail(s: Session, model: str = "m") -> list[tuple[int, str, str | None, str | None, str]]:
    return [
        (
            e.version,
            e.action.value,
            e.from_state and e.from_state.value,
            e.to_state and e.to_state.value,
            e.actor,
        )
        for e in history(session=s, model_name=model)
    ]


def test_every_state_change_is_recorded(db: Database, tmp_path: Path) -> None:
    start = datetime.now(UTC)
    with db.session() as s:
        _register(s, tmp_path, 1, 2, 3)
    with db.session() as s:
        promote(session=s, model_name="m", version=1, actor="cli")
        promote(session=s, model_name="m", version=2, actor="api")
        set_label(session=s, model_name="m", label="stable", version=1, actor="cli")
        set_label(session=s, model_name="m", label="stable", version=2, actor="cli")  # moved
        set_label(session=s, model_name="m", label="stable", version=2, actor="cli")  # no change, no event
        reject(session=s, model_name="m", version=3, reason="  accuracy 0.70 < 0.91 ", actor="gate")
    with db.session() as s:
        events = history(session=s, model_name="m")
        assert [(v, a, f, t) for v, a, f, t, _ in _trail(s)] == [
            (1, "register", None, "staged"),
            (2, "register", None, "staged"),
            (3, "register", None, "staged"),
            (1, "promote", "staged", "serving"),
            (1, "archive", "serving", "archived"),
            (2, "promote", "staged", "serving"),
            (1, "label", None, None),
            (2, "label", None, None),
            (3, "reject", "staged", "rejected"),
        ]
        assert [e.actor for e in events] == ["test"] * 3 + ["cli", "api", "api", "cli", "cli", "gate"]
        assert events[5].previous_version == 1 and events[4].reason == "promote of version 2"
        assert events[7].label == "stable" and events[7].previous_version == 1
        assert events[7].reason == "moved from version 1"
        assert events[8].reason == "accuracy 0.70 < 0.91"
        assert all(start <= e.at.astimezone(UTC) <= datetime.now(UTC) for e in events)
        assert [e.version for e in history(session=s, model_name="m", version=1)] == [1, 1, 1, 1]
        assert labels_of(session=s, model_name="m") == {"stable": 2}


def test_rollback_goes_to_the_previous_serving_version(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        _register(s, tmp_path, 1, 2, 3)
        with pytest.raises(
            Conflict, match="no previous serving version to roll back to \\(no version serves"
        ):
            rollback(session=s, model_name="m")
        promote(session=s, model_name="m", version=1)
        with pytest.raises(Conflict, match="version 1 serves"):
            rollback(session=s, model_name="m")
        promote(session=s, model_name="m", version=2)
        promote(session=s, model_name="m", version=3)
    with db.session() as s:
        assert rollback(session=s, model_name="m", actor="cli").version == 2
    with db.session() as s:
        current = serving_version(session=s, model_name="m")
        assert current is not None and current.version == 2
        assert _trail(s)[-2:] == [
            (3, "archive", "serving", "archived", "cli"),
            (2, "rollback", "archived", "serving", "cli"),
        ]
        # a second rollback returns to the version rolled back from (kubectl rollout undo), unless rejected
        reject(session=s, model_name="m", version=3, reason="bad")
        assert rollback(session=s, model_name="m").version == 1
        states = {v.version: v.state for v in show(session=s, model_name="m").versions}
        assert states == {1: A, 2: G, 3: R}
        assert serving_plans(session=s, only=["m"])["m"].serving == 1


def test_conflicts_and_unknowns_are_domain_errors(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        _register(s, tmp_path, 1, 2)
        promote(session=s, model_name="m", version=1)
        assert promote(session=s, model_name="m", version=1).state is A  # already serving: no-op
        assert sum(a == "promote" for _, a, *_ in _trail(s)) == 1
        with pytest.raises(NotFound, match="no model 'nope' in the registry"):
            promote(session=s, model_name="nope", version=1)
        with pytest.raises(NotFound, match=r"model 'm' has no version 9 \(its versions: 1, 2\)"):
            promote(session=s, model_name="m", version=9)
        with pytest.raises(Conflict, match="m:1 is serving: promote another version or roll back"):
            reject(session=s, model_name="m", version=1, reason="x")
        with pytest.raises(Invalid, match="a reason is required"):
            reject(session=s, model_name="m", version=2, reason="  ")
        reject(session=s, model_name="m", version=2, reason="too slow")
        with pytest.raises(Conflict, match="already rejected"):
            reject(session=s, model_name="m", version=2, reason="again")
        with pytest.raises(Conflict, match=r"m:2 was rejected \(too slow\); a rejected version cannot serve"):
            promote(session=s, model_name="m", version=2)
        with pytest.raises(Conflict, match="a label cannot point at it"):
            set_label(session=s, model_name="m", label="canary", version=2)
        with pytest.raises(InvalidName):
            set_label(session=s, model_name="m", label="../x", version=1)
        with pytest.raises(InvalidName):
            promote(session=s, model_name="../m", version=1)
        with pytest.raises(InvalidVersion):
            promote(session=s, model_name="m", version=0)
        with pytest.raises(InvalidName):
            register_version(
                session=s, model_name="a b:predict", version=1, path=tmp_path, metrics={}, lineage={}
            )
        with pytest.raises(InvalidName):
            next_version(session=s, registry=tmp_path, model_name="/abs")
        with pytest.raises(NotFound):
            show(session=s, model_name="nope")
        for err in (NotFound, Conflict, Invalid):
            assert err.exit_code == 2
    with db.session() as s:  # nothing half-done by the refused requests
        assert [(v, a) for v, a, *_ in _trail(s)] == [
            (1, "register"),
            (2, "register"),
            (1, "promote"),
            (2, "reject"),
        ]


def test_show_a_model_and_a_version(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        _register(s, tmp_path, 1, 2)
        _register(s, tmp_path, 1, model="other")
        promote(session=s, model_name="m", version=2)
        set_label(session=s, model_name="m", label="canary", version=1)
    with db.session() as s:
        model = show(session=s, model_name="m")
        assert model.serving == 2 and model.labels == {"canary": 1}
        assert [v.version for v in model.versions] == [2, 1]
        assert model.versions[1].labels == ["canary"] and model.versions[0].metrics == {"accuracy": 0.82}
        assert len(model.history) == 4 and {e.model_name for e in model.history} == {"m"}
        assert all(v.schema_summary is None and v.schema_error is None for v in model.versions)
        one = show(session=s, model_name="m", version=1)
        assert [v.version for v in one.versions] == [1]
        assert [e.action for e in one.history] == [EventAction.REGISTER, EventAction.LABEL]
        assert one.versions[0].schema_summary is None
        assert (
            one.versions[0].schema_error is not None and "schema not readable" in one.versions[0].schema_error
        )


def test_migration_0004_starts_the_history_of_existing_versions(database_url: str) -> None:
    if migrate.current(database_url) is None:  # SQLite: empty; PostgreSQL: a schema migrated to head
        migrate.upgrade(database_url, "0003_monitor_runs")
    else:
        migrate.downgrade(database_url, "0003_monitor_runs")
    engine = make_engine(database_url)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        (1, "archived", None, t0.replace(day=2)),
        (2, "serving", None, t0.replace(day=3)),
        (3, "rejected", "worse", t0.replace(day=4)),
        (4, "staged", None, t0.replace(day=5)),
    ]
    with engine.begin() as conn:
        for version, state, reason, updated in rows:
            conn.execute(
                sa.text(
                    "INSERT INTO model_versions (model_name, version, state, state_reason, path, metrics, "
                    "lineage, created_at, updated_at) VALUES ('old', :v, :state, :reason, '/x', '{}', '{}', "
                    ":created, :updated)"
                ),
                {"v": version, "state": state, "reason": reason, "created": t0, "updated": updated},
            )
    engine.dispose()
    migrate.upgrade(database_url)
    assert migrate.current(database_url) == migrate.head()
    db = open_database(database_url)
    try:
        with db.session() as s:
            trail = _trail(s, "old")
            assert trail[:4] == [(v, "register", None, "staged", "migration 0004") for v in (1, 2, 3, 4)]
            assert trail[4:] == [
                (1, "archive", "serving", "archived", "migration 0004"),
                (2, "promote", "staged", "serving", "migration 0004"),
                (3, "reject", "staged", "rejected", "migration 0004"),
            ]
            assert history(session=s, model_name="old")[-1].reason == "worse"
            assert rollback(session=s, model_name="old").version == 1  # the history is usable at once
    finally:
        db.dispose()
    migrate.downgrade(database_url, "0003_monitor_runs")
    engine = make_engine(database_url)
    try:
        tables = sa.inspect(engine).get_table_names()
        assert "model_version_events" not in tables and "model_versions" in tables
    finally:
        engine.dispose()
