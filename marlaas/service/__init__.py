"""MARLaaS as a service: tenants submit, watch, cancel and fetch their jobs over HTTP.

The service is the one driver loop (:func:`marlaas.drive.drive`) kept open: a tenant's
request becomes an inbox item, the same scheduler core and policies decide, and the real
executor (or the simulator in real time, ``--simulate``) enacts. Jobs, tenants and every
state change live in a database (SQLite in the data folder by default, PostgreSQL by URL;
SQLAlchemy, migrations with Alembic); a step counts once its adapter version, optimizer
state, reward and event-log rows are durable, so a restart continues every job from its
last durable step.

    config.py    the cluster file ``marlaas serve`` reads (a workload file with no jobs)
    requests.py  what a tenant may submit (no paths, no import paths, within the limits)
    db.py        the tables and the database (SQLAlchemy), migrated by Alembic
    store.py     the job store: tenants, jobs, steps, events, event-log rows
    keys.py      API keys and their keyed hashes
    runner.py    the driver loop on its own thread, recording what happens in the store
    realtime.py  the simulator on the wall clock (``--simulate``)
    app.py       the HTTP API (FastAPI), the dashboard and the metrics
    connections.py  the bounds on event streams and connections (``serve --help`` states them)
"""

MAX_ID = 2**31 - 1
"""The largest job or event id the service has: its tables' ids are INTEGER, 32 bits on
PostgreSQL. A job id past it in a request is 422 (the database refused it: a 500), a
``Last-Event-ID`` past it streams from the start, as any value that is no event's id."""
