"""Stage 3, drafting (paper §3.2), and Standard RAG's answer stage (paper §4): prompts built
per row, all generated in one batched engine call per chunk, drafts scored and parsed
(:func:`specrag_batch.drafting.run_drafts`)."""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from ..config import ModelConfig, RunConfig
from ..drafting import (PROCESSING_ERROR, DraftRequest, PromptTooLongError, fitted_prompt, max_prompt_tokens,
                        run_drafts)
from ..records import Draft, ErrorReason, Flag, QueryRow, add_flag
from ..selection import consensus
from .base import EngineLike, Stage

Prompt = tuple[list[str], list[int], bool]
"""(document ids, prompt token ids, whether a document was truncated to fit)."""


def suspect_field(row: QueryRow) -> str:
    """The input field most likely behind an unexpected prompt-building error of ``row``."""
    return "choices" if row.task == "choice" else "documents"


class _Generation(Stage):
    """Shared by :class:`Drafting` and :class:`StandardAnswer`: subclasses yield a row's
    prompts (:meth:`prompts`); a row whose prompt cannot be built gets an error and none of
    its requests are sent."""

    writes = ("drafts",)
    what = "prompt"
    desc = "drafting"
    layout = "documents_first"
    """Drafter prompt layout (:data:`specrag_batch.prompts.PROMPT_LAYOUTS`)."""
    rationale_style = "one_or_two_sentences"
    """Rationale instruction (:data:`specrag_batch.prompts.RATIONALE_STYLES`)."""
    answer_max_tokens: int | None = None
    """Budget of answers recovered after a budget cut (``drafter.answer_budget``,
    :func:`specrag_batch.drafting.force_answers`); None = no recovery."""

    def __init__(self, config: RunConfig, engine: EngineLike, model: ModelConfig):
        self.config, self.engine, self.model = config, engine, model

    def prompts(self, row: QueryRow) -> Iterator[Prompt]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        for position, row_drafts in self._generate(rows, self.prompts).items():
            rows[position].drafts = row_drafts

    def _generate(self, rows: Sequence[QueryRow],
                  prompts: Callable[[QueryRow], Iterator[Prompt]]) -> dict[int, list[Draft]]:
        """One batched engine call over ``prompts(row)`` of every row without an error;
        position in ``rows`` -> its drafts, for the rows still without an error (a row whose
        prompt or drafts fail gets its error and no entry)."""
        requests: list[DraftRequest] = []
        for position, row in enumerate(rows):
            if row.error is None:
                requests += self._requests(position, row, prompts)
        drafts = run_drafts(self.engine, requests, max_tokens=self.model.max_tokens,
                            temperature=self.model.temperature, top_p=self.model.top_p,
                            seed=self.config.seed, labels=self.config.claim_labels, desc=self.desc,
                            answer_max_tokens=self.answer_max_tokens)
        by_row: dict[int, list[Draft]] = {}
        for request, draft in zip(requests, drafts):
            row = rows[request.row]
            if PROCESSING_ERROR in draft.flags and row.error is None:
                row.fail("drafts", draft.rationale, code=ErrorReason.DRAFT_PROCESSING_ERROR)
            by_row.setdefault(request.row, []).append(draft)
        return {position: row_drafts for position, row_drafts in by_row.items()
                if rows[position].error is None}

    def _requests(self, position: int, row: QueryRow,
                  prompts: Callable[[QueryRow], Iterator[Prompt]]) -> list[DraftRequest]:
        requests = []
        try:
            for doc_ids, prompt_ids, truncated in prompts(row):
                if truncated:
                    add_flag(row.flags, Flag.TRUNCATED_DOCUMENTS)
                requests.append(DraftRequest(position, row.task, doc_ids, prompt_ids, row.choices))
        except PromptTooLongError as e:
            row.fail("query", str(e), code=ErrorReason.PROMPT_TOO_LONG)
            return []
        except Exception as e:  # one row's bad input must not fail the shard
            row.fail(suspect_field(row), f"building the {self.what} failed: {type(e).__name__}: {e}",
                     code=ErrorReason.PROMPT_FAILED)
            return []
        return requests

    def _fitted(self, row: QueryRow, documents) -> Prompt:
        prompt_ids, truncated = fitted_prompt(
            self.engine.tokenizer, row.task, row.query, documents, row.choices,
            self.config.claim_labels, self.config.retrieval.max_doc_tokens,
            max_prompt_tokens(self.engine.tokenizer, self.model.max_model_len, self.model.max_tokens,
                              self.answer_max_tokens), self.layout, self.rationale_style)
        return [d.doc_id for d in documents], prompt_ids, truncated


class Drafting(_Generation):
    """The drafter writes (rationale β, answer α) for each subset of each row, the prompt
    holding the subset's documents cut to fit ``drafter.max_model_len - drafter.max_tokens``
    tokens (flag ``truncated_documents``) in the layout ``drafter.prompt_layout`` with the
    rationale instruction ``drafter.rationale_style``; ``score_draft`` = log ρ_draft =
    log P(β, α | Q, δ) in nats (paper §3.2; :mod:`specrag_batch.drafting`). With
    ``drafter.answer_on_truncation`` drafts cut before their answer line get one written after
    a forced ``"\\nAnswer:"`` (a second batched call; flag ``answer_forced``), and the prompt
    room shrinks by the marker and ``drafter.answer_max_tokens``."""

    name = timer_name = "drafting"
    reads = ("task", "query", "choices", "top_documents", "subsets")
    what = "drafter prompt"

    def __init__(self, config: RunConfig, *, drafter: EngineLike):
        super().__init__(config, drafter, config.drafter)
        self.layout = config.drafter.prompt_layout
        self.rationale_style = config.drafter.rationale_style
        self.answer_max_tokens = config.drafter.answer_budget

    def prompts(self, row: QueryRow, subsets: slice = slice(None)) -> Iterator[Prompt]:
        """Drafter prompts of ``row.subsets[subsets]`` (all subsets by default)."""
        for subset in row.subsets[subsets]:
            yield self._fitted(row, [row.top_documents[j] for j in subset])


class AdaptiveDrafting(Drafting):
    """Drafting in two rounds (``sampling.adaptive``): the first ``sampling.first_round``
    subsets of every row of the chunk in one batched call; a row whose drafts meet the
    consensus rule (:func:`specrag_batch.selection.consensus` with c =
    ``RunConfig.consensus_threshold``, the rule of the fast path, so c' = max(2, min(c, valid
    first-round drafts))) stops there: verification finds the same consensus and skips the
    verifier for it (the project's consensus fast path; the paper's verifier, §3.3, scores
    every draft). The other rows draft their remaining subsets in a
    second batched call. The subsets are multi-perspective sampling's m (paper §3.2), drafted
    in the same order, so a row that does not stop has the drafts of :class:`Drafting`.
    ``draft_rounds``: 2 for the rows of the second call, else 1 (stopped on the consensus, or
    no subset left after the first round)."""

    name = "adaptive_drafting"
    writes = ("drafts", "draft_rounds")

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        first = slice(self.config.sampling.first_round)
        for position, row_drafts in self._generate(rows, lambda row: self.prompts(row, first)).items():
            rows[position].drafts, rows[position].draft_rounds = row_drafts, 1
        rest = slice(self.config.sampling.first_round, None)
        open_rows = [row for row in rows if row.error is None and row.subsets[rest]
                     and consensus(row.drafts, self.config.consensus_threshold) is None]
        for position, row_drafts in self._generate(open_rows, lambda row: self.prompts(row, rest)).items():
            open_rows[position].drafts += row_drafts
            open_rows[position].draft_rounds = 2


class StandardAnswer(_Generation):
    """Standard RAG (paper §4): the verifier-sized model answers once per row from all N
    documents, with the drafter's prompt and parser (one draft per row). Its prompt keeps the
    ``documents_first`` layout and the ``one_or_two_sentences`` rationale instruction
    whatever ``drafter.prompt_layout`` and ``drafter.rationale_style`` say, and recovers no
    answer after a budget cut (``drafter.answer_on_truncation``): one prompt per row shares
    nothing a layout could add, and the baseline stays fixed."""

    name = "standard_answer"
    timer_name = "drafting"
    reads = ("task", "query", "choices", "top_documents")
    desc = "standard RAG"

    def __init__(self, config: RunConfig, *, generator: EngineLike):
        super().__init__(config, generator, config.verifier)

    def prompts(self, row: QueryRow) -> Iterator[Prompt]:
        """The one prompt of ``row``: all its ``top_documents`` (N), cut to fit the verifier's
        ``max_model_len - max_tokens`` tokens."""
        yield self._fitted(row, row.top_documents)
