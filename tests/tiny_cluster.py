"""The cluster of the real tests on the tiny model: one engine and one trainer on this
machine's one CPU (shared_compute), as a workload file's or cluster file's YAML head."""

from __future__ import annotations

from pathlib import Path


def tiny_cluster_yaml(name: str, model: Path, adapter_slots: int = 4) -> str:
    """The top of a workload file (name, seed, policy, base model, cluster) on ``model``."""
    return f"""name: {name}
seed: 0
policy: fair
base_model: {{name: tiny-llama, path: {model}}}
cluster:
  pools:
    - {{name: rollout, role: inference, devices: 1}}
    - {{name: train, role: training, devices: 1}}
  engine: {{max_seqs: 64, kv_tokens: 8192, adapter_slots: {adapter_slots}}}
  trainer: {{adapter_slots: {adapter_slots}}}
  shared_compute: true
"""
