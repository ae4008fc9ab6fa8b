"""The language-model engines and what they run: offline batched vLLM (:mod:`.engine`), an engine
started on first use (:mod:`.lazy`), token and time accounting (:mod:`.usage`), model
resolution and conversion of packaged GGUF models (:mod:`.models`), the weights a run used
(:mod:`.weights`), LoRA adapter checks (:mod:`.lora`), the sentence encoder (:mod:`.embeddings`)
and pinned chat templates (``chat_templates/``).

The names of :mod:`.engine` are re-exported here (``from specrag_batch.engines import Engine``
worked before the engine moved into its own module and still does)."""

from .engine import (NON_FINITE_FLOOR, Engine, GenerationResult, check_cpu_env, clean_logprob,
                     close_engines, configure_cpu_env, cpu_dtype, dtype_name, engine_dtype, get_engine,
                     loaded_engines, usage_now, used_dtypes)

__all__ = ["NON_FINITE_FLOOR", "Engine", "GenerationResult", "check_cpu_env", "clean_logprob",
           "close_engines", "configure_cpu_env", "cpu_dtype", "dtype_name", "engine_dtype", "get_engine",
           "loaded_engines", "usage_now", "used_dtypes"]
