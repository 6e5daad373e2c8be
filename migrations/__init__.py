"""Alembic migrations. `bot.database.migrate` runs them on start; one revision per schema change."""
