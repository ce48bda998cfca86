"""The service's libraries: a command that needs them says what to install when they are
missing, in one line."""

from __future__ import annotations

import importlib.util

from marlaas.terminal import UsageError

SERVICE_STACK = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "httpx", "sse_starlette",
                 "prometheus_client")  # fmt: skip


def require_service_stack(names=SERVICE_STACK) -> None:
    """A UsageError with the install command when the service's libraries are missing."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"the service needs {', '.join(missing)}: pip install -e '.[service]'")
