"""Stage 5, selection (paper §3.3): ρ = ρ_draft·ρ_SC·ρ_SR in log space and the argmax (or a
``selection.rule`` extension of this product)."""

from __future__ import annotations

from typing import Sequence

from ..config import RunConfig
from ..records import QueryRow
from ..sampling import row_seed
from ..selection import select
from .base import Stage


class Selection(Stage):
    """Each row's drafts get their log ρ ``score`` (natural log; ρ = ρ_draft·ρ_SC·ρ_SR, paper
    §3.3, over the enabled terms of ``selection.use_*``) and the row its
    :class:`~specrag_batch.records.Selection` (the paper's argmax, or this product's
    ``selection.rule`` extensions: answer vote, length-normalised), flagged low-confidence
    below the row task's ``selection.tau_min`` (:meth:`SelectionConfig.tau_for`;
    :func:`specrag_batch.selection.select`).

    Args:
        config: the run's configuration.
        standard: Standard RAG's one draft per row: log ρ is its draft score alone, no
            consensus, no random selection, no ``selection.rule``.
    """

    name = timer_name = "selection"
    writes = ("drafts.score", "selection")

    def __init__(self, config: RunConfig, *, standard: bool = False):
        self.config, self.standard = config, standard
        self.reads = ("query_id", "task", "drafts") + (() if standard else ("consensus",))

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        config, selection = self.config, self.config.selection
        for row in rows:
            if row.error is not None or row.drafts is None:
                continue
            tau_min = selection.tau_for(row.task)
            if self.standard:
                row.selection = select(row.drafts, use_draft=True, use_sc=False, use_sr=False,
                                       tau_min=tau_min, confidence=selection.confidence)
                continue
            seed = row_seed(config.seed + 1, row.query_id) if selection.random_selection else None
            row.selection = select(row.drafts, use_draft=selection.use_draft_score,
                                   use_sc=selection.use_self_consistency,
                                   use_sr=selection.use_self_reflection, tau_min=tau_min,
                                   fast_path=row.consensus, random_seed=seed,
                                   confidence=selection.confidence, rule=selection.rule)
