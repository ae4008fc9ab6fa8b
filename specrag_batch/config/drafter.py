"""The ``drafter`` section (:class:`DrafterConfig`): the drafter's model, prompt layout, rationale
instruction and answers of drafts cut at their token budget (paper §3.2)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from .model import ANSWER_MARKER_ROOM, DEFAULT_DRAFTER, MIN_PROMPT_ROOM, ModelConfig


class DrafterConfig(ModelConfig):
    """The drafter's model (:class:`ModelConfig`; default the packaged Qwen2.5-Coder-0.5B, so a
    ``drafter:`` section that sets only other keys keeps it), its prompt layout and rationale
    instruction, and whether drafts cut at the token budget before their answer line get one
    (``answer_on_truncation``)."""

    hash_added: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("prompt_layout", "documents_first"), ("rationale_style", "one_or_two_sentences"),
        ("answer_on_truncation", False), ("answer_max_tokens", 16), ("adapter", None))
    hash_switched: ClassVar[tuple[tuple[str, str], ...]] = (("answer_max_tokens", "answer_on_truncation"),)

    model: str = Field(DEFAULT_DRAFTER, min_length=1, description=ModelConfig.model_fields["model"].description)

    prompt_layout: Literal["documents_first", "question_first"] = Field(
        "documents_first", description="order of the drafter prompt's user turn: "
        "documents_first = documents, question, reply format (the order used so far); "
        "question_first = question and reply format, then the documents, so the m prompts of "
        "one row share system prompt, instructions and question as a token prefix that vLLM's "
        "prefix cache computes once per call (in whole KV blocks: 128 tokens on CPU, 16 on "
        "GPU). Also used by the drafter-training data step; Standard RAG keeps documents_first")
    rationale_style: Literal["one_or_two_sentences", "one_sentence"] = Field(
        "one_or_two_sentences", description="rationale instruction of the drafter's system "
        "prompt: one_or_two_sentences = 'a short rationale (one or two sentences)' (the "
        "instruction used so far); one_sentence = 'a rationale of one sentence' (shorter drafts, "
        "fewer drafter tokens; docs/results.md, \"Settings measured and kept\"). Also used by the "
        "drafter-training data step; Standard RAG keeps one_or_two_sentences")
    answer_on_truncation: bool = Field(
        False, description="recover drafts cut at max_tokens before their answer line: a "
        "draft that stopped at the budget (finish reason 'length') with no 'Answer:' line is "
        "given the text '\\nAnswer:' and continued for at most answer_max_tokens tokens, in one "
        "more batched call over those drafts only; the draft keeps its truncated rationale β, "
        "gets the continuation as α (flags truncated_at_max_tokens and answer_forced) and "
        "log ρ_draft sums the sampled log-probs of β and α (the forced tokens were not sampled "
        "and count in neither). An engineering recovery of a budget cut, not in the paper "
        "(§3.2 drafts (α, β) without a budget). The drafter prompt's room shrinks by the "
        "marker and answer_max_tokens, so prompt + draft + marker + answer fit max_model_len. "
        "Off by default (docs/decisions/004-answer-on-truncation-off.md); off, a config hashes as "
        "before the field existed (:data:`ADDED_FIELDS`)")
    answer_max_tokens: int = Field(
        16, ge=1, description="generation budget, tokens, of the answer written after a forced "
        "'\\nAnswer:' (answer_on_truncation); the answer is the continuation up to its first "
        "line break")
    adapter: str | None = Field(
        None, min_length=1, description="a LoRA adapter directory (PEFT: adapter_config.json and "
        "adapter_model.safetensors), such as the adapter/ directory `specrag-batch drafter train` "
        "writes, trained on `model`: vLLM serves `model` with the adapter applied unmerged "
        "(enable_lora, one LoRARequest per drafter call), so the update is kept whatever dtype "
        "the engine computes in (merged into bf16 weights it was partly rounded away, issue 40). "
        "None (default): `model` alone; a config without it hashes as before the key existed")

    @model_validator(mode="after")
    def _prompt_room(self) -> "DrafterConfig":
        """Leave at least :data:`MIN_PROMPT_ROOM` tokens of ``max_model_len`` for the drafter
        prompt after the draft's ``max_tokens`` and, with ``answer_on_truncation``, the forced
        marker (at most :data:`ANSWER_MARKER_ROOM` tokens) and ``answer_max_tokens``
        (``drafting.max_prompt_tokens``): checked here, not first as a ``PromptTooLongError``
        on every row of every shard after the engines have loaded.

        Raises:
            ValueError: too little room, naming the fields and their values."""
        used = self.max_tokens + (ANSWER_MARKER_ROOM + self.answer_max_tokens if self.answer_on_truncation else 0)
        if self.max_model_len - used < MIN_PROMPT_ROOM:
            parts = f"max_tokens {self.max_tokens}"
            if self.answer_on_truncation:
                parts += (f" + up to {ANSWER_MARKER_ROOM} tokens of the forced answer marker + "
                          f"answer_max_tokens {self.answer_max_tokens} (answer_on_truncation is on)")
            raise ValueError(f"{parts} leave {self.max_model_len - used} of max_model_len {self.max_model_len} "
                             f"tokens for the drafter prompt; it needs at least {MIN_PROMPT_ROOM}: raise "
                             "max_model_len or lower the budgets")
        return self

    @property
    def answer_budget(self) -> int | None:
        """``answer_max_tokens`` when ``answer_on_truncation`` is on, else None (no recovery):
        the ``answer_max_tokens`` argument of :func:`specrag_batch.stages.drafting.run_drafts`."""
        return self.answer_max_tokens if self.answer_on_truncation else None
