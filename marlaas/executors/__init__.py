"""Real executors: generation backends (vLLM, HF+PEFT), the PEFT trainer, adapter storage.

Heavy dependencies (torch, transformers, peft, vllm) are imported by the modules that need
them, so `marlaas.executors.rollout` and `adapter_store` import without them.

Importing the package asks Intel MKL (torch's BLAS on x86) for its strict conditional
numerical reproducibility, ``MKL_CBWR=AUTO,STRICT``, unless the environment sets it: MKL
reads it at its first call. Without it a matrix product with a long inner dimension (the
trainer's gradient through SmolLM2's 49,152-token output layer) is summed differently on one
thread and on two, and with the memory's alignment; with it a training step is the same bit
for bit on one thread or two (a trainer beside generation gets one, alone two:
:mod:`marlaas.executors.thread_split`), which a bfloat16 engine needs to sample the same
tokens from the adapter it is given (tests/executors/test_trainer_threads.py). A SmolLM2 step
of 16 samples took 1.45-1.49 s with it and without (2026-12-05).
"""

import os as _os

_os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
