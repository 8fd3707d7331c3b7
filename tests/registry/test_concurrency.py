"""One serving version per model, whatever runs at once, on SQLite and PostgreSQL (migration 0006)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

import registry.service as registry_service
from core import migrate
from core.database import Database, make_engine
from core.errors import Conflict
from registry.models import ModelVersion, VersionState
from registry.service import history, promote, register_version, rollback, serving_version

S, A, G = VersionState.STAGED, VersionState.SERVING, VersionState.ARCHIVED


def _register(db: Database, tmp_path: Path, *versions: int, model: str = "m") -> None:
    with db.session() as s:
        for v in versions:
            register_version(
                session=s,
                model_name=model,
                version=v,
                path=tmp_path / str(v),
                metrics={},
                lineage={},
                actor="test",
            )


def _states(db: Database, model: str = "m") -> dict[int, VersionState]:
    with db.session() as s:
        rows = s.scalars(sa.select(ModelVersion).where(ModelVersion.model_name == model))
        return {r.version: r.state for r in rows}


def test_the_database_refuses_a_second_serving_version(db: Database, tmp_path: Path) -> None:
    _register(db, tmp_path, 1, 2)
    _register(db, tmp_path, 1, model="other")
    with db.session() as s:
        promote(session=s, model_name="m", version=1)
        promote(session=s, model_name="other", version=1)  # another model: its own serving version
    with pytest.raises(IntegrityError), db.session() as s:  # the index, not the code, says no
        s.execute(sa.update(ModelVersion).where(ModelVersion.version == 2).values(state=VersionState.SERVING))
    assert _states(db) == {1: A, 2: S}


def test_a_promote_that_loses_the_race_is_a_conflict(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B reads version 1 serving; A promotes 2 and commits; B's promote of 3 must not serve too."""
    _register(db, tmp_path, 1, 2, 3)
    with db.session() as s:
        promote(session=s, model_name="m", version=1)
    real = registry_service.serving_version
    raced: list[int] = []

    def stale_then_race(*, session: Session, model_name: str) -> ModelVersion | None:
        seen = real(session=session, model_name=model_name)
        if not raced:  # B's read, then A's whole promote in between
            raced.append(1)
            with db.session() as other:
                promote(session=other, model_name="m", version=2, actor="cli")
        return seen

    with db.session() as s:
        monkeypatch.setattr(registry_service, "serving_version", stale_then_race)
        with pytest.raises(Conflict, match="another promotion of 'm' happened at the same time; retry"):
            promote(session=s, model_name="m", version=3, actor="api")
        monkeypatch.setattr(registry_service, "serving_version", real)
        # the session is still usable: it sees A's promotion and can write
        now = serving_version(session=s, model_name="m")
        assert now is not None and now.version == 2
        promote(session=s, model_name="m", version=3, actor="api")  # the retry, in the same session
    assert _states(db) == {1: G, 2: G, 3: A}
    with db.session() as s:
        trail = [
            (e.version, e.action.value, e.actor, e.previous_version)
            for e in history(session=s, model_name="m")
        ]
    assert trail[4:] == [  # after three registers and the first promote; the lost attempt left no trace
        (1, "archive", "cli", None),
        (2, "promote", "cli", 1),
        (2, "archive", "api", None),
        (3, "promote", "api", 2),
    ]


def test_a_promote_is_undone_with_its_session(db: Database, tmp_path: Path) -> None:
    """The savepoint around a promote nests in the session's transaction (SQLite too: not committed alone)."""
    _register(db, tmp_path, 1)
    with pytest.raises(RuntimeError), db.session() as s:
        promote(session=s, model_name="m", version=1)
        raise RuntimeError("the caller fails after the promote")
    assert _states(db) == {1: S}


@pytest.mark.parametrize("rounds", [3])
def test_promotes_at_the_same_time_leave_one_serving_version(
    db: Database, tmp_path: Path, rounds: int
) -> None:
    """Threads promoting different versions at once: each succeeds in turn or gets a Conflict; never two."""
    _register(db, tmp_path, 1, 2, 3, 4, 5)
    with db.session() as s:
        promote(session=s, model_name="m", version=1)
    versions = [2, 3, 4, 5]
    for _ in range(rounds):
        barrier = threading.Barrier(len(versions))
        outcomes: dict[int, str] = {}

        def run(
            version: int, barrier: threading.Barrier = barrier, outcomes: dict[int, str] = outcomes
        ) -> None:
            barrier.wait()
            try:
                with db.session() as s:
                    promote(session=s, model_name="m", version=version, actor=f"t{version}")
                outcomes[version] = "ok"
            except Conflict as exc:
                outcomes[version] = f"conflict: {exc}"
            except Exception as exc:  # anything else fails the test below, with its text
                outcomes[version] = f"error: {exc!r}"

        threads = [threading.Thread(target=run, args=(v,)) for v in versions]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(outcomes) == len(versions), outcomes
        assert all(
            o == "ok" or o.startswith("conflict: another promotion of 'm'") for o in outcomes.values()
        ), outcomes
        states = _states(db)
        serving = [v for v, st in states.items() if st is A]
        assert len(serving) == 1, states
        assert outcomes[serving[0]] == "ok", outcomes  # the one serving is one that said it succeeded
        # every success is recorded as a promote, every conflict left no event behind
        with db.session() as s:
            serving_now = serving_version(session=s, model_name="m")
            assert serving_now is not None and serving_now.version == serving[0]
            rollback(session=s, model_name="m")  # and the history still makes sense to roll back on
        assert list(_states(db).values()).count(A) == 1


def test_migration_0006_keeps_one_serving_version(database_url: str) -> None:
    """A database that already has two serving versions of a model (the old race) keeps the last one."""
    if migrate.current(database_url) is None:  # SQLite: empty; PostgreSQL: a schema migrated to head
        migrate.upgrade(database_url, "0005_monitor_run_duration")
    else:
        migrate.downgrade(database_url, "0005_monitor_run_duration")
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            for v, state, at in [(1, "serving", 1), (2, "serving", 3), (3, "staged", 2), (4, "serving", 2)]:
                conn.execute(
                    sa.text(
                        "INSERT INTO model_versions (model_name, version, state, path, metrics, lineage, "
                        "created_at, updated_at) VALUES ('m', :v, :state, '/x', '{}', '{}', :at, :at)"
                    ),
                    {"v": v, "state": state, "at": datetime(2026, 1, at, tzinfo=UTC)},
                )
        migrate.upgrade(database_url)
        assert migrate.current(database_url) == migrate.head()
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT version, state FROM model_versions")).all()
            events = conn.execute(
                sa.text("SELECT version, action, from_state, to_state, actor FROM model_version_events")
            ).all()
        assert {v: st for v, st in rows} == {1: "archived", 2: "serving", 3: "staged", 4: "archived"}
        assert sorted(tuple(e) for e in events) == [
            (1, "archive", "serving", "archived", "migration 0006"),
            (4, "archive", "serving", "archived", "migration 0006"),
        ]
        migrate.downgrade(database_url, "0005_monitor_run_duration")
        migrate.upgrade(database_url)
    finally:
        engine.dispose()
