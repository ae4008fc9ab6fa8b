"""What a stage is: the fields it reads and writes, checked by
:class:`specrag_batch.run.pipeline.Pipeline`, which runs a list of stages over chunks.

A stage declares the :class:`~specrag_batch.core.records.QueryRow` fields it reads and writes
(after Ray Data LLM's stages, which declare the keys they require and produce). A dotted name
(``drafts.score``) names a field of the records in a list field; the row field is the part
before the dot. The pipeline checks the declarations twice: when it is built (every field a
stage reads is an input field or written by an earlier stage) and while it runs (before a
stage, every row without an ``error`` holds what the stage reads; after it, what it writes).
Every stage may also set a row's ``error`` (:meth:`~specrag_batch.core.records.QueryRow.fail`,
with its ``error_reason``) and add to its ``flags``; rows with an ``error``
are passed over by every later stage and come out with their reason.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Iterator, Protocol, Sequence

from ..core.records import QueryRow

INPUT_FIELDS = ("row_index", "query_id", "query", "task", "documents", "choices", "gold")
"""Row fields set by validation (:func:`specrag_batch.core.schema.validate_table`)."""
OPTIONAL_FIELDS = frozenset({"documents", "choices", "gold", "fallback", "verifier_drafts_deduplicated"})
"""Fields that may be None on a valid row (not checked while running; ``fallback`` is set
only on the rows the fallback pass answers, ``verifier_drafts_deduplicated`` only on rows the
verifier scored with ``verifier.deduplicate_drafts`` on)."""
ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(QueryRow))
"""The fields of :class:`~specrag_batch.core.records.QueryRow` a stage may read or write."""


class EngineLike(Protocol):  # pragma: no cover - typing only
    """What stages use of an engine (:class:`specrag_batch.engines.engine.Engine`)."""

    tokenizer: object

    def generate(self, prompts, **kw):
        """One :class:`~specrag_batch.engines.engine.GenerationResult` per token-id prompt."""

    def prompt_logprobs(self, prompts, desc: str = ...):
        """Per prompt, log P(token_i | tokens_<i) for each token (natural log; None at i = 0)."""

    def prompt_and_next_logprobs(self, prompts, next_ids, desc: str = ...):
        """Per prompt, (:meth:`prompt_logprobs`, {token id: log P(next token)} for each of ``next_ids``)."""

    def next_token_logprobs(self, prompts, next_ids, desc: str = ...):
        """Per prompt, {token id: log P(token | prompt)} for each id of its ``next_ids`` entry."""


@dataclass
class StageTimer:
    """Wall seconds per stage timer name (:data:`STAGES`), accumulated over chunks; ``modes``:
    wall seconds per mode (``speculative``, ``standard``) of the rows each answered
    (:class:`~specrag_batch.run.pipeline.RoutedPipeline`)."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    modes: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall seconds of the ``with`` block to ``seconds[name]`` (also on an error)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start


@dataclass
class RunInfo:
    """Identifiers copied into every output row."""

    run_id: str
    source_file: str


class StageContractError(RuntimeError):
    """A stage's declared reads/writes do not hold (a programming error, not bad data)."""


class Stage:
    """One step of the pipeline over a chunk of rows.

    Subclasses set ``name`` (as in ARCHITECTURE.md), ``timer_name`` (the :class:`StageTimer`
    key, one of :data:`STAGES`), ``reads`` and ``writes`` (row field names, see the module
    docstring), and implement :meth:`__call__`, which updates the rows in place."""

    name: ClassVar[str]
    timer_name: ClassVar[str]
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def __call__(self, rows: Sequence[QueryRow]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reads={self.reads}, writes={self.writes})"


def row_field(name: str) -> str:
    """The row field a declared name refers to (``drafts.score`` -> ``drafts``)."""
    return name.split(".", 1)[0]


def check_rows(stage: Stage, rows: Sequence[QueryRow], names: Iterable[str], when: str) -> None:
    """Check that every row without an error holds the fields ``names`` of ``stage`` (``when``:
    ``"before"`` the stage for its reads, ``"after"`` it for its writes).

    Raises:
        StageContractError: a row lacks one, naming the stage, the field and the row."""
    needed = [n for n in {row_field(x): None for x in names} if n not in OPTIONAL_FIELDS]
    for row in rows:
        if row.error is None:
            for name in needed:
                if getattr(row, name) is None:
                    raise StageContractError(f"{when} stage {stage.name!r}: row {row.row_index} "
                                             f"(query_id={row.query_id!r}) has no {name!r}")
