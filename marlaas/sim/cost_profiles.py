"""Cost profiles: a cost model for one model on one kind of hardware, with where it came from.

A profile is YAML::

    name: cpu-tiny
    description: ...
    origin: calibrated | published
    hardware: ..., model: ...              (free text: one line of printable characters)
    sources: {...}                         (published: citations; calibrated: runs, fit quality)
    cost: {decode_base_ms: ..., ...}       (every CostModel field but LATE_COSTS: a file
                                            that leaves one out is refused, naming it)

``--cost NAME`` picks a bundled profile (marlaas/sim/profiles/NAME.yaml), ``--cost PATH`` a file.
``marlaas calibrate`` writes profiles from real runs.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from marlaas.atomic import write_durably
from marlaas.core import limits as L
from marlaas.core.validation_message import format_validation_error, short_repr
from marlaas.core.workload import WorkloadError
from marlaas.file_kind import file_problem
from marlaas.sim.cost_model import CostModel
from marlaas.workload_file import read_yaml

BUNDLED = Path(__file__).parent / "profiles"
"""Folder of the profiles that ship with marlaas."""


MAX_TEXT_CHARS = 16_384
"""Longest free-text field of a profile (``description``, ``hardware``, ...) [characters]."""
TEXT_FIELDS = {"name": L.MAX_NAME_CHARS, "description": MAX_TEXT_CHARS,
               "origin": MAX_TEXT_CHARS, "hardware": MAX_TEXT_CHARS, "model": MAX_TEXT_CHARS,
               "calibrated_at": MAX_TEXT_CHARS}  # fmt: skip
"""The profile's text fields (their longest): a run's summary records them and the commands
print its name, so each is one line of printable characters (or absent, or null)."""


class ProfileError(WorkloadError):
    """A cost profile that is missing, unreadable or invalid."""


@dataclass(frozen=True)
class CostProfile:
    """A validated cost model and its provenance."""

    name: str
    cost: CostModel
    path: str
    digest: str
    """sha256 of the file (first 12 hex digits), to tell profiles of one name apart."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Everything in the file besides ``cost`` (origin, hardware, model, sources)."""

    def summary(self) -> dict[str, Any]:
        """What a run's summary records of the profile it used."""
        keys = ("origin", "hardware", "model", "description")
        return {"name": self.name, "path": self.path, "sha256": self.digest,
                **{k: self.meta[k] for k in keys if k in self.meta}}  # fmt: skip


def bundled_profiles() -> list[str]:
    """Names of the profiles that ship with marlaas."""
    return sorted(p.stem for p in BUNDLED.glob("*.yaml"))


def resolve_profile(name_or_path: str | Path) -> Path:
    """The file of a bundled profile name, or the given path."""
    path = Path(name_or_path)
    problem = file_problem(path, "cost profile")
    if problem is None:
        return path
    bundled = BUNDLED / f"{name_or_path}.yaml"
    if file_problem(bundled, "cost profile") is None:
        return bundled
    if not problem.startswith("no such"):  # a folder, a device, a name the system refuses
        raise ProfileError(f"--cost {str(name_or_path)!r}: {problem}")
    raise ProfileError(
        f"--cost {str(name_or_path)!r}: no such file and no bundled profile of that name "
        f"(bundled: {', '.join(bundled_profiles()) or 'none'})"
    )


LATE_COSTS = (
    "train_shares_prompts",
    "train_forward_share",
    "adapter_load_wait_iterations",
    "overlap_decode_slowdown",
    "overlap_train_slowdown",
)
"""Costs added after profiles were first written (``calibrate``'s and the bundled ones): a
profile from before them may leave them out, and runs on their defaults, as it did. Every
other cost a profile file must name."""


def load_profile(
    name_or_path: str | Path, base: CostModel | None = None, complete: bool = True
) -> CostProfile:
    """Read and validate a profile; its ``cost`` values replace ``base``'s (default: the
    defaults) field by field. The file is read as a workload file is (size cap, duplicate
    keys, alias bombs and deep nesting refused: marlaas.workload_file.read_yaml). With
    ``complete``, the file must name every cost field but :data:`LATE_COSTS` (a hand-edited
    profile missing one would silently run on its default: a ProfileError names those
    missing)."""
    path = resolve_profile(name_or_path)
    data = read_yaml(path, "cost profile", ProfileError)
    if not isinstance(data, dict) or not isinstance(data.get("cost"), dict):
        raise ProfileError(f"{path}: a cost profile is a mapping with a 'cost' mapping")
    merged = {**(base or CostModel()).model_dump(), **data["cost"]}
    try:
        cost = CostModel.model_validate(merged)
    except ValidationError as err:
        raise ProfileError(format_validation_error(err, f"{path}: cost", CostModel)) from None
    meta = {k: v for k, v in data.items() if k != "cost"}
    _check_text_fields(meta, path)
    _check_yardstick(meta, path)
    missing = [n for n in CostModel.model_fields if n not in data["cost"] and n not in LATE_COSTS]
    if complete and missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5
                                          else "")  # fmt: skip
        raise ProfileError(f"{path}: cost: missing {shown}; a cost profile names every cost "
                           "(`marlaas calibrate` writes them all)")  # fmt: skip
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return CostProfile(str(data.get("name") or path.stem), cost, str(path), digest, meta)


def _check_text_fields(meta: dict[str, Any], path: Path) -> None:
    """Each of TEXT_FIELDS in ``meta`` is null or one line of printable text within its
    length (ProfileError naming the field otherwise: a YAML number or a list is not text)."""
    for key, limit in TEXT_FIELDS.items():
        value = meta.get(key)
        if value is None or (isinstance(value, str) and len(value) <= limit
                             and value.isprintable()):  # fmt: skip
            continue
        raise ProfileError(f"{path}: {key}: must be text of at most {limit:,} printable "
                           f"characters on one line (quote a number) "
                           f"(got {short_repr(value)})")  # fmt: skip


def _check_yardstick(meta: dict[str, Any], path: Path) -> None:
    """``sources.yardstick_s_per_token``, where the profile has it, is a time per token above 0
    (ProfileError naming it otherwise): a replay sets each run's yardstick against it, and a
    hand-edited one that is not a time was passed over without a word, the run's speed not
    charged."""
    sources = meta.get("sources")
    value = sources.get("yardstick_s_per_token") if isinstance(sources, dict) else None
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)
                         and 0 < value < math.inf):  # fmt: skip
        return
    raise ProfileError(f"{path}: sources.yardstick_s_per_token: must be a time per token "
                       f"above 0 [s] (got {short_repr(value)})")  # fmt: skip


def is_calibrated_profile(path: Path) -> bool:
    """Whether ``path`` is a profile ``marlaas calibrate`` wrote (what it may replace): a
    valid profile whose origin is ``calibrated``, with the time it was calibrated."""
    try:
        profile = load_profile(path, complete=False)  # one from before a field was added too
    except WorkloadError:
        return False
    meta = profile.meta
    return meta.get("origin") == "calibrated" and bool(meta.get("calibrated_at"))


def write_profile(path: str | Path, cost: CostModel, meta: dict[str, Any], notes: dict) -> Path:
    """Write a profile atomically; ``notes`` (parameter -> text) become end-of-line comments."""
    path = Path(path)
    head = yaml.safe_dump(meta, sort_keys=False, width=96, allow_unicode=True)
    lines = ["cost:"]
    for key, value in cost.model_dump().items():
        comment = f"  # {notes[key]}" if key in notes else ""
        lines.append(f"  {key}: {value!r}{comment}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_durably(path, head + "\n".join(lines) + "\n")
