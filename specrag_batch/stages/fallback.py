"""Stage 6 (optional), the fallback pass (``selection.fallback``): rows that selection flags
``low_confidence`` are answered a second time within the same chunk of the same shard, by a
second stage list run over copies of those rows (:func:`specrag_batch.run.pipeline.fallback_stages`):
Standard RAG from all N documents (paper §4), or Speculative RAG again over N' documents from
the index. The paper (§3.3) leaves the use of a low score open; this is one."""

from __future__ import annotations

from typing import Callable, Sequence

from ..config import RunConfig
from ..core.records import FallbackAnswer, QueryRow
from .base import Stage


def flagged(row: QueryRow) -> bool:
    """Whether the fallback pass answers ``row`` again: no error and selection flagged it
    low-confidence (below τ_min, or no valid or fully scored draft)."""
    return row.error is None and row.selection is not None and row.selection.low_confidence


class Fallback(Stage):
    """Copies of the flagged rows (:func:`flagged`; input fields and ``documents`` only) go
    through the fallback's stages in one chunk, one batched engine call per stage: with
    ``selection.fallback: standard`` Retrieval -> StandardAnswer -> Selection(standard=True)
    on the verifier engine, with ``wider`` WiderRetrieval (N' = ``retrieval.fallback_top_n``)
    -> MultiPerspectiveSampling -> Drafting -> Verification -> Selection. Each flagged row gets
    ``fallback`` (:class:`~specrag_batch.core.records.FallbackAnswer`); the output uses its answer
    (:func:`~specrag_batch.run.output.output_record`). The inner stages' seconds count as
    this stage's (timer ``fallback``).

    Args:
        config: the run's config (``selection.fallback`` names the source).
        answer_again: runs the fallback's stage list over a list of row copies in place
            (built by :func:`specrag_batch.run.pipeline.speculative_stages`); it raises
            ``ValueError`` when the engine the fallback needs was not given."""

    name = timer_name = "fallback"
    reads = ("query_id", "query", "task", "choices", "documents", "selection")
    writes = ("fallback",)

    def __init__(self, config: RunConfig, *, answer_again: Callable[[list[QueryRow]], None]):
        self.config, self.answer_again = config, answer_again
        self.source = f"fallback_{config.selection.fallback}"

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        rows = [row for row in rows if flagged(row)]
        if not rows:
            return
        copies = [QueryRow(row_index=row.row_index, query_id=row.query_id, query=row.query,
                           task=row.task, choices=row.choices,
                           documents=list(row.documents) if row.documents is not None else None)
                  for row in rows]
        self.answer_again(copies)
        for row, again in zip(rows, copies):
            row.fallback = FallbackAnswer(self.source, again)
