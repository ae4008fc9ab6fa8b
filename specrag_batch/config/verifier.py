"""The ``verifier`` section (:class:`VerifierConfig`): the verifier's model and how its forward
passes are spent (paper §3.3)."""

from __future__ import annotations

from typing import Any, ClassVar



from pydantic import Field

from .model import DEFAULT_VERIFIER, ModelConfig


class VerifierConfig(ModelConfig):
    """The verifier's model (:class:`ModelConfig`; default the packaged Qwen2.5-Coder-1.5B, so a
    ``verifier:`` section that sets only other keys keeps it) and how its forward passes are
    spent."""

    hash_added: ClassVar[tuple[tuple[str, Any], ...]] = (("deduplicate_drafts", False), ("evidence_aware", False))

    model: str = Field(DEFAULT_VERIFIER, min_length=1, description=ModelConfig.model_fields["model"].description)

    deduplicate_drafts: bool = Field(
        True, description="score each distinct verifier input of a row once: drafts of one "
        "row whose verifier input has the same tokens ([Q, α, β, R]; with evidence_aware also "
        "their documents, so only drafts of the same subset can match) share one forward pass "
        "and get copies of its scores (log ρ_SC, log ρ_SR, log P(Yes)/P(No), token counts, "
        "verifier flags): the scores a pass of their own would give, up to the engine's "
        "batch-dependent low digits (docs/operations.md, \"Determinism\"). This product's "
        "optimisation, not the paper's; output column ``verifier_drafts_deduplicated`` counts "
        "the passes saved. On by default (docs/decisions/003-verifier-deduplicate-drafts.md). A "
        "run that sets it false hashes as runs made before the field existed (:data:`ADDED_FIELDS`)")
    evidence_aware: bool = Field(
        False, description="the paper's variant that adds the draft's documents to its rationale, Score(α|Q,β,δ): each draft is scored in one "
        "pass over [Q, δ_j, α_j, β_j, R], δ_j its own subset's k documents (each cut to "
        "retrieval.max_doc_tokens verifier tokens, shorter to fit max_model_len: draft flag "
        "verifier_documents_truncated); log ρ_SC and log ρ_SR come from that pass. Off (default): "
        "[Q, α, β, R] (§3.3), and a config hashes as before the field existed")
