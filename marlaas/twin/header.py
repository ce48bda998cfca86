"""A calibrated profile's header: what was calibrated, from which runs, when, on what machine
(written by ``marlaas calibrate``), and the label of the base model it records."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def model_label(workload) -> str:
    """The base model a workload trains, as a profile records it: its name and folder."""
    base_model = workload.base_model
    return f"{base_model.name} ({base_model.path})" if base_model.path else base_model.name


def model_folder(folder: str, origin: Path) -> Path:
    """``folder`` resolved: absolute, or relative to ``origin`` (the folder of the file that
    names it) or to the working folder, where such a folder exists; as written otherwise."""
    path = Path(os.path.normpath(folder))
    for candidate in [path] if path.is_absolute() else [origin / path, Path.cwd() / path]:
        if candidate.is_dir():
            return Path(os.path.realpath(candidate))
    return path


def same_folder(ours: Path, theirs: Path) -> bool:
    """Whether two folders resolved by :func:`model_folder` are one: the same path, or one
    not found (relative, as written) whose path, less its leading ``..``, ends the other's
    (a run read from elsewhere than it was made: ``models/tiny``, or ``../models/tiny`` from
    a workload file in another folder, against ``/home/me/marlaas/models/tiny``)."""
    if ours == theirs:
        return True
    for short, long in ((ours, theirs), (theirs, ours)):
        if short.is_absolute():
            continue
        tail = _named(short)
        if tail and long.parts[-len(tail) :] == tail:
            return True
    return False


def _named(path: Path) -> tuple[str, ...]:
    """``path``'s parts after its leading ``..`` (and ``.``)."""
    parts = list(path.parts)
    while parts and parts[0] in ("..", "."):
        parts.pop(0)
    return tuple(parts)


def same_model(workload, origin: Path, other, other_origin: Path) -> bool:
    """Whether the runs at ``origin`` and ``other_origin`` trained one base model: the same
    name, and folders that are one (:func:`same_folder`; a run that names none: the name
    alone)."""
    ours, theirs = workload.base_model, other.base_model
    if ours.name != theirs.name:
        return False
    if ours.path is None or theirs.path is None:
        return True
    return same_folder(model_folder(str(ours.path), origin),
                       model_folder(str(theirs.path), other_origin))  # fmt: skip


def provenance(calibration, name: str) -> dict[str, Any]:
    """The profile's header of ``calibration`` (a marlaas.twin.calibrate.Calibration): what
    was calibrated, from which runs, when, on what machine."""
    try:
        ours = version("marlaas")
    except PackageNotFoundError:
        ours = "unknown"
    return {
        "name": name,
        "description": f"calibrated from {len(calibration.runs)} real run(s) of "
        f"{', '.join(sorted({str(r['workload']) for r in calibration.runs}))}",
        "origin": "calibrated",
        "model": calibration.model,
        "hardware": hardware(),
        "calibrated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "marlaas_version": ours,
        "sources": {
            "runs": calibration.runs,
            "fit": {f.name: {"rows": f.rows, "quality": f.quality} for f in calibration.fitted},
            "warnings": calibration.warnings,
            "yardstick_s_per_token": calibration.yardstick_s_per_token,
        },
    }


def hardware() -> str:
    """The CPU model and core count (and GPUs, when torch sees any) of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} cores"
    try:
        import torch

        if torch.cuda.is_available():
            text += f", {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return text
