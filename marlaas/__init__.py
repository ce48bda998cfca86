"""MARLaaS: multi-tenant asynchronous RL as a service (see README.md)."""

from marlaas import compiled

compiled.choose()
