"""The stage lists of each mode and the :class:`Pipeline` that runs them over chunks of rows.

Speculative RAG (paper §3) is the stage list :func:`speculative_stages`::

    Retrieval -> MultiPerspectiveSampling -> Drafting | Verification -> Selection [-> Fallback]

(``sampling.adaptive``: :class:`AdaptiveDrafting` in place of :class:`Drafting`;
``selection.fallback``: :class:`Fallback` re-answers low-confidence rows with
:func:`fallback_stages`.)

Standard RAG (paper §4) is :func:`standard_stages`: ``Retrieval -> StandardAnswer ->
Selection(standard=True)``. Each stage (:class:`~specrag_batch.stages.base.Stage`) declares the
:class:`~specrag_batch.core.records.QueryRow` fields it ``reads`` and ``writes``; a
:class:`Pipeline` runs a stage list over rows in chunks of ``chunk_rows`` and checks
those declarations. A disaggregated run is the same list split at ``|``
(:meth:`Pipeline.split` at ``"verification"``): drafter workers run the first half,
verifier workers the second, on the rows read back from the intermediate draft Parquet.

Build and run a pipeline over rows with given engines (any object with the engine methods
of :class:`~specrag_batch.stages.base.EngineLike`, e.g. :func:`specrag_batch.engines.engine.get_engine` or a fake)::

    from specrag_batch.config import RunConfig
    from specrag_batch.core.schema import validate_table
    from specrag_batch.run.pipeline import StageTimer, RunInfo, build_pipeline, output_record

    config = RunConfig(...)
    rows = validate_table(table, "shard.parquet")          # list[QueryRow]
    pipeline = build_pipeline(config, drafter=drafter, verifier=verifier)
    timer = StageTimer()
    pipeline.run(rows, timer)                               # rows updated in place
    records = [output_record(row, config, RunInfo("run", "shard.parquet")) for row in rows]

    drafting, verifying = pipeline.split("verification")    # disaggregated halves
    drafting.run(rows); verifying.run(rows)                 # same rows, same records

:func:`process_rows`, :func:`draft_stage` and :func:`verify_stage` wrap this for the shard
job; the functions after them keep the older per-stage API (results keyed by position in
``rows``) for the drafter-training data step and the tests that call one stage.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable, Iterable, Iterator, Sequence

from ..config import RunConfig
from ..core.records import Document, Draft, QueryRow
from ..stages.base import (ROW_FIELDS, INPUT_FIELDS, EngineLike, RunInfo, Stage, StageContractError,
                          StageTimer, check_rows, row_field)
from ..stages.drafting import AdaptiveDrafting, Drafting
from ..stages.standard import StandardAnswer
from ..stages.fallback import Fallback
from .output import output_record, output_row
from ..stages.retrieval import Retrieval, WiderRetrieval
from ..stages.sampling import MultiPerspectiveSampling
from ..stages.selection import Selection
from ..stages.verification import Verification

__all__ = ["INPUT_FIELDS", "SPLIT_AT", "STAGES", "EngineLike", "Pipeline", "RunInfo", "Stage",
           "RoutedPipeline", "StageContractError", "StageTimer", "build_pipeline", "draft_stage", "fallback_stages",
           "output_record", "output_row", "process_rows", "speculative_stages", "stage_table",
           "standard_stages", "verify_stage"]


class Pipeline:
    """Stages run in order over the rows in chunks of ``chunk_rows``: all stages over one
    chunk, then the next chunk. Chunking and timing are written here only.

    Args:
        stages: the stages, in order.
        chunk_rows: rows per chunk (``RunConfig.chunk_rows``); each stage sends one batched
            engine call per chunk.
        given: row fields already set when the pipeline starts (default: the input fields;
            the verifier side of a disaggregated run also has what the drafter side wrote).

    Raises:
        StageContractError: a stage reads a field nothing before it writes, or declares a
            name that is not a row field.
    """

    def __init__(self, stages: Sequence[Stage], *, chunk_rows: int,
                 given: Iterable[str] = INPUT_FIELDS):
        self.stages, self.chunk_rows, self.given = list(stages), chunk_rows, tuple(given)
        available = set(self.given)
        for stage in self.stages:
            for name in (*stage.reads, *stage.writes):
                if row_field(name) not in ROW_FIELDS:
                    raise StageContractError(f"stage {stage.name!r} declares {name!r}, not a row field")
            missing = [n for n in stage.reads if row_field(n) not in available]
            if missing:
                raise StageContractError(f"stage {stage.name!r} reads {missing}, which no earlier "
                                         f"stage writes")
            available |= {row_field(n) for n in stage.writes}

    def chunks(self, rows: Sequence[QueryRow]) -> Iterator[list[QueryRow]]:
        """Consecutive chunks of ``chunk_rows`` rows, in input order."""
        for start in range(0, len(rows), self.chunk_rows):
            yield list(rows[start:start + self.chunk_rows])

    def run(self, rows: Sequence[QueryRow], timer: StageTimer | None = None) -> None:
        """Run every stage over every chunk, updating the rows in place; wall seconds per
        stage are added to ``timer``.

        Raises:
            StageContractError: a row without an error lacks a field a stage reads (before
                it) or writes (after it)."""
        timer = timer if timer is not None else StageTimer()
        for chunk in self.chunks(rows):
            for stage in self.stages:
                check_rows(stage, chunk, stage.reads, "before")
                with timer.stage(stage.timer_name):
                    stage(chunk)
                check_rows(stage, chunk, stage.writes, "after")

    def split(self, before: str) -> tuple[Pipeline, Pipeline]:
        """(the stages before the stage named ``before``, that stage and the rest): the two
        halves of a disaggregated run. The second half is given what the first writes.

        Raises:
            ValueError: no stage has that name."""
        names = [s.name for s in self.stages]
        if before not in names:
            raise ValueError(f"no stage {before!r} in {names}")
        at = names.index(before)
        first = Pipeline(self.stages[:at], chunk_rows=self.chunk_rows, given=self.given)
        written = [row_field(n) for s in first.stages for n in s.writes]
        second = Pipeline(self.stages[at:], chunk_rows=self.chunk_rows,
                          given=(*self.given, *dict.fromkeys(written)))
        return first, second


class RoutedPipeline:
    """A run where each row is answered by its task's mode (``mode`` per task,
    :meth:`RunConfig.mode_for`): the rows of each chunk of ``chunk_rows`` go to the
    :class:`Pipeline` of their mode (in input order within each), so one chunk makes at most one
    batched engine call per stage and mode; every row is run by exactly one pipeline. Wall seconds
    per mode go to :attr:`StageTimer.modes`.

    Args:
        pipelines: mode -> its pipeline (chunked by ``chunk_rows`` too, a group never exceeds it).
        route: row -> mode.
        chunk_rows: rows per chunk.

    Raises:
        KeyError: (from :meth:`run`) a row routed to a mode without a pipeline."""

    def __init__(self, pipelines: dict[str, Pipeline], route: Callable[[QueryRow], str], *, chunk_rows: int):
        self.pipelines, self.route, self.chunk_rows = pipelines, route, chunk_rows

    def run(self, rows: Sequence[QueryRow], timer: StageTimer | None = None) -> None:
        """:meth:`Pipeline.run` of each mode's rows of each chunk, rows updated in place."""
        timer = timer if timer is not None else StageTimer()
        for start in range(0, len(rows), self.chunk_rows):
            groups: dict[str, list[QueryRow]] = {}
            for row in rows[start:start + self.chunk_rows]:
                groups.setdefault(self.route(row), []).append(row)
            for mode, group in groups.items():
                t0 = time.perf_counter()
                self.pipelines[mode].run(group, timer)
                timer.modes[mode] += time.perf_counter() - t0


def routed(cfg: RunConfig, pipelines: dict[str, Pipeline]) -> RoutedPipeline:
    """:class:`RoutedPipeline` of ``pipelines`` routing each row by ``cfg.mode_for(row.task)``."""
    return RoutedPipeline(pipelines, lambda row: cfg.mode_for(row.task), chunk_rows=cfg.chunk_rows)


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
    drafting = AdaptiveDrafting if config.adaptive_drafting else Drafting
    stages = [Retrieval(config), MultiPerspectiveSampling(config), drafting(config, drafter=drafter),
              Verification(config, verifier=verifier), Selection(config)]
    if config.selection.fallback != "none":
        stages.append(Fallback(config, answer_again=partial(_answer_again, config, drafter, verifier)))
    return stages


def _answer_again(config: RunConfig, drafter: EngineLike | None, verifier: EngineLike | None,
                  rows: list[QueryRow]) -> None:
    """Run :func:`fallback_stages` over ``rows`` (copies of the flagged rows) in one chunk.

    Raises:
        ValueError: the engine the fallback needs was not given (the verifier; for ``wider``
            also the drafter)."""
    kind = config.selection.fallback
    if verifier is None or (kind == "wider" and drafter is None):
        raise ValueError(f"selection.fallback {kind!r} needs the "
                         f"{'drafter and verifier engines' if kind == 'wider' else 'verifier engine'}")
    stages = fallback_stages(config, drafter=drafter, verifier=verifier)
    Pipeline(stages, chunk_rows=len(rows)).run(rows, StageTimer())


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
                   verifier: EngineLike | None, mode: str | None = None) -> Pipeline:
    """The pipeline of ``mode`` (default: ``config.mode``, a single mode) in chunks of
    ``config.chunk_rows``: speculative (needs ``drafter``) or standard (the ``verifier`` engine
    answers).

    Raises:
        ValueError: speculative mode without a drafter engine; no ``mode`` under a per-task
            mode (:func:`build_routed`)."""
    mode = mode or config.mode
    if not isinstance(mode, str):
        raise ValueError("a per-task mode runs one pipeline per mode: use build_routed")
    if mode == "standard":
        stages = standard_stages(config, generator=verifier)
    elif drafter is None:
        raise ValueError("speculative mode needs a drafter engine")
    else:
        stages = speculative_stages(config, drafter=drafter, verifier=verifier)
    return Pipeline(stages, chunk_rows=config.chunk_rows)


def build_routed(config: RunConfig, *, drafter: EngineLike | None,
                 verifier: EngineLike | None) -> RoutedPipeline:
    """Each row by its task's mode (:meth:`RunConfig.mode_for`): one :func:`build_pipeline` per
    mode the config uses, in a :class:`RoutedPipeline`.

    Raises:
        ValueError: a mode is speculative and there is no drafter engine."""
    return routed(config, {m: build_pipeline(config, drafter=drafter, verifier=verifier, mode=m)
                           for m in sorted(config.modes)})


def stage_table(stages: list[Stage]) -> str:
    """A Markdown table of ``stages``: name, class, timer name, fields read, fields written
    (what ARCHITECTURE.md shows; a unit test keeps the two equal)."""
    lines = ["| stage | class | timer | reads | writes |", "|---|---|---|---|---|"]
    for stage in stages:
        lines.append(f"| {stage.name} | `{type(stage).__name__}` | {stage.timer_name} | "
                     f"{', '.join(stage.reads)} | {', '.join(stage.writes)} |")
    return "\n".join(lines)


def process_rows(rows: Sequence[QueryRow], cfg: RunConfig, *, drafter: EngineLike | None,
                 verifier: EngineLike, info: RunInfo, timer: StageTimer | None = None) -> list[dict]:
    """Run the configured mode over rows, in chunks of ``cfg.chunk_rows``; one record per row,
    in input order. Row errors from validation pass straight through.

    Raises:
        ValueError: speculative mode without a drafter engine."""
    build_routed(cfg, drafter=drafter, verifier=verifier).run(rows, timer)
    return [output_record(row, cfg, info) for row in rows]


def _halves(cfg: RunConfig, drafter: EngineLike | None, verifier: EngineLike | None) -> tuple[Pipeline, Pipeline]:
    stages = speculative_stages(cfg, drafter=drafter, verifier=verifier)
    return Pipeline(stages, chunk_rows=cfg.chunk_rows).split(SPLIT_AT)


def draft_stage(rows: Sequence[QueryRow], cfg: RunConfig, *, drafter: EngineLike,
                timer: StageTimer | None = None) -> dict[int, list[Draft]]:
    """Disaggregated runs, drafter side: the stages before verification over a shard's rows
    in chunks of ``cfg.chunk_rows`` (the same chunks as :func:`process_rows`). Returns position
    in ``rows`` -> drafts; failing rows get an ``error``. Under a per-task mode the rows of
    Standard RAG tasks pass untouched (the verifier side answers them, :func:`verify_stage`).

    Raises:
        ValueError: no task of ``cfg`` is answered by Speculative RAG."""
    if not cfg.uses_speculative:
        raise ValueError("disaggregated drafting needs mode 'speculative'")
    nothing = Pipeline([], chunk_rows=cfg.chunk_rows)
    routed(cfg, {"speculative": _halves(cfg, drafter, None)[0], "standard": nothing}).run(rows, timer)
    return {i: row.drafts for i, row in enumerate(rows) if row.error is None and row.drafts is not None}


def verify_stage(rows: Sequence[QueryRow], drafts: dict[int, list[Draft]], cfg: RunConfig, *,
                 verifier: EngineLike, info: RunInfo, timer: StageTimer | None = None,
                 drafter: EngineLike | None = None) -> list[dict]:
    """Disaggregated runs, verifier side: verification and selection (and the fallback pass,
    ``selection.fallback``) over drafts read back from the intermediate draft Parquet
    (position in ``rows`` -> drafts), chunked as in :func:`process_rows`; one output record
    per row, in input order (rows with an ``error`` pass through). The fallback reads the
    rows' input ``documents`` (the draft Parquet has none) and, for ``wider``, ``drafter``.
    Under a per-task mode the rows of Standard RAG tasks (not drafted) run the whole
    :func:`standard_stages` here, from their input ``documents`` (set by the caller).

    Raises:
        ValueError: a row needs the fallback and its engine was not given."""
    for i, row in enumerate(rows):
        if i in drafts and row.error is None:
            row.drafts = drafts[i]
    pipelines = {"speculative": _halves(cfg, drafter, verifier)[1]}
    if "standard" in cfg.modes:
        pipelines["standard"] = build_pipeline(cfg, drafter=None, verifier=verifier, mode="standard")
    routed(cfg, pipelines).run(rows, timer)
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
