"""The Speculative RAG stages and how to run them.

Speculative RAG (paper §3) is the stage list :func:`speculative_stages`::

    Retrieval -> MultiPerspectiveSampling -> Drafting | Verification -> Selection [-> Fallback]

(``sampling.adaptive``: :class:`AdaptiveDrafting` in place of :class:`Drafting`;
``selection.fallback``: :class:`Fallback` re-answers low-confidence rows with
:func:`fallback_stages`.)

Standard RAG (paper §4) is :func:`standard_stages`: ``Retrieval -> StandardAnswer ->
Selection(standard=True)``. Each stage (:class:`~.base.Stage`) declares the
:class:`~specrag_batch.records.QueryRow` fields it ``reads`` and ``writes``; a
:class:`~.base.Pipeline` runs a stage list over rows in chunks of ``chunk_rows`` and checks
those declarations. A disaggregated run is the same list split at ``|``
(:meth:`~.base.Pipeline.split` at ``"verification"``): drafter workers run the first half,
verifier workers the second, on the rows read back from the intermediate draft Parquet.

Build and run a pipeline over rows with given engines (any object with the engine methods
of :class:`~.base.EngineLike`, e.g. :func:`specrag_batch.engines.get_engine` or a fake)::

    from specrag_batch.config import RunConfig
    from specrag_batch.schema import validate_table
    from specrag_batch.stages import StageTimer, RunInfo, build_pipeline, output_record

    config = RunConfig(...)
    rows = validate_table(table, "shard.parquet")          # list[QueryRow]
    pipeline = build_pipeline(config, drafter=drafter, verifier=verifier)
    timer = StageTimer()
    pipeline.run(rows, timer)                               # rows updated in place
    records = [output_record(row, config, RunInfo("run", "shard.parquet")) for row in rows]

    drafting, verifying = pipeline.split("verification")    # disaggregated halves
    drafting.run(rows); verifying.run(rows)                 # same rows, same records

:func:`specrag_batch.pipeline.process_rows`, ``draft_stage`` and ``verify_stage`` wrap this.
"""

from __future__ import annotations

from ..config import RunConfig
from .base import (INPUT_FIELDS, EngineLike, Pipeline, RunInfo, Stage, StageContractError,
                   StageTimer)
from .drafting import AdaptiveDrafting, Drafting, StandardAnswer
from .fallback import Fallback
from .output import output_record, output_row
from .retrieval import Retrieval, WiderRetrieval
from .sampling import MultiPerspectiveSampling
from .selection import Selection
from .verification import Verification

STAGES = ("retrieval", "sampling", "drafting", "verification", "selection", "fallback")
"""Stage timer names (:class:`StageTimer` keys, the manifest's ``stage_seconds``)."""
SPLIT_AT = "verification"
"""Where a disaggregated run splits the stage list: drafter side before, verifier side from."""


def speculative_stages(config: RunConfig, *, drafter: EngineLike,
                       verifier: EngineLike | None) -> list[Stage]:
    """Speculative RAG's stages (paper §3.2-3.3). ``verifier`` None: drafts are selected on
    the draft score and consensus alone (the verifier terms stay null).
    ``sampling.adaptive`` drafts in rounds (:class:`AdaptiveDrafting` instead of
    :class:`Drafting`); ``selection.fallback`` other than ``none`` appends :class:`Fallback`."""
    drafting = AdaptiveDrafting if config.sampling.adaptive else Drafting
    stages = [Retrieval(config), MultiPerspectiveSampling(config), drafting(config, drafter=drafter),
              Verification(config, verifier=verifier), Selection(config)]
    if config.selection.fallback != "none":
        stages.append(Fallback(config, drafter=drafter, verifier=verifier))
    return stages


def fallback_stages(config: RunConfig, *, drafter: EngineLike | None,
                    verifier: EngineLike) -> list[Stage]:
    """The stages :class:`Fallback` runs over a run's low-confidence rows: ``standard`` is
    :func:`standard_stages` on the verifier engine (paper §4, all N documents); ``wider`` is
    :func:`speculative_stages` with N' = ``retrieval.fallback_top_n`` and
    :class:`WiderRetrieval` first (the row's documents, then the index's). The inner config has
    ``selection.fallback: none`` (no third pass)."""
    if config.selection.fallback == "standard":
        return standard_stages(config, generator=verifier)
    data = config.model_dump()
    data["retrieval"]["top_n"] = config.retrieval.fallback_top_n
    data["selection"]["fallback"] = "none"
    wider = RunConfig.model_validate(data)
    return [WiderRetrieval(wider), *speculative_stages(wider, drafter=drafter, verifier=verifier)[1:]]


def standard_stages(config: RunConfig, *, generator: EngineLike) -> list[Stage]:
    """Standard RAG's stages (paper §4): one answer per row from all N documents."""
    return [Retrieval(config), StandardAnswer(config, generator=generator),
            Selection(config, standard=True)]


def build_pipeline(config: RunConfig, *, drafter: EngineLike | None,
                   verifier: EngineLike | None) -> Pipeline:
    """The pipeline of ``config.mode`` in chunks of ``config.chunk_rows``: speculative (needs
    ``drafter``) or standard (the ``verifier`` engine answers).

    Raises:
        ValueError: speculative mode without a drafter engine."""
    if config.mode == "standard":
        stages = standard_stages(config, generator=verifier)
    elif drafter is None:
        raise ValueError("speculative mode needs a drafter engine")
    else:
        stages = speculative_stages(config, drafter=drafter, verifier=verifier)
    return Pipeline(stages, chunk_rows=config.chunk_rows)


def stage_table(stages: list[Stage]) -> str:
    """A Markdown table of ``stages``: name, class, timer name, fields read, fields written
    (what ARCHITECTURE.md shows; a unit test keeps the two equal)."""
    lines = ["| stage | class | timer | reads | writes |", "|---|---|---|---|---|"]
    for stage in stages:
        lines.append(f"| {stage.name} | `{type(stage).__name__}` | {stage.timer_name} | "
                     f"{', '.join(stage.reads)} | {', '.join(stage.writes)} |")
    return "\n".join(lines)


__all__ = ["INPUT_FIELDS", "SPLIT_AT", "STAGES", "AdaptiveDrafting", "Drafting", "EngineLike",
           "Fallback", "MultiPerspectiveSampling", "Pipeline", "Retrieval", "RunInfo", "Selection",
           "Stage", "StageContractError", "StageTimer", "StandardAnswer", "Verification",
           "WiderRetrieval", "build_pipeline", "fallback_stages", "output_record", "output_row",
           "speculative_stages", "stage_table", "standard_stages"]
