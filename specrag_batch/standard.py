"""Standard RAG baseline (paper §4, "Standard RAG"): the verifier-sized model answers from all
N documents in one prompt. It reuses the drafter prompt and parser so the two modes produce the
same output schema and compare row by row; its ``score_draft`` is the generating model's own
log P(β, α | Q, all documents)."""

from __future__ import annotations

from typing import Sequence

from .drafting import DraftRequest, fitted_prompt
from .records import Document


def standard_request(tokenizer, row: int, task: str, query: str, docs: Sequence[Document],
                     choices, labels, doc_budget: int, max_prompt_tokens: int) -> tuple[DraftRequest, bool]:
    """One request holding every document of the row (truncated to fit the context).

    Returns (request, truncated?). Raises :class:`drafting.PromptTooLongError`."""
    ids, cut = fitted_prompt(tokenizer, task, query, docs, choices, labels, doc_budget, max_prompt_tokens)
    return DraftRequest(row, task, [d.doc_id for d in docs], ids, choices), cut
