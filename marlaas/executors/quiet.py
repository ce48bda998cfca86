"""Keep the libraries' start-up chatter off the terminal of ``marlaas train`` and ``evaluate``.

Without it a run prints about 30 lines before its progress bar: vLLM's INFO and WARNING log
(engine configuration, missing tcmalloc, deprecations), torch's Python and C++ warnings
(Triton, NUMA binding), FutureWarnings from vLLM/transformers/PEFT, and weight-loading
progress bars. ``--verbose`` shows all of it. Call :func:`quiet_libraries` before torch,
transformers or vLLM is imported: they read these settings when they load. A value already
in the environment wins, so ``VLLM_LOGGING_LEVEL=INFO marlaas train ...`` still works.
"""

from __future__ import annotations

import os
import warnings

QUIET_ENV = {
    "VLLM_LOGGING_LEVEL": "ERROR",  # vLLM's own logger (and its weight-loading bar, below)
    "TORCH_LOGS": "-torch",  # torch's Python loggers at ERROR ("Triton not available")
    "TORCH_CPP_LOG_LEVEL": "ERROR",  # c10 warnings ("NUMA binding ...")
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bars too
}
ALWAYS_ENV = {
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",  # logs never mix into the printed results
}
NOISY_MODULES = r"(vllm|torch|transformers|peft|huggingface_hub|accelerate)(\.|$)"
"""Modules whose FutureWarnings and DeprecationWarnings concern their own internals."""


def quiet_libraries(verbose: bool = False) -> None:
    """Set the environment and warning filters that quiet vLLM, torch and transformers
    (``verbose``: only route vLLM's log to stderr)."""
    settings = ALWAYS_ENV if verbose else {**ALWAYS_ENV, **QUIET_ENV}
    for key, value in settings.items():
        os.environ.setdefault(key, value)
    if verbose:
        return
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=NOISY_MODULES)


def library_progress_bars() -> bool:
    """Whether vLLM should draw its own weight-loading bar: when its log shows INFO."""
    return os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper() in ("DEBUG", "INFO")
