"""A tenant's commands: ``marlaas submit``, ``status``, ``watch``, ``cancel`` and ``fetch``, over
:mod:`marlaas.client` (httpx, imported inside the commands; without it a command says what to
install, in one line). :mod:`marlaas.service.cli` registers them with the operator's."""

from __future__ import annotations

import argparse
import sys

from marlaas.run_options import bounded_int, path_arg
from marlaas.service import MAX_ID
from marlaas.service.stack import require_service_stack
from marlaas.terminal import UsageError

SUBMIT_HELP = "submit a job spec (YAML or JSON) to a service"
STATUS_HELP = "your jobs on a service, or one job"
WATCH_HELP = "follow a job's steps live"
CANCEL_HELP = "cancel a job on a service"
FETCH_HELP = "download a job's adapter (a PEFT folder)"


def _client(args: argparse.Namespace):
    require_service_stack(("httpx",))
    from marlaas.client import Client

    try:
        return Client(args.url, args.key)
    except ValueError as err:
        raise UsageError(f"--url / $MARLAAS_URL: {err}") from None


def _client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="the service (default: $MARLAAS_URL, else "
                        "http://127.0.0.1:8000)")  # fmt: skip
    parser.add_argument("--key", help="API key (default: $MARLAAS_API_KEY)")


def _calling(command):
    """A tenant command, its service refusals as one line (exit 2; unreachable: 1)."""

    def run(args: argparse.Namespace) -> int:
        from marlaas.client import ServiceError

        try:
            with _client(args) as client:
                return command(client, args)
        except ServiceError as err:
            print(f"marlaas: error: {err}", file=sys.stderr)
            return 1 if err.status in (0, 503) or err.status >= 500 else 2

    return run


def _submit(client, args: argparse.Namespace) -> int:
    from marlaas.core.workload import WorkloadError
    from marlaas.workload_file import read_yaml

    spec = read_yaml(args.job, what="job spec")
    try:
        answer = client.submit(spec)
    except ValueError as err:  # a number JSON cannot carry: nothing was sent
        raise WorkloadError(f"{args.job}: {err}") from None
    print(f"job {answer['id']} {answer['state']}")
    return 0


def _status(client, args: argparse.Namespace) -> int:
    if args.id is not None:
        job = client.job(args.id)
        for key in ("id", "tenant", "name", "state", "step", "steps", "staleness_max",
                    "versions", "reason"):  # fmt: skip
            print(f"{key:<14s} {job[key]}")
        rewards = ", ".join("-" if r is None else f"{r:.3f}" for r in job["rewards"])
        print(f"{'rewards':<14s} {rewards or '-'}")
        return 0
    jobs = client.jobs()
    print(f"{'id':>6s}  {'tenant':<12s} {'name':<20s} {'state':<10s} {'step':>9s}  reward")
    for job in jobs:
        rewards = [r for r in job["rewards"] if r is not None]
        reward = f"{rewards[-1]:.3f}" if rewards else "-"
        print(f"{job['id']:>6d}  {job['tenant'][:12]:<12s} {job['name'][:20]:<20s} "
              f"{job['state']:<10s} {job['step']:>4d}/{job['steps']:<4d}  {reward}")  # fmt: skip
    return 0


def _watch(client, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    job = client.job(args.id)
    with tqdm(total=job["steps"], desc=f"job {args.id}",
              unit="step", dynamic_ncols=True) as bar:  # fmt: skip
        for event in client.events(args.id):
            if event.kind == "step":
                bar.update(max(0, event.data["version"] - bar.n))
                reward = event.data.get("reward")
                if reward is not None:
                    bar.set_postfix(reward=f"{reward:.3f}")
            elif event.kind == "state":
                bar.set_description(f"job {args.id} {event.data['state']}")
    job = client.job(args.id)
    print(f"job {args.id} {job['state']} at step {job['step']}/{job['steps']}"
          + (f": {job['reason']}" if job["reason"] else ""))  # fmt: skip
    return 0 if job["state"] == "done" else 1


def _cancel(client, args: argparse.Namespace) -> int:
    answer = client.cancel(args.id)
    print(f"job {answer['id']} {answer['state']}")
    return 0


def _fetch(client, args: argparse.Namespace) -> int:
    from marlaas.out_folder import claim

    with claim(args.out, "adapter") as target, target.staged() as staging:
        client.fetch(args.id, staging, args.version)
    print(f"wrote {args.out}/ (job {args.id}; PeftModel.from_pretrained(base, '{args.out}'))")
    return 0


def _id_argument(parser: argparse.ArgumentParser, required: bool = True) -> None:
    kind = bounded_int(1, MAX_ID)
    if required:
        parser.add_argument("id", type=kind, help="the job's id")
    else:
        parser.add_argument("id", type=kind, nargs="?", help="one job's id (default: all)")


def _submit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job spec file (YAML or JSON), in the workload schema")
    _client_arguments(parser)
    parser.set_defaults(func=_calling(_submit))


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    _id_argument(parser, required=False)
    _client_arguments(parser)
    parser.set_defaults(func=_calling(_status))


def _watch_arguments(parser: argparse.ArgumentParser) -> None:
    _id_argument(parser)
    _client_arguments(parser)
    parser.set_defaults(func=_calling(_watch))


def _cancel_arguments(parser: argparse.ArgumentParser) -> None:
    _id_argument(parser)
    _client_arguments(parser)
    parser.set_defaults(func=_calling(_cancel))


def _fetch_arguments(parser: argparse.ArgumentParser) -> None:
    _id_argument(parser)
    parser.add_argument("--version", type=bounded_int(0, 10**6),
                        help="the adapter version (default: the newest)")  # fmt: skip
    parser.add_argument("--out", required=True, type=path_arg, help="folder to write")
    _client_arguments(parser)
    parser.set_defaults(func=_calling(_fetch))


COMMANDS = (
    ("submit", SUBMIT_HELP, _submit_arguments),
    ("status", STATUS_HELP, _status_arguments),
    ("watch", WATCH_HELP, _watch_arguments),
    ("cancel", CANCEL_HELP, _cancel_arguments),
    ("fetch", FETCH_HELP, _fetch_arguments),
)
"""(name, help line, function adding the command's arguments and ``func``)."""
