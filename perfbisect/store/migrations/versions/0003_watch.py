"""Continuous mode: watched series, their launches, and the change points found in them.

Revision ID: 0003_watch
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_watch"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "watch_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("branch", sa.String(length=255), nullable=False),
        sa.Column("host_class", sa.String(length=255), nullable=False),
        sa.Column("experiment_sha256", sa.String(length=64), nullable=False),
        sa.Column("experiment_path", sa.Text(), nullable=False),
        sa.Column("metric", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("branch", "host_class", "experiment_sha256"),
    )
    op.create_table(
        "watch_launches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=False),
        sa.Column("commit", sa.String(length=64), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["series_id"], ["watch_series.id"]),
        sa.ForeignKeyConstraint(["launch_id"], ["launches.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_watch_launches_series_id", "watch_launches", ["series_id"])
    op.create_table(
        "change_points",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("commit_before", sa.String(length=64), nullable=False),
        sa.Column("commit_after", sa.String(length=64), nullable=False),
        sa.Column("ordinal_after", sa.Integer(), nullable=False),
        sa.Column("detected_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["series_id"], ["watch_series.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("series_id", "commit_after"),
    )
    op.create_index("ix_change_points_series_id", "change_points", ["series_id"])


def downgrade() -> None:
    op.drop_index("ix_change_points_series_id", table_name="change_points")
    op.drop_table("change_points")
    op.drop_index("ix_watch_launches_series_id", table_name="watch_launches")
    op.drop_table("watch_launches")
    op.drop_table("watch_series")
