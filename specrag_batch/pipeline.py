"""The entry points the shard code calls: validated rows in, output rows out.

The stages and the :class:`~specrag_batch.stages.Pipeline` that runs them live in
:mod:`specrag_batch.stages` (see its docstring and ARCHITECTURE.md). Every input row yields
exactly one output row: answered, or carrying an ``error`` that names the row and the field.
The functions below the entry points keep the older per-stage API (results keyed by position
in ``rows``) for the drafter-training data step and the tests that call one stage.
"""

from __future__ import annotations

from typing import Sequence

from .config import RunConfig
from .records import Document, Draft, QueryRow, Selection
from .stages import (SPLIT_AT, STAGES, EngineLike, MultiPerspectiveSampling, Pipeline,
                     Retrieval, RunInfo, StageTimer, Verification, build_pipeline, output_record,
                     output_row, speculative_stages, standard_stages)
from .stages import Selection as SelectionStage
from .stages.retrieval import prepare_documents as _prepare_documents

__all__ = ["STAGES", "EngineLike", "RunInfo", "StageTimer", "draft_stage", "output_row",
           "process_rows", "verify_stage", "_prepare_documents"]


def process_rows(rows: Sequence[QueryRow], cfg: RunConfig, *, drafter: EngineLike | None,
                 verifier: EngineLike, info: RunInfo, timer: StageTimer | None = None) -> list[dict]:
    """Run the configured mode over rows, in chunks of ``cfg.chunk_rows``; one record per row,
    in input order. Row errors from validation pass straight through.

    Raises:
        ValueError: speculative mode without a drafter engine."""
    build_pipeline(cfg, drafter=drafter, verifier=verifier).run(rows, timer)
    return [output_record(row, cfg, info) for row in rows]


def _halves(cfg: RunConfig, drafter: EngineLike | None, verifier: EngineLike | None) -> tuple[Pipeline, Pipeline]:
    stages = speculative_stages(cfg, drafter=drafter, verifier=verifier)
    return Pipeline(stages, chunk_rows=cfg.chunk_rows).split(SPLIT_AT)


def draft_stage(rows: Sequence[QueryRow], cfg: RunConfig, *, drafter: EngineLike,
                timer: StageTimer | None = None) -> dict[int, list[Draft]]:
    """Disaggregated runs, drafter side: the stages before verification over a shard's rows
    in chunks of ``cfg.chunk_rows`` (the same chunks as :func:`process_rows`). Returns position
    in ``rows`` -> drafts; failing rows get an ``error``. Speculative mode only.

    Raises:
        ValueError: ``cfg.mode`` is not ``speculative``."""
    if cfg.mode != "speculative":
        raise ValueError("disaggregated drafting needs mode 'speculative'")
    _halves(cfg, drafter, None)[0].run(rows, timer)
    return {i: row.drafts for i, row in enumerate(rows) if row.error is None and row.drafts is not None}


def verify_stage(rows: Sequence[QueryRow], drafts: dict[int, list[Draft]], cfg: RunConfig, *,
                 verifier: EngineLike, info: RunInfo, timer: StageTimer | None = None,
                 drafter: EngineLike | None = None) -> list[dict]:
    """Disaggregated runs, verifier side: verification and selection (and the fallback pass,
    ``selection.fallback``) over drafts read back from the intermediate draft Parquet
    (position in ``rows`` -> drafts), chunked as in :func:`process_rows`; one output record
    per row, in input order (rows with an ``error`` pass through). The fallback reads the
    rows' input ``documents`` (the draft Parquet has none) and, for ``wider``, ``drafter``.

    Raises:
        ValueError: a row needs the fallback and its engine was not given."""
    for i, row in enumerate(rows):
        if i in drafts and row.error is None:
            row.drafts = drafts[i]
    _halves(cfg, drafter, verifier)[1].run(rows, timer)
    return [output_record(row, cfg, info) for row in rows]


# --- the per-stage API (results keyed by position in ``rows``), over the same stages ---

def retrieve(rows: Sequence[QueryRow], cfg: RunConfig) -> dict[int, list[Document]]:
    """Stage 1 (:class:`~specrag_batch.stages.Retrieval`). Position in ``rows`` -> its top-N
    documents; rows left with none get an error."""
    Retrieval(cfg)(rows)
    return {i: row.top_documents for i, row in enumerate(rows) if row.error is None}


def multi_perspective_subsets(rows: Sequence[QueryRow], docs: dict[int, list[Document]],
                              cfg: RunConfig) -> dict[int, list[tuple[int, ...]]]:
    """Stage 2, multi-perspective sampling (paper §3.2;
    :class:`~specrag_batch.stages.MultiPerspectiveSampling`) over the rows in ``docs``
    (position -> top-N documents). Returns position -> at most m subsets, each a sorted tuple
    of indices into that row's top-N documents."""
    for i, documents in docs.items():
        rows[i].top_documents = documents
    MultiPerspectiveSampling(cfg)([rows[i] for i in docs])
    return {i: rows[i].subsets for i in docs if rows[i].error is None}


def draft_rows(rows: Sequence[QueryRow], cfg: RunConfig, drafter: EngineLike,
               timer: StageTimer) -> dict[int, list[Draft]]:
    """Stages 1-3 for one chunk; position in ``rows`` -> drafts (see :func:`draft_stage`)."""
    return draft_stage(rows, cfg.model_copy(update={"chunk_rows": max(1, len(rows))}),
                       drafter=drafter, timer=timer)


def _results(rows: Sequence[QueryRow]) -> dict[int, tuple[list[Draft], Selection]]:
    return {i: (row.drafts, row.selection) for i, row in enumerate(rows)
            if row.error is None and row.selection is not None}


def verify_and_select(rows: Sequence[QueryRow], by_row: dict[int, list[Draft]], cfg: RunConfig,
                      verifier: EngineLike | None,
                      timer: StageTimer) -> dict[int, tuple[list[Draft], Selection]]:
    """Stages 4-5 for one chunk (verification and selection, paper §3.3); position ->
    (drafts, selection) for rows without error."""
    for i, row_drafts in by_row.items():
        rows[i].drafts = row_drafts
    Pipeline([Verification(cfg, verifier=verifier), SelectionStage(cfg)], chunk_rows=max(1, len(rows)),
             given=("row_index", "query_id", "query", "task", "choices", "drafts")).run(rows, timer)
    return _results(rows)


def run_speculative(rows: Sequence[QueryRow], cfg: RunConfig, drafter: EngineLike,
                    verifier: EngineLike | None, timer: StageTimer) -> dict[int, tuple[list[Draft], Selection]]:
    """Stages 1-5 for one chunk. Returns position -> (drafts, selection) for rows without error."""
    stages = speculative_stages(cfg, drafter=drafter, verifier=verifier)
    Pipeline(stages, chunk_rows=max(1, len(rows))).run(rows, timer)
    return _results(rows)


def run_standard(rows: Sequence[QueryRow], cfg: RunConfig, generator: EngineLike,
                 timer: StageTimer) -> dict[int, tuple[list[Draft], Selection]]:
    """Standard RAG for one chunk: retrieval, then one generation per row over all N documents."""
    Pipeline(standard_stages(cfg, generator=generator), chunk_rows=max(1, len(rows))).run(rows, timer)
    return _results(rows)
