"""`driftwarden predictions purge`: deleting needs --yes; --dry-run counts per model and deletes nothing.

Every count is of predictions, not of the requests (``prediction_batches`` rows) holding them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from core.config import get_settings
from core.database import Database, open_database
from predictions.models import PredictionBatch, PredictionFeedback
from predictions.service import record_feedback, write_log_rows
from service.cli import app
from tests.predictions.logdata import ids, make_rows

runner = CliRunner()


@pytest.fixture
def logged(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """The CLI's database holds 5 old predictions of `credit` (requests of 3 and 2) and 2 new ones (one
    request), 3 old of `other` (one request); a label on a prediction in the middle of an old request of
    each model."""
    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", database_url)
    get_settings.cache_clear()
    db = open_database(database_url)
    old = make_rows(5, when=datetime.now(UTC) - timedelta(days=40), model="credit", per_request=3)
    new = make_rows(2, start=5, model="credit", per_request=2)
    other = make_rows(3, start=7, when=datetime.now(UTC) - timedelta(days=10), model="other", per_request=3)
    assert [b.size for b in old + new + other] == [3, 2, 2, 3]
    write_log_rows(engine=db.engine, rows=old + new + other, idempotent=False)
    with db.session() as s:
        assert record_feedback(session=s, model_name="credit", labels=[(ids(old)[1], 1.0)]) == (1, [])
        assert record_feedback(session=s, model_name="other", labels=[(ids(other)[1], 0.0)]) == (1, [])
    yield db
    db.dispose()


def _counts(db: Database) -> tuple[int, int]:
    """(predictions logged, labels)."""
    with db.session() as s:
        rows = s.scalar(select(func.coalesce(func.sum(PredictionBatch.size), 0))) or 0
        labels = s.scalar(select(func.count()).select_from(PredictionFeedback)) or 0
    return int(rows), int(labels)


def test_purge_without_yes_shows_what_it_would_delete_and_deletes_nothing(logged: Database) -> None:
    r = runner.invoke(app, ["predictions", "purge", "--days", "0"])
    assert r.exit_code == 2, r.output
    assert "would delete 7 predictions of credit" in r.stdout
    assert "would delete 3 predictions of other" in r.stdout
    assert r.stderr.strip().splitlines() == [
        "error: purge deletes 10 predictions and their feedback: add --yes to delete them "
        "(or --dry-run to only count)"
    ]
    assert _counts(logged) == (10, 2)


def test_dry_run_counts_per_model_within_the_window(logged: Database) -> None:
    r = runner.invoke(app, ["predictions", "purge", "--days", "30", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "would delete 5 predictions of credit" in r.stdout and "other" not in r.stdout
    assert "dry run: 5 predictions would be deleted; nothing was deleted" in r.stdout
    r = runner.invoke(app, ["predictions", "purge", "--days", "30", "--dry-run", "--yes"])
    assert r.exit_code == 0 and "nothing was deleted" in r.stdout  # --dry-run wins over --yes
    assert _counts(logged) == (10, 2)


def test_purge_with_yes_deletes_the_old_rows_and_their_feedback(logged: Database) -> None:
    r = runner.invoke(app, ["predictions", "purge", "--days", "30", "--yes"])
    assert r.exit_code == 0, r.output
    assert "deleted 5 predictions" in r.stdout
    assert _counts(logged) == (5, 1)  # credit's 2 new and other's 3 stay, with other's label
    with logged.session() as s:
        assert list(s.scalars(select(PredictionFeedback.model_name))) == ["other"]
        assert list(s.scalars(select(PredictionBatch.model_name).order_by(PredictionBatch.id))) == [
            "credit",
            "other",
        ]
    r = runner.invoke(app, ["predictions", "purge", "--days", "30"])
    assert r.exit_code == 0 and "nothing to delete" in r.stdout  # nothing left: no --yes needed
