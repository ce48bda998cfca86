"""Workload files: YAML on disk -> a validated :class:`WorkloadFile`.

Everything a workload file refers to is read here, once, so that the scheduler core only ever
sees plain data: trace files named by ``dist: trace`` distributions (paths relative to the
workload file), the arrivals file (an arrivals CSV or a request trace's timestamps), and the
``cost:`` block the simulator reads. Environment
names and their options are checked against the environments that would run them. Every
problem is one :class:`WorkloadError` line naming the file and the field.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from marlaas import strict_json
from marlaas.core.workload import Workload, WorkloadError, parse_workload
from marlaas.file_kind import file_problem
from marlaas.policy_path import PolicyLoadError, load_policy
from marlaas.sim.cost_model import CostModel
from marlaas.yaml_nodes import MERGE_TAG, check_nodes

MAX_FILE_BYTES = 16 * 1024 * 1024
"""Largest workload file read [bytes]; larger ones are refused before parsing."""
MAX_NODES = 2_000_000
"""Values (mappings, lists, scalars) a workload may expand to, counting every use of a YAML
alias again: an alias bomb (``&a [*b, *b, ...]``) of a few lines is refused here."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists in a workload."""


class WorkloadFile(Workload):
    """A workload as written in a file: the core's workload plus the simulator's cost model."""

    cost: CostModel = Field(default_factory=CostModel)
    """How long work takes in simulation (default: a 7B-class model on an H100-class GPU)."""


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The C-accelerated safe loader, refusing a mapping that repeats a key, and a scalar
    that its type cannot hold (an int of more digits than Python converts, ``!!float x``) as
    a YAML error at its line instead of a ValueError."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as err:
            shown = node.value if isinstance(node.value, str) else node.tag
            reason = " ".join(str(err).split(";")[0].split())
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {shown[:40]!r}{'...' if len(shown) > 40 else ''} "
                f"as {node.tag.rsplit(':', 1)[-1]}: {reason}", node.start_mark,
            ) from None  # fmt: skip


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # "<<: *anchor" merges defaults that the keys beside it may override
        key = loader.construct_object(key_node, deep=deep)  # text: marlaas.yaml_nodes
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)

# Numbers as YAML 1.2 reads them. PyYAML follows YAML 1.1, where 0123 is octal 83, 1:20 is
# sexagesimal 80 and 0b101 is 5 (each silently another number than written), and 1e3 is a
# string; here 0123 is 123, 1e3 is 1000.0, and 1:20 and 0b101 are text a number field refuses.
# Digits grouped by underscores are an int, as Python reads them (1_000 is 1000: YAML 1.1's
# reading too, which 1.2 dropped); a count refuses text, "1000" in quotes included
# (marlaas.core.plain_numbers), and a float field reads 1_000.5, text here, as 1000.5.
# Dates as YAML 1.2 reads them too: its schema has no timestamps, so an unquoted 2024-01-01 or
# 2024-01-01T10:00:00Z is the text written (YAML 1.1 made it a date, which JSON cannot hold: an
# env arg got a date object, and workload.json its text in another format). A plain = is text
# as well (YAML 1.1's !!value, which no loader constructs), and so is << where it is a value,
# not a key (a key << merges the mappings it names).
_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_TIMESTAMP, _VALUE = "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"
_NOT_AS_1_1 = (_INT, _FLOAT, _TIMESTAMP, _VALUE)
"""Tags PyYAML resolves as YAML 1.1 does: numbers are resolved below, the others never."""
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+(?:_[0-9]+)*|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in _NOT_AS_1_1]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(_INT, _INT_12, list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(_FLOAT, _FLOAT_12, list("-+0123456789."))


def _int_12(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """A YAML 1.2 integer: decimal (leading zeros are not octal; digits may be grouped by
    underscores, 1_000), 0o octal or 0x hex."""
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


_UniqueKeyLoader.add_constructor(_INT, _int_12)
# A key << is merged before it is constructed (SafeConstructor.flatten_mapping): what reaches
# this constructor is a << elsewhere, the text written.
_UniqueKeyLoader.add_constructor(MERGE_TAG, yaml.SafeLoader.construct_scalar)


def read_yaml(path: str | Path, what: str = "workload", error: type = WorkloadError) -> Any:
    """Parse a YAML file (size-capped; duplicate keys, alias bombs and deep nesting refused)
    into plain data; ``what`` the file is (``workload``, ``cost profile``) names it in the
    ``error`` raised."""
    path = Path(path)
    problem = file_problem(path, what)
    if problem:
        raise error(f"{path}: {problem}")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise error(f"{path}: {size:,} bytes; a {what} file may have at most "
                    f"{MAX_FILE_BYTES:,}")  # fmt: skip
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{path}: not a text file ({err.reason})") from None
    except OSError as err:
        raise error(f"{path}: cannot read it ({err.strerror})") from None
    return parse_yaml(text, str(path), error)


def parse_yaml(text: str, source: str, error: type = WorkloadError) -> Any:
    """Parse YAML text (duplicate keys, keys that are not text, values JSON cannot hold: bytes,
    sets, dates tagged !!timestamp and other tags (marlaas.yaml_nodes), alias bombs and deep
    nesting refused, as ``error``). The parser's events are counted first, one at a time: a
    text of more than MAX_NODES values is refused before its document is built (a 14 MB list
    of numbers took 30 s and 2.7 GB to build, then was refused)."""
    try:
        for count, _ in enumerate(yaml.parse(text, Loader=_UniqueKeyLoader), 1):
            if count > MAX_NODES:
                raise error(f"{source}: more than {MAX_NODES:,} values (mappings, lists and "
                            "scalars); not loading it")  # fmt: skip
        loader = _UniqueKeyLoader(text)
        try:
            root = loader.get_single_node()
            if root is not None:
                check_nodes(root, source, error)
            data = None if root is None else loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        raise error(f"{source}: not valid YAML ({_one_line(err)})") from None
    except RecursionError:
        raise error(f"{source}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    check_size(data, source, error)
    return data


def check_size(data: Any, source: str, error: type = WorkloadError) -> None:
    """Refuse data that expands to more than MAX_NODES values or nests deeper than
    MAX_DEPTH (the walk stops at the first value over the budget), as ``error``."""
    stack, seen = [(data, 1)], 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise error(f"{source}: expands to more than {MAX_NODES:,} values (YAML "
                        "aliases repeated too often?); not loading it")  # fmt: skip
        if depth > MAX_DEPTH:
            raise error(f"{source}: nested too deeply (at most {MAX_DEPTH} levels)")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
            seen += len(node)  # the keys
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def load_workload(path: str | Path, overrides: dict[str, Any] | None = None) -> WorkloadFile:
    """Read, resolve and validate a workload file, then apply dotted-path ``overrides``."""
    path = Path(path)
    data = read_yaml(path)
    if data is None:  # an empty file, or comments only
        raise WorkloadError(f"{path}: holds no workload (empty, or comments only); a "
                            "workload is a mapping with at least jobs: [...] (see "
                            "traces/small.yaml)")  # fmt: skip
    data = resolve_files(data, path.parent, str(path))
    check_size(data, f"{path} (with its traces)")
    _load_named_policy(data, str(path))
    workload = parse_workload(data, source=str(path), schema=WorkloadFile)
    if overrides:  # the environments are checked once, as overridden
        return apply_overrides(workload, overrides, source=f"{path} with --set")
    check_environments(workload, str(path))
    return workload


def _load_named_policy(data: Any, source: str) -> None:
    """Register the policy that raw workload ``data`` names, if it is an import path, before
    the schema checks the name: a WorkloadError from ``source`` with the PolicyLoadError's
    line (what is wrong with the path, or an empty name), as any bad field of the file."""
    if isinstance(data, dict) and isinstance(data.get("policy"), str):
        try:
            load_policy(data["policy"])
        except PolicyLoadError as err:
            raise WorkloadError(f"{source}: {err}") from None


def load_run_workload(run_dir: str | Path) -> WorkloadFile:
    """The workload a run folder was made from (its ``workload.json``)."""
    path = Path(run_dir) / "workload.json"
    if not path.is_file():
        raise WorkloadError(
            f"{run_dir}: no workload.json (a run folder written by this version of marlaas has one)"
        )
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise WorkloadError(f"{path}: {size:,} bytes; a workload may have at most "
                            f"{MAX_FILE_BYTES:,}")  # fmt: skip
    try:
        data = strict_json.loads(path.read_text(encoding="utf-8"))
    except strict_json.TooDeepError:
        raise WorkloadError(f"{path}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except (OSError, ValueError) as err:
        raise WorkloadError(f"{path}: not readable JSON ({_one_line(err)})") from None
    check_size(data, str(path))
    return parse_workload(data, source=str(path), schema=WorkloadFile)


def apply_overrides(
    workload: Workload, overrides: dict[str, Any], source: str = "overrides"
) -> Workload:
    """``workload`` with dotted-path overrides applied, its arrivals CSV applied again (so
    ``arrivals.time_scale`` takes effect) and any trace an override names read in, validated
    again; an error is named by ``source`` (a file's: ``w.yaml with --set``, as what is wrong
    may be the file's own, not the override's).

    The overrides are set on the validated workload's plain data (``model_dump``), not on the
    file's: a path may name a field the file leaves to its default (``jobs.*.prompt_tokens.
    value`` where the file has no ``prompt_tokens``), which only the validated workload
    holds; pydantic validates a whole model, so the changed data is validated once more."""
    data = workload.overridden(copy.deepcopy(overrides))  # fresh: resolved in place
    check_size(data, source)
    data = resolve_files(data, Path.cwd(), source)
    _load_named_policy(data, source)  # --set policy=pkg.module:Class
    changed = parse_workload(data, source=source, schema=type(workload))
    check_environments(changed, source)
    return changed


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``key=value`` strings (``--set``) -> {key: YAML-parsed value}."""
    overrides = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkloadError(f"--set {item!r}: expected key=value, e.g. scheduling.barrier=true")
        if key.strip() in overrides:  # which one was meant? (a sweep takes several: one run each)
            raise WorkloadError(
                f"--set {key.strip()[:80]!r} given twice; give each key once "
                "(marlaas sweep runs one simulation per value of a key)"
            )
        try:
            overrides[key.strip()] = parse_yaml(value, f"--set {item[:80]!r}")
        except WorkloadError as err:
            raise WorkloadError(str(err).replace("not valid YAML", "not a YAML value")) from None
    return overrides


def load_with_overrides(path: str | Path, items: list[str] | None) -> Workload:
    """Load a workload file and apply ``--set key=value`` items."""
    return load_workload(path, parse_overrides(items))


# --------------------------------------------------------------------------- referenced files


def resolve_files(data: Any, base_dir: Path, source: str) -> Any:
    """Raw workload data with its trace distributions and arrivals file read in (paths
    relative to ``base_dir``); the trace distributions are filled in place (``data`` is a
    caller's fresh copy: parsed from the file, or dumped from a workload)."""
    if not isinstance(data, dict):
        return data  # the schema names the problem
    from marlaas.traces import TraceError, apply_arrivals

    jobs = data.get("jobs")
    for i, job in enumerate(jobs if isinstance(jobs, list) else []):
        if isinstance(job, dict):
            _read_traces(job, base_dir, f"{source}: jobs[{i}]")
            _resolve_dataset(job, base_dir)
    if isinstance(data.get("arrivals"), dict):
        try:
            data = apply_arrivals(data, base_dir)
        except TraceError as err:
            raise WorkloadError(f"{source}: arrivals: {err}") from None
    return data


def _read_traces(node: Any, base_dir: Path, where: str) -> None:
    """Fill every ``dist: trace`` mapping under ``node`` with its file's values, in place."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            _read_traces(item, base_dir, f"{where}[{i}]")
        return
    if not isinstance(node, dict):
        return
    if node.get("dist") == "trace" and isinstance(node.get("path"), str) and not node.get("values"):
        from marlaas.traces import TraceError, load_length_trace

        path = Path(node["path"])
        path = path if path.is_absolute() else base_dir / path
        column = node.get("column", "response")
        try:
            lengths = load_length_trace(path, node.get("format", "csv"))
        except TraceError as err:
            raise WorkloadError(f"{where}: {err}") from None
        if not isinstance(column, str) or column not in lengths:
            return  # the schema names the bad column (a mapping or list too)
        node["path"] = str(path.resolve())
        node["values"] = [float(v) for v in lengths[column]]
        return
    for key, value in node.items():
        _read_traces(value, base_dir, f"{where}.{key}")


def _resolve_dataset(job: dict, base_dir: Path) -> None:
    """Make a job's dataset paths absolute (relative ones are from ``base_dir``), in place."""
    dataset = job.get("dataset")
    if not isinstance(dataset, dict):
        return  # none, or the schema names the problem
    for key in ("path", "heldout"):
        value = dataset.get(key)
        if isinstance(value, str) and value.strip():  # a blank one: the schema refuses it
            dataset[key] = str((base_dir / value).resolve())


def check_environments(workload: Workload, source: str) -> None:
    """Every job's environment name resolves and its options are accepted; a job whose
    environment checks dataset answers has a dataset, which is read and split, its answers
    checked by the environment (:func:`marlaas.envs.job_dataset.job_prompt_set`: a run reads
    it again through the same checks); a job whose environment draws its own prompts has
    none."""
    from marlaas.datasets import DatasetError
    from marlaas.envs import EnvLoadError, check_env, resolve_env
    from marlaas.envs.job_dataset import job_prompt_set

    for i, job in enumerate(workload.jobs):
        try:
            check_env(job.env.name, job.env.args)
        except (EnvLoadError, ValueError, TypeError) as err:
            raise WorkloadError(f"{source}: jobs[{i}].env: {_one_line(err)}") from None
        needs = resolve_env(job.env.name).needs_dataset
        if needs and job.dataset is None:
            raise WorkloadError(f"{source}: jobs[{i}].dataset: environment {job.env.name!r} "
                                "checks answers from a dataset; give the job one "
                                "(dataset: {path: ...})")  # fmt: skip
        if job.dataset is not None and not needs:
            raise WorkloadError(f"{source}: jobs[{i}].dataset: environment {job.env.name!r} "
                                "draws its own prompts; a dataset is for the environments "
                                "that check its answers (math, exact_match, regex)")  # fmt: skip
        if job.dataset is not None:
            try:
                job_prompt_set(job)
            except DatasetError as err:
                raise WorkloadError(f"{source}: jobs[{i}].dataset: {err}") from None


def _one_line(err: Exception) -> str:
    """A YAML error on one line: what is wrong and where (line, column), without the
    parser's echo of the text."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        context = f"{err.context}: " if err.context else ""
        text = f"{context}{err.problem}{where}"
    else:
        text = str(err)
    return " ".join(text.split())
