"""Upper bounds on every number a workload gives, so that a run fits in one machine.

A workload is validated against these on load, before any work, and a value beyond one is
an error naming the bound. They are generous for real use (a 1 M-token context, 100 k
training steps, 65 k devices) and keep a simulation's memory and time, and its clock, finite.
Floats must also be finite (no ``.inf``/``.nan``): every schema forbids them.
"""

from __future__ import annotations

MAX_NAME_CHARS = 128
"""Longest workload, job, tenant, pool or environment name [characters]."""
MAX_JOBS = 10_000
"""Jobs in one workload."""
MAX_STEPS = 100_000
"""Training steps of one job."""
MAX_PROMPTS_PER_STEP = 4_096
"""Prompt groups per training step."""
MAX_GROUP_SIZE = 1_024
"""Samples per prompt."""
MAX_TURNS = 256
"""Generation turns per episode."""
MAX_TOKENS = 1_048_576
"""Any length or token budget of one sequence [tokens] (2^20: a 1 M-token context)."""
MAX_KV_TOKENS = 1_000_000_000_000
"""KV-cache budget of one engine [tokens]."""
MAX_LORA_RANK = 1_024
MAX_STALENESS = 1_000
"""Staleness bound [adapter versions]."""
MAX_TEMPERATURE = 2.0
"""Sampling temperature: vLLM refuses more (as OpenAI's API does), so a job above it was
taken, by a workload or the service, and failed at its first generation."""
MAX_LEARNING_RATE = 10.0
MAX_CLIP_EPS = 1.0
"""PPO clip of the ratio to the step's starting policy, clip(u, 1 - eps, 1 + eps): at 1 its
lower bound is 0."""
MAX_CLIP_EPS_HIGH = 10.0
"""Upper clip of that ratio alone, 1 + eps_high (at 10: an 11-fold rise, no bound in practice)."""
MAX_LR_STALENESS_DAMPING = 100.0
"""Learning-rate damping per version of staleness (at 100 a one-version-stale step moves
1% as far as a fresh one)."""
MAX_WEIGHT = 1_000_000.0
"""A tenant's share weight (relative, > 0)."""
MAX_ARRIVAL_S = 100_000_000.0
"""Latest job arrival [s] (about 3 years)."""
MAX_LATENCY_S = 86_400.0
"""Longest environment latency of one step [s] (a day); a lognormal latency's p99.99 (median x
e^(3.72 sigma)) must be within it, not its median alone: a latency is waited whole."""
MAX_ENV_TIMEOUT_S = 86_400.0
"""Longest bound a real run puts on one environment call, ``reset`` or ``step`` [s] (a day)."""
MAX_DEVICES = 65_536
"""Devices over all pools."""
MAX_ENGINE_SEQS = 65_536
"""Sequences in one engine's batch."""
MAX_ADAPTER_SLOTS = 4_096
MAX_ENV_WORKERS = 1_000_000
MAX_SEED = 2**32 - 1
"""Seeds are 0..2^32-1 (numpy's range)."""
MAX_SIGMA = 5.0
"""Log-space sigma of a lognormal (p99/median = e^(2.33 sigma): 1e5 at the bound)."""
MAX_VALUES = 1_000_000
"""Values of an empirical distribution or rows of a trace."""
MAX_DIST_VALUE = 1_000_000_000.0
"""Any parameter of a distribution (tokens or seconds); the per-use bounds are tighter."""
MAX_GROUP_TURNS = 2_000_000
"""Work the simulator models: sum over jobs of steps x prompts_per_step x turns (each a
generate and an environment event). Measured: paper-32 with 200 steps per job (~0.5 M
group-turns, 1.2 M events) took 4 min on a shared 2-core machine; the bound is about a
quarter of an hour and a few GiB of event log."""
MAX_TIME_SCALE = 1_000_000.0
"""Factor on an arrivals file's submission times."""
MAX_PRICE_PER_DEVICE_HOUR = 1_000_000.0
"""A device's price for one hour [currency units]."""
