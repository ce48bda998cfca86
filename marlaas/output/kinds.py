"""What kind of marlaas output a folder is, by its manifest or, for a folder from before
manifests, by its content; and which of its entries its command did not write."""

from __future__ import annotations

import json
import re
from pathlib import Path

from marlaas.output.manifest import MANIFEST_FILE, NAMES, peek, read_manifest

MODEL_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
    }
)
LEGACY_ENTRIES: dict[str, frozenset[str]] = {
    "simulation": frozenset({"events.parquet", "summary.json", "workload.json"}),
    "real": frozenset(
        {
            "adapters",
            "events.parquet",
            "summary.json",
            "workload.json",
            "rewards.csv",
            "rewards.png",
            "eval.json",
            "tensorboard",
            "wandb",
        }
    ),
    "report": frozenset({"report.html", "trace.json", "summary.json", "figures"}),
    "sweep": frozenset({"sweep.csv", "summaries.json", "table.txt", "runs"}),
    "model": MODEL_FILES,
}
"""What each kind of folder held before manifests existed (such folders are still ours when
their content says so, see :func:`folder_kind`)."""
RUN_KINDS = frozenset({"simulation", "real", "replay"})
"""The kinds of output folder that are runs (an event log, a summary, a workload)."""
TEMPORARY = re.compile(r"\.[^/]+\.tmp(\.png|-[^/]+)?")
"""Names of the temporary files marlaas writes beside a file before renaming it into place
(``.summary.json.x1y2.tmp``, ``.rewards.png.x1y2.tmp.png``, a folder's ``.v2.tmp-x1y2``: see
:mod:`marlaas.atomic`)."""
TINY_MODEL = {"model_type": "llama", "vocab_size": 259, "hidden_size": 128,
              "num_hidden_layers": 2}  # fmt: skip
"""config.json values of marlaas's tiny model (``make-tiny-model``): its byte vocabulary is
marlaas's own, so a folder of them from before manifests is recognisably ours."""


def folder_kind(folder: Path) -> tuple[str | None, str]:
    """(kind, status) of an existing output folder; (None, "") when it is not marlaas's."""
    manifest = read_manifest(folder)
    if manifest is not None:
        return manifest["kind"], str(manifest.get("status", "finished"))
    entries = {p.name for p in folder.iterdir() if not p.name.startswith(".")}
    for kind, allowed in LEGACY_ENTRIES.items():
        if entries and entries <= allowed and _legacy_kind(folder, entries) == kind:
            return kind, "finished"
    return None, ""


def other_output(folder: Path) -> str | None:
    """What ``folder`` is when it is a marlaas output other than a run, by its manifest (or,
    before manifests, its content): ``a report``, ``a sweep``, ``a model folder``, ...; None
    for a run folder, a folder that is not marlaas's, or one that cannot be listed."""
    try:
        kind = folder_kind(Path(folder))[0]
    except OSError:
        return None
    return None if kind is None or kind in RUN_KINDS else f"a {NAMES[kind]}"


def foreign_entries(folder: Path) -> list[str]:
    """Entries of an output folder that its command did not write: not in its manifest (or,
    before manifests, not among its kind's files), not one of marlaas's temporary files."""
    manifest = read_manifest(folder)
    if manifest is not None:
        ours = {*manifest["files"], MANIFEST_FILE}
    else:
        kind = folder_kind(folder)[0]
        ours = set(LEGACY_ENTRIES.get(kind or "", ()))
    return sorted(
        p.name for p in folder.iterdir() if p.name not in ours and not TEMPORARY.fullmatch(p.name)
    )


def _json_object(path: Path) -> dict:
    try:
        data = json.loads(peek(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _legacy_kind(folder: Path, entries: set[str]) -> str | None:
    """The kind a folder from before manifests is, by its content (None: not ours)."""
    if "report.html" in entries:
        try:
            head = peek(folder / "report.html")[:4096]
        except (OSError, ValueError):
            return None
        return "report" if "<title>MARLaaS " in head else None
    if "sweep.csv" in entries:
        try:
            header = peek(folder / "sweep.csv").split("\n", 1)[0].split(",")
        except (OSError, ValueError):
            return None
        keys = {"workload", "jobs", "variant", "schedule", "policy", "seed"}
        return "sweep" if "summaries.json" in entries and keys <= set(header) else None
    if "config.json" in entries:
        config = _json_object(folder / "config.json")
        return "model" if all(config.get(k) == v for k, v in TINY_MODEL.items()) else None
    if not {"summary.json", "events.parquet"} <= entries:
        return None
    summary = _json_object(folder / "summary.json")
    kind = summary.get("kind", "simulation")
    if not {"policy", "metrics"} <= set(summary):
        return None
    return kind if kind in ("simulation", "real") else None
