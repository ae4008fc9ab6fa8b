"""Stage 3, drafting (paper §3.2), and Standard RAG's answer stage (paper §4): prompts built
per row, all generated in one batched engine call per chunk, drafts scored and parsed
(:func:`specrag_batch.drafting.run_drafts`)."""

from __future__ import annotations

from typing import Iterator, Sequence

from ..config import ModelConfig, RunConfig
from ..drafting import PROCESSING_ERROR, DraftRequest, PromptTooLongError, fitted_prompt, run_drafts
from ..records import Draft, Flag, QueryRow, add_flag
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

    def __init__(self, config: RunConfig, engine: EngineLike, model: ModelConfig):
        self.config, self.engine, self.model = config, engine, model

    def prompts(self, row: QueryRow) -> Iterator[Prompt]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        requests: list[DraftRequest] = []
        for position, row in enumerate(rows):
            if row.error is None:
                requests += self._requests(position, row)
        drafts = run_drafts(self.engine, requests, max_tokens=self.model.max_tokens,
                            temperature=self.model.temperature, top_p=self.model.top_p,
                            seed=self.config.seed, labels=self.config.claim_labels, desc=self.desc)
        by_row: dict[int, list[Draft]] = {}
        for request, draft in zip(requests, drafts):
            row = rows[request.row]
            if PROCESSING_ERROR in draft.flags and row.error is None:
                row.fail("drafts", draft.rationale)
            by_row.setdefault(request.row, []).append(draft)
        for position, row_drafts in by_row.items():
            if rows[position].error is None:
                rows[position].drafts = row_drafts

    def _requests(self, position: int, row: QueryRow) -> list[DraftRequest]:
        requests = []
        try:
            for doc_ids, prompt_ids, truncated in self.prompts(row):
                if truncated:
                    add_flag(row.flags, Flag.TRUNCATED_DOCUMENTS)
                requests.append(DraftRequest(position, row.task, doc_ids, prompt_ids, row.choices))
        except PromptTooLongError as e:
            row.fail("query", str(e))
            return []
        except Exception as e:  # one row's bad input must not fail the shard
            row.fail(suspect_field(row), f"building the {self.what} failed: {type(e).__name__}: {e}")
            return []
        return requests

    def _fitted(self, row: QueryRow, documents) -> Prompt:
        prompt_ids, truncated = fitted_prompt(
            self.engine.tokenizer, row.task, row.query, documents, row.choices,
            self.config.claim_labels, self.config.retrieval.max_doc_tokens,
            self.model.max_model_len - self.model.max_tokens)
        return [d.doc_id for d in documents], prompt_ids, truncated


class Drafting(_Generation):
    """The drafter writes (rationale β, answer α) for each subset of each row, the prompt
    holding the subset's documents cut to fit ``drafter.max_model_len - drafter.max_tokens``
    tokens (flag ``truncated_documents``); ``score_draft`` = log P(β, α | Q, δ) in nats."""

    name = timer_name = "drafting"
    reads = ("task", "query", "choices", "top_documents", "subsets")
    what = "drafter prompt"

    def __init__(self, config: RunConfig, *, drafter: EngineLike):
        super().__init__(config, drafter, config.drafter)

    def prompts(self, row: QueryRow) -> Iterator[Prompt]:
        for subset in row.subsets:
            yield self._fitted(row, [row.top_documents[j] for j in subset])


class StandardAnswer(_Generation):
    """Standard RAG (paper §4): the verifier-sized model answers once per row from all N
    documents, with the drafter's prompt and parser (one draft per row)."""

    name = "standard_answer"
    timer_name = "drafting"
    reads = ("task", "query", "choices", "top_documents")
    desc = "standard RAG"

    def __init__(self, config: RunConfig, *, generator: EngineLike):
        super().__init__(config, generator, config.verifier)

    def prompts(self, row: QueryRow) -> Iterator[Prompt]:
        yield self._fitted(row, row.top_documents)
