"""Adapter versions on disk: `root/<job>/v<version>/`, each written atomically (torch-free)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from marlaas.atomic import atomic_dir

_VERSION_DIR = re.compile(r"v(\d+)")
OPTIMIZER_FILE = "optimizer.pt"
"""A job's optimizer state, saved beside its adapter so that training continues exactly."""
META_FILE = "marlaas_adapter.json"
"""What marlaas records of a version: job, version, rank, alpha and the weights' SHA-256
(PeftTrainer writes it)."""
WEIGHTS_SHA256 = "weights_sha256"
"""The key of :data:`META_FILE` that records the SHA-256 (64 hex digits) of
:data:`WEIGHTS_FILE` as it was written; checked wherever the weights are checked or loaded.
A version saved before it was recorded has none, and its weights are checked as before
(header and length only)."""
OPTIMIZER_SHA256 = "optimizer_sha256"
"""The key of :data:`META_FILE` that records the SHA-256 of :data:`OPTIMIZER_FILE` as it was
written (a version saved with its optimizer state); checked wherever the state is checked or
loaded. torch.load reads a byte changed in a tensor's data without a word, and a whole
archive put in its place (another version's state) passes the archive's own checksums. A
version saved before it was recorded has none, and its state is checked as before (the
archive's checksums only)."""
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
MAX_META_BYTES = 1024 * 1024
MAX_HEADER_BYTES = 100 * 1024 * 1024
"""The largest header a safetensors file may have (the library's own limit)."""
_CHUNK_BYTES = 1024 * 1024
"""How much of a weights file is hashed at a time."""
_SHA256 = re.compile(r"[0-9a-f]{64}")


class AdapterError(ValueError):
    """An adapter version folder that is damaged, or not the workload's (another job, rank)."""


class AdapterStore:
    """Every published adapter version of every job, as folders vLLM and PEFT load.

    A version folder appears complete or not at all (written under a temporary name, then
    renamed), so `latest(job)` after a crash gives the last fully written version to resume from.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, job: str, version: int) -> Path:
        """Folder of (job, version), whether or not it exists."""
        if version < 0:
            raise ValueError(f"version must be >= 0, got {version}")
        return self.root / job / f"v{version}"

    def save(
        self, job: str, version: int, write: Callable[[Path], object], *, overwrite: bool = False
    ) -> Path:
        """Call `write(tmp_dir)` to fill a temporary folder, then rename it: path(job, version)."""
        final = self.path(job, version)
        with atomic_dir(final, overwrite=overwrite) as tmp:
            write(tmp)
        return final

    def save_from(self, trainer, job: str, *, overwrite: bool = False) -> Path:
        """Save `trainer`'s current adapter of `job` (a PeftTrainer) as its current version."""
        version = trainer.version(job)
        return trainer.save_adapter(job, version, self.path(job, version), overwrite=overwrite)

    def versions(self, job: str) -> list[int]:
        """Complete versions of `job`, ascending (temporary folders are ignored)."""
        folder = self.root / job
        if not folder.is_dir():
            return []
        found = (_VERSION_DIR.fullmatch(p.name) for p in folder.iterdir() if p.is_dir())
        return sorted(int(m.group(1)) for m in found if m)

    def latest(self, job: str) -> int | None:
        """Newest complete version of `job`, or None when it has none."""
        versions = self.versions(job)
        return versions[-1] if versions else None

    def check(self, job: str, version: int, rank: int) -> Path:
        """The folder of (job, version) when it is loadable as that job's adapter of LoRA rank
        ``rank``: its config and weights present, marlaas's record of it naming this job,
        version and rank, its weights whole (and, where the record has their SHA-256, the
        bytes written); else an AdapterError naming the file and the field."""
        folder = self.path(job, version)
        for name in (CONFIG_FILE, WEIGHTS_FILE, META_FILE):
            if not (folder / name).is_file():
                raise AdapterError(f"{folder}: no {name}; not an adapter marlaas saved")
        meta = _json_object(folder / META_FILE)
        config = _json_object(folder / CONFIG_FILE)
        expected = {"job": job, "version": version, "rank": rank}
        for key, want in expected.items():
            if meta.get(key) != want:
                found = meta.get(key)
                raise AdapterError(f"{folder / META_FILE}: {key}: {found!r}, but the "
                                   f"workload's is {want!r} (this run's workload?)")  # fmt: skip
        if config.get("r") != rank:
            raise AdapterError(f"{folder / CONFIG_FILE}: r: {config.get('r')!r}, but the job's "
                               f"lora_rank is {rank}")  # fmt: skip
        _check_safetensors(folder / WEIGHTS_FILE, recorded_digest(meta, folder / META_FILE))
        return folder

    def has_optimizer(self, job: str, version: int) -> bool:
        """Whether (job, version) was saved with its optimizer state."""
        return (self.path(job, version) / OPTIMIZER_FILE).is_file()

    def check_optimizer(self, job: str, version: int) -> Path:
        """The optimizer state file of (job, version) when it is whole (torch.save's zip
        archive, every member's checksum right) and, where marlaas's record of the version
        holds its SHA-256 (:data:`OPTIMIZER_SHA256`), the bytes written; else an
        AdapterError naming it."""
        path = self.path(job, version) / OPTIMIZER_FILE
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
        except Exception as err:  # BadZipFile, OSError, zlib.error, NotImplementedError...
            raise AdapterError(f"{path}: damaged, not a saved optimizer state "
                               f"({type(err).__name__}: {err})") from None  # fmt: skip
        if bad is not None:
            raise AdapterError(f"{path}: damaged ({bad} fails its checksum)")
        meta_path = path.parent / META_FILE
        if meta_path.is_file():  # a whole archive, but another (another version's state)?
            recorded = recorded_digest(_json_object(meta_path), meta_path, OPTIMIZER_SHA256)
            if recorded is not None:
                _check_digest(path, recorded)
        return path

    def latest_path(self, job: str) -> Path | None:
        """Folder of the newest complete version (what a resumed job loads), or None."""
        latest = self.latest(job)
        return None if latest is None else self.path(job, latest)

    def jobs(self) -> list[str]:
        """Jobs with at least one complete version."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and self.versions(p.name))

    def prune(self, job: str, keep_last: int) -> list[int]:
        """Delete all but the newest `keep_last` versions of `job`; return the deleted ones."""
        doomed = self.versions(job)[:-keep_last] if keep_last > 0 else self.versions(job)
        for version in doomed:
            shutil.rmtree(self.path(job, version))
        return doomed

    def clean_partial(self, job: str) -> int:
        """Remove temporary folders left by an interrupted save; return how many."""
        folder = self.root / job
        if not folder.is_dir():
            return 0
        partial = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith(".")]
        for p in partial:
            shutil.rmtree(p, ignore_errors=True)
        return len(partial)


def weights_digest(path: Path) -> str:
    """The SHA-256 (hex) of the file ``path`` (what :data:`WEIGHTS_SHA256` and
    :data:`OPTIMIZER_SHA256` record)."""
    with open(path, "rb") as handle:
        return _digest_of_rest(handle, b"")


def recorded_digest(meta: dict, meta_path: Path, key: str = WEIGHTS_SHA256) -> str | None:
    """The SHA-256 that the record ``meta`` (read from ``meta_path``) holds under ``key``
    (the weights', or :data:`OPTIMIZER_SHA256`); None when it holds none (a version saved
    before it was recorded); an AdapterError naming the field when it is no SHA-256."""
    digest = meta.get(key)
    if digest is None:
        return None
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise AdapterError(f"{meta_path}: {key}: {str(digest)[:80]!r} is not a "
                           "SHA-256 (64 lowercase hex digits)")  # fmt: skip
    return digest


def read_optimizer(folder: Path) -> bytes:
    """The bytes of ``folder``'s optimizer state, read once and, where marlaas's record of
    the version holds their SHA-256 (:data:`OPTIMIZER_SHA256`), checked against it; an
    AdapterError naming the file otherwise (what a trainer loads: torch.load takes a changed
    byte in a tensor's data without a word)."""
    meta_path = folder / META_FILE
    recorded = (recorded_digest(_json_object(meta_path), meta_path, OPTIMIZER_SHA256)
                if meta_path.exists() else None)  # fmt: skip
    path = folder / OPTIMIZER_FILE
    try:
        data = path.read_bytes()
    except OSError as err:
        raise AdapterError(f"{path}: not readable ({err.strerror or err})") from None
    if recorded is not None:
        found = hashlib.sha256(data).hexdigest()
        if found != recorded:
            raise _digest_error(path, found, recorded)
    return data


def _check_digest(path: Path, recorded: str) -> None:
    """AdapterError naming ``path`` when its bytes do not hash to ``recorded``."""
    try:
        with open(path, "rb") as handle:
            found = _digest_of_rest(handle, b"")
    except OSError as err:
        raise AdapterError(f"{path}: not readable ({err.strerror or err})") from None
    if found != recorded:
        raise _digest_error(path, found, recorded)


def _digest_error(path: Path, found: str, recorded: str) -> AdapterError:
    """The error of a file ``path`` whose SHA-256 ``found`` is not the ``recorded`` one."""
    return AdapterError(f"{path}: damaged: its SHA-256 is {found}, but {META_FILE} "
                        f"recorded {recorded} when it was written")  # fmt: skip


def read_weights(folder: Path) -> bytes:
    """The bytes of ``folder``'s weights file, read once and checked as :meth:`AdapterStore.
    check` checks them (whole, and the SHA-256 its record holds, when it has a record that
    holds one); an AdapterError naming the file otherwise."""
    meta_path = folder / META_FILE
    recorded = recorded_digest(_json_object(meta_path), meta_path) if meta_path.exists() else None
    path = folder / WEIGHTS_FILE
    try:
        data = path.read_bytes()
    except OSError as err:
        raise AdapterError(f"{path}: not readable ({err.strerror or err})") from None
    _check_weights(path, io.BytesIO(data), len(data), recorded)
    return data


def _check_safetensors(path: Path, recorded: str | None = None) -> None:
    """AdapterError naming ``path`` when it is not a whole safetensors file, or not the one
    whose SHA-256 was ``recorded`` when it was written (see :func:`_check_weights`)."""
    try:
        size = path.stat().st_size
        handle = open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as err:
        raise AdapterError(f"{path}: damaged, not a safetensors file ({err})") from None
    with handle:
        _check_weights(path, handle, size, recorded)


def _check_weights(path: Path, handle: BinaryIO, size: int, recorded: str | None) -> None:
    """AdapterError naming ``path`` (read through ``handle``, ``size`` bytes) when it is not
    a whole safetensors file: its header (an 8-byte length, then JSON) unreadable, or its
    tensors' bytes not ending where the file does (cut short, zeroed, or another file); or,
    given the SHA-256 ``recorded`` when it was written, when its bytes hash to another (a
    flipped bit in the tensors' data). The file is read once: the header, then the rest
    only to hash it."""
    try:
        prefix = handle.read(8)
        length = int.from_bytes(prefix, "little")
        if size < 8 or not 0 < length <= min(size - 8, MAX_HEADER_BYTES):
            raise ValueError(f"a header of {length:,} bytes in a file of {size:,}")
        raw = handle.read(length)
        header = json.loads(raw)
        ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
        digest = None if recorded is None else _digest_of_rest(handle, prefix + raw)
    except (OSError, ValueError, LookupError, TypeError, AttributeError, ArithmeticError,
            RecursionError) as err:  # fmt: skip
        raise AdapterError(f"{path}: damaged, not a safetensors file ({err})") from None
    end = 8 + length + max(ends, default=0)
    if end != size:
        raise AdapterError(f"{path}: damaged: {size:,} bytes, but its tensors end at {end:,}")
    if digest != recorded:
        raise _digest_error(path, digest, recorded)


def _digest_of_rest(handle: BinaryIO, start: bytes) -> str:
    """The SHA-256 (hex) of ``start`` followed by what is left to read of ``handle``."""
    digest = hashlib.sha256(start)
    while chunk := handle.read(_CHUNK_BYTES):
        digest.update(chunk)
    return digest.hexdigest()


def _json_object(path: Path) -> dict:
    """A small JSON object file, or an AdapterError naming it."""
    try:
        if path.stat().st_size > MAX_META_BYTES:
            raise AdapterError(f"{path}: over {MAX_META_BYTES:,} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise AdapterError(
            f"{path}: not a readable JSON file ({' '.join(str(err).split())[:200]})"
        ) from None
    if not isinstance(data, dict):
        raise AdapterError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data
