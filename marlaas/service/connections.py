"""The service's bounds on event streams and connections, named once: the API
(:mod:`marlaas.service.app`), the server (:mod:`marlaas.service.server`) and ``serve``'s help
and checks (:mod:`marlaas.service.serve_command`) read them here. It imports nothing, so that
``marlaas serve --help`` states them without the service's libraries (``serve --help`` wrote
the figures out, and a change to one here would have left the help naming the old one)."""

MAX_STREAMS_PER_CALLER = 16
"""Event streams one key may hold open at once; one more is 429."""
MAX_STREAMS = 256
"""Event streams the service holds open at once, of every tenant together (``serve
--max-streams``); one more is 429: each polls the database, and many slow every request."""
OTHER_CONNECTIONS = 256
"""Connections the server keeps open for requests, beyond its event streams' places (every
tenant's ``max_streams`` and the operator's own)."""


def connection_limit(max_streams: int) -> int:
    """Connections open at once for a service of ``max_streams`` event streams: each stream
    holds one, the operator's :data:`MAX_STREAMS_PER_CALLER` are not counted in
    ``max_streams``, and requests need :data:`OTHER_CONNECTIONS` more."""
    return max_streams + MAX_STREAMS_PER_CALLER + OTHER_CONNECTIONS
