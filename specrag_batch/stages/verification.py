"""Stage 4, verification (paper §3.3): the consensus fast path, then the verifier's
self-consistency and self-reflection scores of every remaining valid draft of the chunk in one
batched call (question block only, never the documents)."""

from __future__ import annotations

from typing import Sequence

from ..config import RunConfig
from ..prompts import Question
from ..records import ErrorReason, QueryRow
from ..selection import consensus
from ..verification import verify
from .base import EngineLike, Stage


def question(row: QueryRow, config: RunConfig) -> Question:
    """The question block Q of ``row`` as the verifier sees it."""
    return Question(row.task, row.query, tuple(row.choices) if row.choices is not None else None,
                    tuple(config.claim_labels))


class Verification(Stage):
    """``consensus``: indices of the valid drafts agreeing on one answer when at least c' of
    them do (``consensus_threshold``; [] otherwise); those rows skip the verifier. Other rows'
    valid drafts get ``score_self_consistency`` = log ρ_SC = log P(α, β | Q) and
    ``score_self_reflection`` = log ρ_SR (paper §3.3; nats;
    :func:`specrag_batch.verification.verify`) within ``verifier.max_model_len - 1`` tokens.
    With no verifier, or both verifier terms switched off, only ``consensus`` is set.
    ``verifier.deduplicate_drafts``: a row's drafts with the same verifier input share one
    forward pass; ``verifier_drafts_deduplicated`` counts the passes saved per scored row."""

    name = timer_name = "verification"
    reads = ("task", "query", "choices", "drafts")
    writes = ("consensus", "drafts.score_self_consistency", "drafts.score_self_reflection",
              "drafts.logprob_yes", "drafts.logprob_no", "drafts.tokens_answer", "drafts.tokens_rationale",
              "verifier_drafts_deduplicated")

    def __init__(self, config: RunConfig, *, verifier: EngineLike | None):
        self.config, self.verifier = config, verifier

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        config, selection = self.config, self.config.selection
        active = [row for row in rows if row.error is None and row.drafts is not None]
        for row in active:
            row.consensus = consensus(row.drafts, config.consensus_threshold) or []
        if self.verifier is None or not (selection.use_self_consistency or selection.use_self_reflection):
            return
        items = [(position, question(row, config), draft) for position, row in enumerate(rows)
                 if row.error is None and row.drafts is not None and not row.consensus
                 for draft in row.drafts if draft.valid]
        dedupe, saved = config.verifier.deduplicate_drafts, {}
        errors = verify(self.verifier, items, config.reflection_question,
                        config.verifier.max_model_len - 1, mode=selection.self_reflection,
                        deduplicate=dedupe, saved=saved)
        for position, message in errors.items():
            rows[position].fail("drafts", message, code=ErrorReason.VERIFIER_INPUT_FAILED)
        for position, n in saved.items() if dedupe else ():
            rows[position].verifier_drafts_deduplicated = n
