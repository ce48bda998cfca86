"""Real executors: generation backends (vLLM, HF+PEFT), the PEFT trainer, adapter storage.

Heavy dependencies (torch, transformers, peft, vllm) are imported by the modules that need
them, so `marlaas.executors.rollout` and `adapter_store` import without them.
"""
