"""What a service's tenant may be named: one rule, checked wherever a tenant is made.

A tenant's name is shown in tables (``tenants list``), log lines and error messages, and an
operator types it in commands: 1 to :data:`MAX_TENANT_NAME_CHARS` ASCII letters, digits,
``-``, ``_`` and ``.``, not starting with ``.`` or ``-`` (nothing to quote, escape or
misalign, and never read as a command's option).
A tenant stored before the rule may hold any other printable name: it is kept, listed
quoted (:func:`shown_tenant`), and its quotas set, revoked and re-keyed by that name.
"""

from __future__ import annotations

import re

MAX_TENANT_NAME_CHARS = 64
"""The longest name a new tenant may have [characters]."""
_ALLOWED = re.compile(r"[A-Za-z0-9_.-]*")
_BAD_CHAR = re.compile(r"[^A-Za-z0-9_.-]")


def check_tenant_name(name: str) -> str:
    """``name`` when it may name a new tenant (see the module docstring); a ValueError
    saying what is wrong otherwise (the name itself is for the caller to echo)."""
    if not name:
        raise ValueError("must not be empty")
    if len(name) > MAX_TENANT_NAME_CHARS:
        raise ValueError(f"at most {MAX_TENANT_NAME_CHARS} characters (got {len(name)})")
    if not _ALLOWED.fullmatch(name):
        bad = _BAD_CHAR.search(name)[0]
        raise ValueError(f"holds {bad!r}: a tenant name is ASCII letters, digits, '-', '_' "
                         "and '.' only")  # fmt: skip
    if name.startswith("."):
        raise ValueError("must not start with '.'")
    if name.startswith("-"):  # `tenants revoke -rf` is an unknown option, not the tenant
        raise ValueError("must not start with '-' (a command line reads it as an option)")
    return name


def shown_tenant(name: str) -> str:
    """``name`` as a table shows it: as it is when it follows the rule; quoted (and cut to
    its first 40 characters) when it is a name stored before the rule."""
    from marlaas.core.spec_fields import shown_name

    try:
        return check_tenant_name(name)
    except ValueError:
        return shown_name(name)
