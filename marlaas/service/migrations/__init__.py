"""Alembic's migrations of the service's schema (run by marlaas.service.db.migrate)."""
