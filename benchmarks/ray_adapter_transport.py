"""How an adapter version gets from a trainer actor to an engine actor: through a folder every
node reads (the adapter store, what ``--ray`` does) or through Ray's object store.

    python benchmarks/ray_adapter_transport.py [--repeats 20]

Two actors on a local Ray cluster. One publish, timed from the driver:

    store          the trainer actor writes the version's folder atomically (marlaas.atomic);
                   the engine actor reads its files (what a PEFT or vLLM load reads)
    object store   the trainer actor reads the folder it saved into bytes and puts them in the
                   object store; the engine actor gets them and writes them to a folder of its
                   own (PEFT and vLLM load adapters from a path), then reads its files

Adapters: the tiny model's rank-8 adapter as PeftTrainer saves it, and one of SmolLM2-135M's
shapes (30 layers; q, k, v, o, gate, up, down; rank 8; fp32: random weights). Prints the
median and the spread [ms] per publish.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

SMOLLM2 = {"layers": 30, "hidden": 576, "kv": 192, "intermediate": 1536}
"""SmolLM2-135M's shapes (config.json: 30 layers, hidden 576, 3 KV heads of 64, MLP 1536)."""


def smollm2_adapter(folder: Path, rank: int = 8) -> Path:
    """A rank-``rank`` LoRA adapter folder of SmolLM2-135M's shapes (random fp32 weights)."""
    import torch
    from safetensors.torch import save_file

    h, kv, mlp = SMOLLM2["hidden"], SMOLLM2["kv"], SMOLLM2["intermediate"]
    shapes = {"self_attn.q_proj": (h, h), "self_attn.k_proj": (h, kv),
              "self_attn.v_proj": (h, kv), "self_attn.o_proj": (h, h),
              "mlp.gate_proj": (h, mlp), "mlp.up_proj": (h, mlp),
              "mlp.down_proj": (mlp, h)}  # fmt: skip
    tensors = {}
    for layer in range(SMOLLM2["layers"]):
        for name, (fan_in, fan_out) in shapes.items():
            key = f"base_model.model.model.layers.{layer}.{name}"
            tensors[f"{key}.lora_A.weight"] = torch.randn(rank, fan_in)
            tensors[f"{key}.lora_B.weight"] = torch.randn(fan_out, rank)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
    return folder


def tiny_adapter(folder: Path) -> Path:
    """The tiny model's rank-8 adapter as PeftTrainer writes a job's first version."""
    from marlaas.executors.models import build_tiny_model
    from marlaas.executors.peft_trainer import PeftTrainer

    model = build_tiny_model(folder.parent / "tiny-model", seed=0)
    PeftTrainer(model).write_initial_adapter("job", 8, 16, 0, folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    import ray

    from marlaas.ray_cluster import ray_session

    @ray.remote(num_cpus=0)
    class Trainer:
        def save(self, source: str, target: str) -> None:
            from marlaas.atomic import atomic_dir

            with atomic_dir(Path(target), overwrite=True) as tmp:
                for f in Path(source).iterdir():
                    (tmp / f.name).write_bytes(f.read_bytes())

        def put(self, source: str) -> list:
            files = {f.name: f.read_bytes() for f in Path(source).iterdir()}
            return [ray.put(files)]

    @ray.remote(num_cpus=0)
    class Engine:
        def load(self, folder: str) -> int:
            return sum(len(f.read_bytes()) for f in Path(folder).iterdir())

        def get(self, refs: list, folder: str) -> int:
            files = ray.get(refs[0])
            target = Path(folder)
            target.mkdir(parents=True, exist_ok=True)
            for name, data in files.items():
                (target / name).write_bytes(data)
            return self.load(folder)

    with tempfile.TemporaryDirectory() as tmp, ray_session(None, num_cpus=2):
        root = Path(tmp)
        adapters = {"tiny rank 8": tiny_adapter(root / "tiny"),
                    "SmolLM2-135M rank 8": smollm2_adapter(root / "smollm2")}  # fmt: skip
        trainer, engine = Trainer.remote(), Engine.remote()
        print(f"uptime: {os.getloadavg()} (1, 5, 15 min load), {args.repeats} publishes each")
        print(f"{'adapter':<22s} {'MB':>6s} {'store ms':>16s} {'object store ms':>18s}")
        for name, folder in adapters.items():
            size = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
            times: dict[str, list[float]] = {"store": [], "object": []}
            for i in range(args.repeats):
                for way in ("store", "object") if i % 2 else ("object", "store"):
                    start = time.perf_counter()
                    if way == "store":
                        target = str(root / "store" / f"v{i}")
                        ray.get(trainer.save.remote(str(folder), target))
                        ray.get(engine.load.remote(target))
                    else:
                        refs = ray.get(trainer.put.remote(str(folder)))
                        ray.get(engine.get.remote(refs, str(root / "engine" / f"v{i}")))
                    times[way].append((time.perf_counter() - start) * 1e3)
            cells = [f"{statistics.median(t):7.1f} ({min(t):.1f}-{max(t):.1f})"
                     for t in times.values()]  # fmt: skip
            print(f"{name:<22s} {size:6.2f} {cells[0]:>16s} {cells[1]:>18s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
