"""Devices, inference engines and trainers, with every capacity rule in one place.

An engine runs on one device and holds running groups (sequences and reserved KV tokens)
and resident adapter versions (at most ``adapter_slots``; the least recently used idle one is
evicted when a slot is needed, and the scheduler tells the executor so). A trainer spans one
or more devices and keeps the adapter and optimizer state of up to ``adapter_slots`` jobs
resident. With colocated placement every device is an engine and the one trainer spans them
all; with shared compute the pools keep their roles on one processor. Either way training and
generation exclude each other (``Cluster.exclusive``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

from marlaas.core.cluster_spec import ClusterSpec, EngineSpec
from marlaas.core.estimates import AloneCluster
from marlaas.core.free_engines import FreeEngines
from marlaas.core.scheduling import Mechanism

AdapterKey = tuple[str, int]
"""(job name, adapter version)."""


@mypyc_attr(native_class=False)
class CapacityError(AssertionError):
    """A capacity rule was broken: a bug in the mechanism, never a user error."""


@dataclass(slots=True)
class Device:
    """One accelerator; ``compute`` counts the generate/train work running on it."""

    name: str
    pool: str
    compute: int = 0


@dataclass
class AdapterDirectory:
    """Which engines hold which adapter versions, and the engines' free room (indexed).

    Kept up to date by the engines, so placing a group looks only at the engines that hold
    its adapter and at the one open engine with the most room, instead of at every engine.
    """

    free: FreeEngines
    """Open engines by free sequences and KV tokens; busy and grown engines."""
    hosts: dict[AdapterKey, set[int]] = field(default_factory=dict)
    """Adapter -> indices of the engines where it is resident (or loading)."""


@dataclass(slots=True)
class Engine:
    """An inference engine on one device (continuous batching, multi-LoRA)."""

    name: str
    device: Device
    spec: EngineSpec
    index: int
    directory: AdapterDirectory
    seqs: int = 0
    tokens: int = 0
    """KV tokens reserved by running groups."""
    resident: OrderedDict[AdapterKey, int] = field(default_factory=OrderedDict)
    """Resident adapter versions -> groups using them (reserved or running); LRU order."""
    loading: set[AdapterKey] = field(default_factory=set)
    unused: int = 0
    """Resident adapters that no group uses (evictable)."""
    versions: dict[str, int] = field(default_factory=dict)
    """Job name -> how many versions of its adapter are resident (or loading) here."""

    def __post_init__(self) -> None:
        self._index()

    def fits(self, seqs: int, tokens: int) -> bool:
        """Whether a group of ``seqs`` sequences reserving ``tokens`` KV tokens fits now."""
        return (
            self.seqs + seqs <= self.spec.max_seqs and self.tokens + tokens <= self.spec.kv_tokens
        )

    @property
    def free_seqs(self) -> int:
        """Sequences that may still be admitted."""
        return self.spec.max_seqs - self.seqs

    @property
    def free_tokens(self) -> int:
        """KV tokens not reserved by running groups."""
        return self.spec.kv_tokens - self.tokens

    def holds(self, job: str) -> bool:
        """Whether some version of job ``job``'s adapter is resident (or loading) here."""
        return job in self.versions

    def can_host(self, adapter: AdapterKey) -> bool:
        """Whether the adapter is resident, or a slot is free or can be freed."""
        if adapter in self.resident:
            return adapter not in self.loading
        return len(self.resident) < self.spec.adapter_slots or self.unused > 0

    def reserve(
        self, seqs: int, tokens: int, adapter: AdapterKey
    ) -> tuple[bool, AdapterKey | None]:
        """Reserve room for a group: (whether the adapter must be loaded first, the idle
        adapter evicted to make a slot for it or None)."""
        if not self.fits(seqs, tokens) or not self.can_host(adapter):
            raise CapacityError(f"{self.name}: no room for {seqs} seqs / {tokens} tokens")
        self.seqs += seqs
        self.tokens += tokens
        resident = self.resident
        users = resident.get(adapter)
        must_load, victim = users is None, None
        if users is None:
            if len(resident) >= self.spec.adapter_slots:
                victim = next(k for k, users in resident.items() if users == 0)
                self._drop(victim)
            resident[adapter] = 1  # added last: the most recently used
            versions = self.versions
            versions[adapter[0]] = versions.get(adapter[0], 0) + 1
            self.directory.hosts.setdefault(adapter, set()).add(self.index)
            self.loading.add(adapter)
        else:
            if users == 0:
                self.unused -= 1
            resident[adapter] = users + 1
            resident.move_to_end(adapter)
        self._index()
        return must_load, victim

    def release(self, seqs: int, tokens: int, adapter: AdapterKey) -> None:
        """Give back a finished group's room."""
        self.seqs -= seqs
        self.tokens -= tokens
        self.resident[adapter] -= 1
        if self.resident[adapter] == 0:
            self.unused += 1
        if self.seqs < 0 or self.tokens < 0 or self.resident[adapter] < 0:
            raise CapacityError(f"{self.name}: released more than reserved")
        self._index()
        self.directory.free.grown.add(self.index)

    def loaded(self, adapter: AdapterKey) -> None:
        """An adapter load ended (its groups may start, or it failed and is dropped next)."""
        self.loading.discard(adapter)
        self._index()
        self.directory.free.grown.add(self.index)

    def evict(self, adapter: AdapterKey) -> None:
        """Drop an unused adapter after its load failed: its slot is free again."""
        self._drop(adapter)
        self._index()
        self.directory.free.grown.add(self.index)

    def _drop(self, adapter: AdapterKey) -> None:
        if self.resident.pop(adapter) == 0:
            self.unused -= 1
        versions = self.versions
        if versions[adapter[0]] == 1:
            del versions[adapter[0]]
        else:
            versions[adapter[0]] -= 1
        hosts = self.directory.hosts[adapter]
        hosts.discard(self.index)
        if not hosts:
            del self.directory.hosts[adapter]

    @property
    def is_open(self) -> bool:
        """Whether any adapter can be loaded here (a free slot, or an idle one to evict)."""
        return len(self.resident) < self.spec.adapter_slots or self.unused > 0

    def _index(self) -> None:
        spec = self.spec
        is_open = len(self.resident) < spec.adapter_slots or self.unused > 0  # is_open, inline
        self.directory.free.update(
            self.index, is_open, spec.max_seqs - self.seqs, spec.kv_tokens - self.tokens,
            bool(self.seqs or self.loading),
        )  # fmt: skip


@dataclass(slots=True)
class Trainer:
    """A trainer over one or more devices; runs one training step (or sync) at a time."""

    name: str
    devices: tuple[Device, ...]
    adapter_slots: int
    activity: str | None = None
    """None when free; else adapter_load, train or weight_sync."""
    resident: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """Jobs whose adapter and optimizer state are on this trainer (or moving here), least
    recently used first."""

    def admit(self, job: str) -> list[str]:
        """Make room for ``job``'s state and mark it resident; returns the jobs whose state
        must leave to make room (least recently used first)."""
        victims = []
        while len(self.resident) >= self.adapter_slots:
            victims.append(self.resident.popitem(last=False)[0])
        self.resident[job] = None
        return victims

    def touch(self, job: str) -> None:
        """Mark ``job``'s resident state as just used."""
        self.resident.move_to_end(job)


@dataclass
class Cluster:
    """All devices, engines and trainers of one run, built from the workload."""

    devices: list[Device]
    engines: list[Engine]
    trainers: list[Trainer]
    colocated: bool
    """Every device both generates and trains (one trainer spans them all)."""
    shared_compute: bool = False
    """Every device is one processor (cluster.shared_compute)."""
    overlap: bool = False
    """On that processor training steps run while engines decode (shared_compute: overlap)."""

    @property
    def exclusive(self) -> bool:
        """Generation and training never run at once: they share devices, or a processor on
        which they take turns."""
        return self.colocated or (self.shared_compute and not self.overlap)

    def engine(self, name: str) -> Engine:
        """An engine by name."""
        return next(e for e in self.engines if e.name == name)

    def trainer(self, name: str) -> Trainer:
        """A trainer by name."""
        return next(t for t in self.trainers if t.name == name)

    def step_devices(self, trainer: Trainer) -> int:
        """The devices a training step of ``trainer`` is divided over, data-parallel: each of
        its devices, or one where every device is one processor (shared_compute). The
        simulator divides a step's compute by it; the real trainer has a replica on each."""
        return 1 if self.shared_compute else len(trainer.devices)

    def alone(self) -> AloneCluster:
        """What one job running alone has of this cluster (its alone-time estimate): every
        engine, and the widest trainer's step devices."""
        widest = max((self.step_devices(t) for t in self.trainers), default=1)
        spec = self.engines[0].spec if self.engines else EngineSpec()
        return AloneCluster(len(self.engines), spec.max_seqs, spec.kv_tokens, widest,
                            self.exclusive)  # fmt: skip

    @classmethod
    def build(cls, spec: ClusterSpec, mechanism: Mechanism) -> Cluster:
        """Lay out devices by placement: pools keep their roles, or all are colocated."""
        engine_spec, slots, shared = spec.engine, spec.trainer.adapter_slots, spec.shared_processor
        if mechanism.placement == "colocated":
            devices = [Device(f"colocated/{i}", "colocated") for i in range(spec.total_devices)]
            trainers = [Trainer("colocated/trainer", tuple(devices), slots)]
            return cls(
                devices, _engines(devices, engine_spec), trainers, True, shared, spec.overlapped
            )
        devices, engine_devices, trainers = [], [], []
        for pool in spec.pools:
            pool_devices = [Device(f"{pool.name}/{i}", pool.name) for i in range(pool.devices)]
            devices += pool_devices
            if pool.role == "inference":
                engine_devices += pool_devices
                continue
            per = pool.devices_per_trainer
            for t in range(0, pool.devices, per):
                group = tuple(pool_devices[t : t + per])
                trainers.append(Trainer(f"{pool.name}/trainer{t // per}", group, slots))
        return cls(
            devices, _engines(engine_devices, engine_spec), trainers, False, shared, spec.overlapped
        )


def _engines(devices: list[Device], spec: EngineSpec) -> list[Engine]:
    directory = AdapterDirectory(FreeEngines(len(devices)))
    return [Engine(d.name, d, spec, i, directory) for i, d in enumerate(devices)]
