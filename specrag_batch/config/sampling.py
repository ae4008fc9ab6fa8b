"""The ``sampling`` section (:class:`SamplingConfig`): multi-perspective sampling (paper §3.2)."""

from __future__ import annotations

import string
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from .base import Section


class SamplingConfig(Section):
    """Stage 2: multi-perspective sampling (paper §3.2)."""

    hash_added: ClassVar[tuple[tuple[str, Any], ...]] = (("adaptive", False), ("first_round", 2))

    strategy: Literal["cluster", "cluster_cover", "random", "single_cluster"] = Field(
        "cluster", description="cluster = paper (one document per cluster, drawn uniformly for "
        "every subset); cluster_cover = the same, each cluster's documents dealt out without "
        "replacement across the m subsets, so every document is drafted from when m >= the "
        "largest cluster; random and single_cluster are the ablations of paper Table 3")
    num_drafts: int = Field(5, ge=1, description="m: number of document subsets (drafts)")
    num_clusters: int = Field(2, ge=1, description="k: clusters = documents per subset")
    query_instruction: str = Field(
        "{query}\n{document}",
        description="text embedded for a query-conditioned document embedding; "
        "placeholders {query} and {document}")
    kmeans_n_init: int = Field(10, ge=1)
    adaptive: bool | None = Field(
        None, description="adaptive drafting: draft ``first_round`` subsets of every row "
        "first; a row whose drafts meet the consensus rule (``selection.consensus_min``) stops "
        "there and takes the consensus fast path, the others get the remaining subsets "
        "(the same m subsets a non-adaptive run drafts). This product's optimisation, not the "
        "paper's (§3.2 drafts all m subsets). Left out (null), it is on only where it saves verifier "
        "passes (``RunConfig.adaptive_drafting`` resolves it): the consensus fast path on and the verifier scoring drafts "
        "(``selection.use_self_consistency`` or ``use_self_reflection``). Under log ρ = log ρ_draft alone it "
        "saves no verifier pass and its two rounds split the drafter's batch, so there it is "
        "off (docs/decisions/006-adaptive-drafting-with-verifier-terms.md, docs/decisions/009-one-drafting-round.md). Set true with the fast path off, it is "
        "an error. Off, a config hashes as before the field existed (:data:`ADDED_FIELDS`)")
    first_round: int = Field(
        2, ge=2, description="drafts of the first adaptive round (``adaptive``); at least 2, "
        "one draft is never a consensus; a row with fewer subsets drafts them all at once")

    @field_validator("query_instruction")
    @classmethod
    def _instruction(cls, v: str) -> str:
        """A format string with ``{document}`` and optionally ``{query}``, nothing else: checked
        here, not first in the sampling stage after the engines have loaded.

        Raises:
            ValueError: another placeholder, no ``{document}``, or a malformed format string."""
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(v) if name is not None}
        except ValueError as e:
            raise ValueError(f"not a valid format string ({e}); "
                             "write a literal brace as {{ or }}") from None
        if names - {"query", "document"}:
            raise ValueError(f"unknown placeholder(s) {sorted(names - {'query', 'document'})}; "
                             "allowed: {query}, {document}")
        if "document" not in names:
            raise ValueError("needs {document} (the passage embedded with the query)")
        return v
