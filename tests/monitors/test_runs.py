"""Monitor-run tables: migration 0003 applies and reverts on SQLite; runs round-trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from core import migrate
from core.database import make_engine, make_session_factory, session_scope
from monitors.engine import compare
from monitors.profile import profile_from_dict
from monitors.service import latest_run, list_runs, record_run
from training.cluster.datagen import generate


def test_migration_and_round_trip(tmp_path: Path, profile_dict: dict[str, Any]) -> None:
    url = f"sqlite:///{tmp_path / 'dw.db'}"
    migrate.upgrade(url)  # 0003 creates the monitor tables; later revisions add columns the ORM writes
    assert migrate.current(url) == migrate.head()
    report = compare(
        profile=profile_from_dict(profile_dict), columns=generate(3_000, scenario="covariate_shift", seed=71)
    )
    engine = make_engine(url)
    factory = make_session_factory(engine)
    with session_scope(factory) as session:
        record_run(session=session, model_name="credit", model_version=2, report=report)
        record_run(session=session, model_name="other", model_version=1, report=report)
    with session_scope(factory) as session:
        run = latest_run(session=session, model_name="credit")
        assert run is not None and run.dataset_drifted is report.drifted is True
        expected = {f.name for f in report.features if f.drifted}
        if report.multivariate is not None and report.multivariate.drifted:
            expected.add(report.multivariate.name)
        assert {f.feature for f in run.features if f.drifted} == expected
        assert {"age", "income", "credit_score"} <= expected
        assert len(run.features) == len(report.features) + (report.multivariate is not None)
        assert run.report["dataset"]["n_drifted"] == report.dataset.n_drifted
        assert len(list_runs(session=session, model_name="credit")) == 1
    engine.dispose()
    migrate.downgrade(url, "0002_prediction_log")
    tables = sa.inspect(make_engine(url)).get_table_names()
    assert "monitor_runs" not in tables and "prediction_log" in tables


def test_a_slow_run_does_not_make_the_next_pass_skip_the_model(
    tmp_path: Path, profile_dict: dict[str, Any]
) -> None:
    """``is_due`` measures from the run's start (stored time minus duration), as schedulers pace passes."""
    from datetime import timedelta

    from core.database import open_database
    from monitors.flows import is_due

    report = compare(profile=profile_from_dict(profile_dict), columns=generate(500, seed=72))
    db = open_database(f"sqlite:///{tmp_path / 'due.db'}")
    try:
        with db.session() as session:
            run = record_run(
                session=session, model_name="credit", model_version=1, report=report, duration_s=100.0
            )
            stored = run.created_at
        # stored 250 s ago after a 100 s evaluation: it started 350 s ago, more than the 300 s interval
        assert is_due(db=db, model_name="credit", interval_s=300, now=stored + timedelta(seconds=250))
        # started 100 + 150 = 250 s ago: less than 0.9 x 300 s, not due yet
        assert not is_due(db=db, model_name="credit", interval_s=300, now=stored + timedelta(seconds=150))
    finally:
        db.dispose()
