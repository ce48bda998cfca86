"""The service's commands, as marlaas.cli registers them: the operator's ``serve``
(:mod:`~marlaas.service.serve_command`), ``tenants`` (:mod:`~marlaas.service.tenants_command`)
and ``traffic`` (:mod:`~marlaas.service.traffic_command`), and a tenant's ``submit``,
``status``, ``watch``, ``cancel`` and ``fetch`` (:mod:`~marlaas.service.tenant_cli`). The
service's libraries (FastAPI, uvicorn, SQLAlchemy, httpx) are imported inside the commands;
without them a command says what to install, in one line.
"""

from __future__ import annotations

from marlaas.service import serve_command, tenant_cli, tenants_command, traffic_command

COMMANDS = (
    ("serve", serve_command.SERVE_HELP, serve_command._serve_arguments),
    ("tenants", tenants_command.TENANTS_HELP, tenants_command._tenants_arguments),
    ("traffic", traffic_command.TRAFFIC_HELP, traffic_command._traffic_arguments),
    *tenant_cli.COMMANDS,
)
"""(name, help line, function adding the command's arguments and ``func``)."""
