"""Model registry: model_versions and model_version_labels.

Revision ID: 0001_registry
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001_registry"
down_revision = None
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
STATES = ("staged", "serving", "archived", "rejected")


def upgrade() -> None:
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.Enum(*STATES, name="version_state"), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("parent_version", sa.Integer(), nullable=True),
        sa.Column("metrics", JSONType, nullable=False),
        sa.Column("lineage", JSONType, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_model_versions"),
        sa.UniqueConstraint("model_name", "version", name="uq_model_versions_name_version"),
    )
    op.create_index("ix_model_versions_model_name", "model_versions", ["model_name"])
    op.create_table(
        "model_version_labels",
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("label", sa.String(64), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model_name", "label", name="pk_model_version_labels"),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name="fk_model_version_labels_version_id_model_versions",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("model_version_labels")
    op.drop_index("ix_model_versions_model_name", table_name="model_versions")
    op.drop_table("model_versions")
    sa.Enum(name="version_state").drop(op.get_bind(), checkfirst=True)
