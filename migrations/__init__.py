"""Alembic migrations for every table of driftwarden (``driftwarden db upgrade``)."""
