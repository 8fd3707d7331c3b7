"""One serving version per model: partial unique index on model_versions(model_name) WHERE state = 'serving'.

Two promotions at the same time (API and CLI at once) could both archive the same old version and each set
a new one serving. The index lets only one of them commit; the other gets a conflict and retries. A model
that already has more than one serving version keeps the one changed last (the highest id on a tie); the
others are archived, each with an ``archive`` event (actor ``migration 0006``).

Revision ID: 0006_one_serving_version
Revises: 0005_monitor_run_duration
Create Date: 2026-12-17
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0006_one_serving_version"
down_revision = "0005_monitor_run_duration"
branch_labels = None
depends_on = None

INDEX = "uq_model_versions_one_serving"
WHERE = "state = 'serving'"
SERVING = "CAST({t}.state AS VARCHAR(16)) = 'serving'"


def _archive_extra_serving_rows() -> None:
    bind = op.get_bind()
    extra = bind.execute(
        sa.text(
            "SELECT v.id, v.model_name, v.version FROM model_versions v "
            f"WHERE {SERVING.format(t='v')} AND EXISTS (SELECT 1 FROM model_versions w "
            f"WHERE w.model_name = v.model_name AND {SERVING.format(t='w')} "
            "AND (w.updated_at > v.updated_at OR (w.updated_at = v.updated_at AND w.id > v.id))) "
            "ORDER BY v.id"
        )
    ).all()
    now = datetime.now(UTC)
    for row_id, model_name, version in extra:
        bind.execute(
            sa.text("UPDATE model_versions SET state = 'archived', updated_at = :now WHERE id = :id"),
            {"now": now, "id": row_id},
        )
        bind.execute(
            sa.text(
                "INSERT INTO model_version_events "
                "(model_name, version, action, from_state, to_state, reason, actor, at) "
                "VALUES (:m, :v, 'archive', 'serving', 'archived', :reason, 'migration 0006', :now)"
            ),
            {
                "m": model_name,
                "v": version,
                "reason": "another version of the model was serving too; one serving version per model",
                "now": now,
            },
        )


def upgrade() -> None:
    _archive_extra_serving_rows()
    op.create_index(
        INDEX,
        "model_versions",
        ["model_name"],
        unique=True,
        sqlite_where=sa.text(WHERE),
        postgresql_where=sa.text(WHERE),
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="model_versions")
