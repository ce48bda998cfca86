"""``manifest.json``: what every output folder says of itself (its kind, status and files)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from marlaas.atomic import write_durably

MANIFEST_FILE = "manifest.json"
KINDS = ("simulation", "real", "report", "sweep", "replay", "model", "adapter", "plan")
"""The kinds of output folder; a folder is only ever replaced by an output of its own kind."""
NAMES = {"simulation": "simulation run", "real": "real training run", "report": "report",
         "sweep": "sweep", "replay": "replay", "model": "model folder",
         "adapter": "fetched adapter", "plan": "plan"}  # fmt: skip
"""How an error names each kind."""
STATUSES = ("finished", "partial")
MAX_PEEK_BYTES = 1 << 20
"""Most bytes read of a file to tell whose it is."""


def marlaas_version() -> str:
    """The installed marlaas version ("unknown" when running from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("marlaas")
    except PackageNotFoundError:
        return "unknown"


def peek(path: Path) -> str:
    """The first MAX_PEEK_BYTES of a file as text (OSError, ValueError when it is not one)."""
    with open(path, "rb") as handle:
        return handle.read(MAX_PEEK_BYTES).decode("utf-8")


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest, or None when it has none (a damaged or foreign one counts as
    none: it must name a kind of :data:`KINDS`, a status and its files)."""
    try:
        data = json.loads(peek(Path(folder) / MANIFEST_FILE))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        return None
    files = data.get("files")
    if data.get("status", "finished") not in STATUSES or not (
        isinstance(files, list) and all(isinstance(f, str) for f in files)
    ):
        return None
    return data


def write_manifest(folder: Path, kind: str, status: str = "finished", **extra) -> Path:
    """Write ``folder/manifest.json`` atomically and durably (its files: the folder's entries)."""
    folder = Path(folder)
    old = read_manifest(folder) or {}
    files = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    manifest = {
        "kind": kind,
        "status": status,
        "marlaas_version": marlaas_version(),
        "created": old.get("created") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "files": sorted({*files, MANIFEST_FILE}),
        **extra,
    }
    return write_durably(folder / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
