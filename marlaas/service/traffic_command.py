"""``marlaas traffic``: a service's submissions, read from its job store, written as a
workload file that ``marlaas simulate`` replays (:mod:`marlaas.service.traffic`)."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import suppress
from pathlib import Path

from marlaas.run_options import path_arg
from marlaas.service.data_folder import CONFIG_FILE, data_arguments, data_folder, open_store
from marlaas.terminal import UsageError

TRAFFIC_HELP = "write a service's submissions as a workload file (for marlaas simulate)"


def _traffic(args: argparse.Namespace) -> int:
    from marlaas.atomic import write_durably
    from marlaas.core.limits import MAX_GROUP_TURNS, MAX_JOBS
    from marlaas.out_folder import claim_file
    from marlaas.service.config import ServiceConfig, load_named_policy
    from marlaas.service.traffic import is_traffic_file, traffic_workload, traffic_yaml

    saved = data_folder(args.data, create=False) / CONFIG_FILE  # read only: nothing made
    if not saved.is_file():
        raise UsageError(f"traffic: {args.data} has no {CONFIG_FILE}; has it been served?")
    text = saved.read_bytes()
    plain = None
    with suppress(ValueError):  # not JSON: said below, as damaged
        plain = json.loads(text)
    if isinstance(plain, dict):  # a policy by import path is loaded before it is checked
        load_named_policy(plain.get("policy"), str(saved))
    try:
        config = ServiceConfig.model_validate_json(text)
    except ValueError as err:  # pydantic's ValidationError: not JSON, or not a cluster file
        from marlaas.core.validation_message import format_validation_error

        raise UsageError(
            f"traffic: {saved}: damaged ({format_validation_error(err, 'config')}); `marlaas "
            "serve` writes it again (the cluster file the service runs with)"
        ) from None
    from marlaas.service.db import DB_FILE

    if args.db is None and not (Path(args.data) / DB_FILE).exists():  # opening it makes it
        from marlaas.core.workload import WorkloadError

        raise WorkloadError("the service has had no submissions yet: no traffic to write")
    store = open_store(args, with_keys=False, read_only=True)  # it reads: nothing is written
    try:
        workload, left_out, unkept = traffic_workload(store, config)
    finally:
        store.close()
    with claim_file(args.out, "traffic workload", is_traffic_file) as path:
        write_durably(path, traffic_yaml(workload))
    if left_out:
        print(f"marlaas: warning: traffic: the oldest {left_out:,} submissions are left out: "
              f"a workload holds at most {MAX_JOBS:,} jobs and {MAX_GROUP_TURNS:,} group-turns "
              "in all (the newest that fit are written)", file=sys.stderr)  # fmt: skip
    if unkept:
        print(f"marlaas: warning: traffic: {unkept:,} older refused submissions are left out: "
              "the service keeps the spec of each tenant's newest refused ones only (service: "
              f"refused_specs_kept, {config.service.refused_specs_kept})",
              file=sys.stderr)  # fmt: skip
    print(f"wrote {args.out} ({len(workload.jobs)} jobs, {len(workload.tenants)} tenants); "
          f"replay it: marlaas simulate {args.out} --out RUN")  # fmt: skip
    return 0


def _traffic_arguments(parser: argparse.ArgumentParser) -> None:
    data_arguments(parser)
    parser.add_argument("--out", required=True, type=path_arg, help="workload file to write")
    parser.set_defaults(func=_traffic)
