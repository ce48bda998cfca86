"""``marlaas tenants``: the operator adds, lists, sets the quotas of and revokes a service's
tenants (their API keys) in its job store, with or without the service running. A tenant's
own commands (``submit``, ``status``, ...) are in :mod:`marlaas.service.tenant_cli`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from marlaas.run_options import bounded_int
from marlaas.service.data_folder import data_arguments, data_folder, open_store
from marlaas.terminal import UsageError

TENANTS_HELP = "add, list, set the quotas of or revoke a service's tenants (API keys)"


def _tenants(args: argparse.Namespace) -> int:
    from marlaas.core.spec_fields import check_name, shown_name
    from marlaas.service.store import TenantError, new_tenant_name

    if args.action != "list":  # the arguments are checked before the data folder is touched
        if args.name is None:
            raise UsageError(f"tenants {args.action}: give the tenant's NAME")
        try:
            check_name(args.name)
        except ValueError as err:
            raise UsageError(
                f"tenants {args.action}: tenant name {shown_name(args.name)}: {err}"
            ) from None
    if args.action in ("list", "revoke"):
        given = [flag for flag, value in (("--max-active-jobs", args.max_active_jobs),
                                          ("--max-queued-jobs", args.max_queued_jobs))
                 if value is not None]  # fmt: skip
        if given:
            raise UsageError(f"tenants {args.action}: {given[0]} is for tenants add and "
                             "tenants quota")  # fmt: skip
    if args.action != "add":  # they make nothing
        if not Path(args.data).exists():
            raise UsageError(f"tenants {args.action}: {args.data}: no such data folder "
                             "(`marlaas tenants add` or `marlaas serve` makes one)")  # fmt: skip
        data_folder(args.data, create=False)  # one of ours
    if args.action == "list":
        _list_tenants(args)
        return 0
    if args.action == "add" and not Path(args.data).exists():
        try:  # nothing stored there: a new tenant, refused before the folder is made
            new_tenant_name(args.name)
        except TenantError as err:
            raise UsageError(f"tenants add: {err}") from None
    from marlaas.service.db import DB_FILE

    if args.action != "add" and args.db is None and not (Path(args.data) / DB_FILE).exists():
        # revoke, quota: they make neither the database nor the keys' secret
        raise UsageError(f"tenants {args.action}: no tenant named {args.name!r} ({args.data} "
                         "has no database yet)")  # fmt: skip
    if args.action == "quota" and args.max_active_jobs is args.max_queued_jobs is None:
        raise UsageError("tenants quota: give --max-active-jobs or --max-queued-jobs (a number, "
                         "or 'default' for the cluster file's); one left out is kept")  # fmt: skip
    store = open_store(args)
    try:
        if args.action == "add":
            key = store.add_tenant(args.name, _quota_given(args))
            print(f"tenant {args.name} added; its API key (shown once, keep it):",
                  file=sys.stderr)  # fmt: skip
            print(key)
        elif args.action == "quota":
            quota = store.set_quota(args.name, **_quota_changes(args))
            print(
                f"tenant {args.name}: at most {_limit(quota.max_active_jobs, 'active')} and "
                f"{_limit(quota.max_queued_jobs, 'queued')} (from its next request)"
            )
        else:
            store.revoke_tenant(args.name)
            print(f"tenant {args.name}: key revoked")
    except TenantError as err:
        raise UsageError(f"tenants {args.action}: {err}") from None
    finally:
        store.close()
    return 0


def _quota_changes(args: argparse.Namespace) -> dict[str, int | None]:
    """The quotas the flags name, by field (None: ``default``, the cluster file's); one left
    out is not among them."""
    flags = {"max_active_jobs": args.max_active_jobs, "max_queued_jobs": args.max_queued_jobs}
    return {field: _or_none(value) for field, value in flags.items() if value is not None}


def _quota_given(args: argparse.Namespace):
    """``add``'s quotas, a TenantSpec: those the flags name, the cluster file's for the others."""
    from marlaas.core.tenant_spec import TenantSpec

    return TenantSpec(**_quota_changes(args))


def _or_none(value: int | str) -> int | None:
    """A quota flag's value: a number, or None for ``default`` (the cluster file's)."""
    return None if value == QUOTA_DEFAULT else int(value)


QUOTA_DEFAULT = "default"
"""A quota flag's value that stands for the cluster file's quota."""


def _quota_flag(low: int, high: int):
    """An argparse ``type``: an integer in [low, high], or ``default``."""
    number = bounded_int(low, high)

    def parse(text: str) -> int | str:
        if text == QUOTA_DEFAULT:
            return text
        try:
            return number(text)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{err}, nor {QUOTA_DEFAULT!r}") from None

    parse.__name__ = "quota"
    return parse


def _list_tenants(args: argparse.Namespace) -> None:
    """``tenants list``: it only reads, so it opens the job store read-only (it migrated the
    database, and made it and the keys' secret in a data folder that had none); the secret is
    checked where there is one (a damaged or missing one is the operator's to hear of)."""
    from marlaas.service.db import DB_FILE

    counts, tenants = {}, []
    if args.db is not None or (Path(args.data) / DB_FILE).exists():  # else none: not made
        store = open_store(args, read_only=True)
        try:
            counts, tenants = store.job_counts(), store.tenants()
        finally:
            store.close()
    from marlaas.service.tenant_names import shown_tenant

    names = [shown_tenant(t.name) + (" (revoked)" if t.revoked else "") for t in tenants]
    width = max([24, *map(len, names)])  # every row's columns line up under the longest
    print(f"{'tenant':<{width}s} {'active':>6s} {'queued':>6s}  jobs")
    for tenant, name in zip(tenants, names, strict=True):
        quota = tenant.quota
        jobs = ", ".join(f"{n} {s}" for s, n in sorted(counts.get(tenant.name, {}).items()))
        print(f"{name:<{width}s} {_limit(quota.max_active_jobs):>6s} "
              f"{_limit(quota.max_queued_jobs):>6s}  {jobs or '-'}")  # fmt: skip


def _limit(value: int | None, what: str = "") -> str:
    """A tenant's quota as listed (``-``: the cluster file's); with ``what``, in words."""
    if what:
        return f"the cluster file's {what}" if value is None else f"{value} {what}"
    return "-" if value is None else str(value)


def _tenants_arguments(parser: argparse.ArgumentParser) -> None:
    from marlaas.core.limits import MAX_JOBS

    parser.add_argument("action", choices=("add", "list", "quota", "revoke"), help="add a "
                        "tenant (its API key printed once), list them, set one's quotas (its "
                        "key kept), or revoke one's key")  # fmt: skip
    parser.add_argument("name", nargs="?", help="the tenant (add, quota, revoke)")
    data_arguments(parser)
    parser.add_argument("--max-active-jobs", type=_quota_flag(1, MAX_JOBS), metavar="N",
                        help="add, quota: its jobs admitted at once, or 'default': the "
                        "cluster file's (quota: left out, kept as it is)")  # fmt: skip
    parser.add_argument("--max-queued-jobs", type=_quota_flag(0, MAX_JOBS), metavar="N",
                        help="add, quota: its jobs waiting at once, or 'default': the "
                        "cluster file's (quota: left out, kept as it is)")  # fmt: skip
    parser.set_defaults(func=_tenants)
