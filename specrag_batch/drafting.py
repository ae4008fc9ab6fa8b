"""Stage 3: drafting (paper §3.2). The drafter writes (rationale β, answer α) per subset.

All drafts of a chunk go to vLLM in one batched ``generate`` call. The draft score is the
drafter's own log-likelihood of what it wrote, kept in log space:

    log ρ_draft = log P(β | Q, δ) + log P(α | Q, δ, β)

i.e. the sum of the sampled tokens' log-probs over the rationale span plus the answer span
(formatting tokens such as ``"\\nAnswer:"`` are excluded). The paper writes ρ_Draft as
P(β|Q,δ) + P(α|Q,δ,β); we use the joint log-probability (the product of the two factors),
which is what the product ρ = ρ_Draft·ρ_SC·ρ_SR needs in log space and does not underflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .engines import Engine, GenerationResult
from .parsing import ParsedDraft, parse_draft
from .prompts import drafter_prompt_ids, encode_plain
from .records import Document, Draft, Flag

NON_FINITE = Flag.NON_FINITE_LOGPROB
PROCESSING_ERROR = Flag.DRAFT_PROCESSING_ERROR


class PromptTooLongError(ValueError):
    """Even with the smallest per-document budget the prompt exceeds the context window."""


def truncate_documents(tokenizer, docs: Sequence[Document], budget: int) -> tuple[list[Document], bool]:
    """Cut each document's text to at most ``budget`` tokens (of ``tokenizer``).

    Returns (documents, whether any was truncated). Titles are kept whole."""
    out, cut = [], False
    for document in docs:
        ids = encode_plain(tokenizer, document.text)
        if len(ids) > budget:
            cut = True
            out.append(Document(document.doc_id, document.title,
                                tokenizer.decode(ids[:budget]).rstrip() + " ..."))
        else:
            out.append(document)
    return out, cut


def fitted_prompt(tokenizer, task: str, query: str, docs: Sequence[Document], choices, labels,
                  doc_budget: int, max_prompt_tokens: int,
                  layout: str = "documents_first",
                  rationale_style: str = "one_or_two_sentences") -> tuple[list[int], bool]:
    """Token ids of the drafter prompt in ``layout`` with the rationale instruction of
    ``rationale_style`` (:func:`~specrag_batch.prompts.drafter_prompt_ids`),
    shrinking the per-document budget (tokens) until it fits ``max_prompt_tokens``.

    Returns (token ids, truncated?).

    Raises:
        PromptTooLongError: the prompt does not fit even at 16 tokens per document.
        ValueError: unknown ``layout`` or ``rationale_style``.
    """
    budget = doc_budget
    while True:
        cut_docs, cut = truncate_documents(tokenizer, docs, budget)
        ids = drafter_prompt_ids(tokenizer, task, query, cut_docs, choices, labels, layout, rationale_style)
        if len(ids) <= max_prompt_tokens:
            return ids, cut
        if budget <= 16:
            raise PromptTooLongError(
                f"prompt needs {len(ids)} tokens at 16 tokens per document; the context allows "
                f"{max_prompt_tokens}")
        budget = max(16, int(budget * 0.6))


def token_char_spans(tokenizer, token_ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode generated tokens and return (text, per-token character span in that text).

    Spans come from incremental decoding, so they match what the model emitted."""
    spans, prev = [], 0
    for i in range(len(token_ids)):
        end = max(prev, len(tokenizer.decode(token_ids[:i + 1], skip_special_tokens=True)))
        spans.append((prev, end))
        prev = end
    return tokenizer.decode(list(token_ids), skip_special_tokens=True), spans


def span_logprob(spans: list[tuple[int, int]], logprobs: Sequence[float],
                 span: tuple[int, int] | None) -> tuple[float, int]:
    """(Sum of log-probs, number) of the tokens whose characters overlap ``span`` ((0.0, 0)
    if None). ``spans``: per-token (start, end) character offsets (:func:`token_char_spans`);
    ``logprobs``: one natural-log prob per token; ``span``: half-open character range."""
    if span is None:
        return 0.0, 0
    first, last = span
    hits = [logprob for (start, end), logprob in zip(spans, logprobs)
            if end > start and end > first and start < last]
    return float(sum(hits)), len(hits)


@dataclass
class DraftRequest:
    """One (row, subset) to draft. ``prompt_ids`` already fit the drafter's context."""

    row: int
    task: str
    doc_ids: list[str]
    prompt_ids: list[int]
    choices: list[str] | None = None


def score_generation(tokenizer, gen: GenerationResult, task: str, labels,
                     choices) -> tuple[ParsedDraft, float, int]:
    """Parse one generation and compute log ρ_draft (see module docstring).

    Returns (parsed draft, log ρ_draft, number of drafter tokens behind it: β and α)."""
    text, spans = token_char_spans(tokenizer, gen.token_ids)
    parsed = parse_draft(text, task, labels=labels, choices=choices, finish_reason=gen.finish_reason)
    rationale_logprob, rationale_tokens = span_logprob(spans, gen.logprobs, parsed.rationale_span)
    answer_logprob, answer_tokens = span_logprob(spans, gen.logprobs, parsed.answer_span)
    if gen.non_finite:
        parsed.flags.append(NON_FINITE)
    return parsed, rationale_logprob + answer_logprob, rationale_tokens + answer_tokens


def run_drafts(engine: Engine, requests: Sequence[DraftRequest], *, max_tokens: int,
               temperature: float, top_p: float, seed: int, labels: list[str],
               desc: str = "drafting") -> list[Draft]:
    """Generate and score all drafts in one batched engine call; one :class:`Draft` each,
    in request order. Unparseable drafts are kept with flags (``valid`` False). A draft
    whose parsing or scoring raised is returned with ``valid`` False, flag
    ``draft_processing_error`` and the message as its ``rationale`` (the caller makes it the
    row's error)."""
    gens = engine.generate([request.prompt_ids for request in requests], max_tokens=max_tokens,
                           temperature=temperature, top_p=top_p, seed=seed, desc=desc)
    drafts = []
    for req, gen in zip(requests, gens):
        try:
            parsed, score, tokens = score_generation(engine.tokenizer, gen, req.task, labels, req.choices)
        except Exception as e:  # one row's odd output must not fail the shard
            drafts.append(Draft(doc_ids=req.doc_ids, answer="", valid=False, flags=[PROCESSING_ERROR],
                                rationale=f"parsing the draft failed: {type(e).__name__}: {e}"))
            continue
        drafts.append(Draft(doc_ids=req.doc_ids, answer=parsed.answer, rationale=parsed.rationale,
                            flags=parsed.flags, valid=parsed.valid, score_draft=score,
                            written_answer=parsed.written_answer, tokens_draft=tokens))
    return drafts
