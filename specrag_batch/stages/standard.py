"""Standard RAG's answer (paper §4), the baseline a ``standard`` mode runs: one generation per row
over all N documents by the verifier-sized model, with the drafter's prompt and parser."""

from __future__ import annotations

from typing import Iterator

from ..config import RunConfig
from ..core.records import QueryRow
from .base import EngineLike
from .drafting import GenerationStage, Prompt


class StandardAnswer(GenerationStage):
    """Standard RAG (paper §4): the verifier-sized model answers once per row from all N
    documents, with the drafter's prompt and parser (one draft per row). Its prompt keeps the
    ``documents_first`` layout and the ``one_or_two_sentences`` rationale instruction
    whatever ``drafter.prompt_layout`` and ``drafter.rationale_style`` say, and recovers no
    answer after a budget cut (``drafter.answer_on_truncation``): one prompt per row shares
    nothing a layout could add, and the baseline stays fixed."""

    name = "standard_answer"
    timer_name = "drafting"
    reads = ("task", "query", "choices", "top_documents")
    desc = "standard RAG"

    def __init__(self, config: RunConfig, *, generator: EngineLike):
        super().__init__(config, generator, config.verifier)

    def prompts(self, row: QueryRow) -> Iterator[Prompt]:
        """The one prompt of ``row``: all its ``top_documents`` (N), cut to fit the verifier's
        ``max_model_len - max_tokens`` tokens."""
        yield self._fitted(row, row.top_documents)
