"""Write paper-32's jobs cycled to N jobs (benchmarks/scaling.py's workload) as a workload file,
so that ``marlaas sweep`` can compare policies on it::

    python -m benchmarks.cycled_workload --jobs 128 --steps 20 --out runs/paper-cycled-128.yaml
    marlaas sweep runs/paper-cycled-128.yaml --policies fair,affinity --out runs/cycled-128
"""

from __future__ import annotations

import argparse
import sys

import yaml

from benchmarks.scaling import cycled_workload
from marlaas.atomic import write_durably


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=128, help="jobs (a multiple of 8)")
    parser.add_argument("--steps", type=int, help="every job's rl.steps (default: its own)")
    parser.add_argument("--out", required=True, help="workload YAML file to write")
    args = parser.parse_args(argv)
    workload = cycled_workload(args.jobs, args.steps)
    data = workload.model_dump(mode="json", exclude_none=True)
    header = f"# paper-32's jobs cycled to {args.jobs} (benchmarks/cycled_workload.py)\n"
    write_durably(args.out, header + yaml.safe_dump(data, sort_keys=False))
    print(f"wrote {args.out} ({args.jobs} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
