"""Stage 3: drafting (paper §3.2). The drafter writes (rationale β, answer α) per subset.

All drafts of a chunk go to vLLM in one batched ``generate`` call. The draft score is the
drafter's own log-likelihood of what it wrote, kept in log space:

    log ρ_draft = log P(β | Q, δ) + log P(α | Q, δ, β)

i.e. the sum of the sampled tokens' log-probs over the rationale span plus the answer span
(formatting tokens such as ``"\\nAnswer:"`` are excluded). The paper writes ρ_Draft as
P(β|Q,δ) + P(α|Q,δ,β); we use the joint log-probability (the product of the two factors),
which is what the product ρ = ρ_Draft·ρ_SC·ρ_SR needs in log space and does not underflow.

Answer recovery (``drafter.answer_on_truncation``, off by default; an engineering recovery of
a budget cut, not in the paper, whose drafts (α, β) of §3.2 have no token budget): a draft
that stopped at ``drafter.max_tokens`` before its ``Answer:`` line has a rationale β but no
α. :func:`force_answers` appends the text ``"\\nAnswer:"`` to those drafts and lets the
drafter write α after it, in one more batched call. The forced tokens were not sampled: they
are the answer marker, outside both spans, so log ρ_draft = log P(β | Q, δ) + log P(α | Q, δ,
β, marker) from sampled tokens only.

The stage classes :class:`Drafting` and :class:`AdaptiveDrafting` (paper §3.2) and Standard RAG's
:class:`StandardAnswer` (paper §4) build each row's prompts and generate a whole chunk in one
batched engine call (:func:`run_drafts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from ..config import ModelConfig, RunConfig
from ..engines.engine import Engine, GenerationResult
from ..core.parsing import ANSWER_FORCED, ANSWER_RE, ParsedDraft, parse_draft
from .prompts import PromptTooLongError, encode_plain, fitted_prompt
from ..core.records import Draft, ErrorReason, Flag, QueryRow, add_flag
from ..core.labels import label_names
from .base import EngineLike, Stage
from .label_scoring import score_labels
from .selection import consensus


NON_FINITE = Flag.NON_FINITE_LOGPROB
PROCESSING_ERROR = Flag.DRAFT_PROCESSING_ERROR

ANSWER_MARKER = "\nAnswer:"
"""Text appended to a draft cut before its answer line (:func:`force_answers`): the line the
drafter prompt asks for (:func:`~specrag_batch.stages.prompts.drafter_prompt_ids`), with no trailing
space, so the answer's first word keeps its usual token (``":"`` + ``" Paris"``), as in
:func:`~specrag_batch.stages.prompts.encode_template`."""

FORCED_LOGPROB = math.nan
"""Log-prob placeholder of the forced :data:`ANSWER_MARKER` tokens in a joined generation:
they were not sampled, so they have none. NaN, so that one entering a sum would show;
:func:`score_generation` refuses a marker token inside the α or β span before summing."""


def token_char_spans(tokenizer, token_ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode generated tokens and return (text, per-token character span in that text).

    Returns:
        (text, spans): ``spans`` has one half-open (start, end) character range per token id,
        ``len(spans) == len(token_ids)``; a token that adds no text (e.g. a special token)
        gets an empty range. Spans come from incremental decoding (special tokens skipped),
        so they match what the model emitted. Decodes every prefix: O(len(token_ids)²)."""
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


def answer_marker_ids(tokenizer) -> list[int]:
    """Token ids of :data:`ANSWER_MARKER` as plain text (no special tokens); SmolLM2 and Qwen2.5:
    ``["\\n", "Answer", ":"]``."""
    return encode_plain(tokenizer, ANSWER_MARKER)


def max_prompt_tokens(tokenizer, max_model_len: int, max_tokens: int,
                      answer_max_tokens: int | None = None) -> int:
    """Room, tokens, for a drafter prompt: ``max_model_len - max_tokens``, less the forced
    marker and ``answer_max_tokens`` when answers are recovered (``answer_max_tokens`` not
    None, :func:`force_answers`), so prompt + draft + marker + answer fit the context
    (vLLM refuses a prompt that does not leave room for one generated token)."""
    reserve = 0 if answer_max_tokens is None else len(answer_marker_ids(tokenizer)) + answer_max_tokens
    return max_model_len - max_tokens - reserve


@dataclass
class DraftRequest:
    """One (row, subset) to draft (paper §3.2: one draft per subset).

    ``row``: the caller's key for the row (not read here; the drafting stage uses the row's
    position in its chunk); ``task``: ``qa`` | ``claim`` | ``choice``;
    ``doc_ids``: the subset's document ids; ``prompt_ids``: drafter prompt token ids
    (:func:`fitted_prompt`), already fitting the drafter's context; ``choices``: the option
    texts of a ``choice`` row."""

    row: int
    task: str
    doc_ids: list[str]
    prompt_ids: list[int]
    choices: list[str] | None = None


def score_generation(tokenizer, gen: GenerationResult, task: str, labels,
                     choices, forced: range = range(0)) -> tuple[ParsedDraft, float, int]:
    """Parse one generation and compute log ρ_draft (see module docstring).

    ``forced``: indices into ``gen.token_ids`` of tokens that were appended, not sampled (the
    :data:`ANSWER_MARKER` of :func:`force_answers`; their log-probs are placeholders); a
    non-empty range adds flag ``answer_forced``.

    Returns (parsed draft, log ρ_draft in nats, number of drafter tokens behind it: β and α;
    forced tokens are in neither).

    Raises:
        ValueError: a forced token lies inside the α or β span (the parse did not take the
            forced marker as the answer line)."""
    text, spans = token_char_spans(tokenizer, gen.token_ids)
    parsed = parse_draft(text, task, labels=labels, choices=choices, finish_reason=gen.finish_reason)
    forced_spans = [spans[i] for i in forced]
    for name, span in (("rationale", parsed.rationale_span), ("answer", parsed.answer_span)):
        if span_logprob(forced_spans, [0.0] * len(forced_spans), span)[1]:
            raise ValueError(f"the forced {ANSWER_MARKER!r} tokens overlap the {name} span {span} of "
                             f"{text!r}; they were not sampled and cannot be scored")
    rationale_logprob, rationale_tokens = span_logprob(spans, gen.logprobs, parsed.rationale_span)
    answer_logprob, answer_tokens = span_logprob(spans, gen.logprobs, parsed.answer_span)
    if gen.non_finite:
        parsed.flags.append(NON_FINITE)
    if forced:
        parsed.flags.append(ANSWER_FORCED)
    return parsed, rationale_logprob + answer_logprob, rationale_tokens + answer_tokens


def needs_answer(tokenizer, gen: GenerationResult) -> bool:
    """Whether ``gen`` stopped at its token budget (finish reason ``"length"``) with no answer
    line in its text (no :data:`~specrag_batch.core.parsing.ANSWER_RE` match, the test
    :func:`~specrag_batch.core.parsing.parse_draft` uses): a draft :func:`force_answers` continues.
    A draft cut *after* its ``Answer:`` line is not (its answer is what it wrote)."""
    return gen.finish_reason == "length" and not ANSWER_RE.search(
        tokenizer.decode(list(gen.token_ids), skip_special_tokens=True))


def force_answers(engine: Engine, prompts: Sequence[list[int]], gens: Sequence[GenerationResult], *,
                  answer_max_tokens: int, temperature: float, top_p: float, seed: int,
                  desc: str = "drafting") -> tuple[list[GenerationResult], dict[int, range]]:
    """Recover drafts cut at the token budget before their answer line (``drafter.
    answer_on_truncation``; an engineering recovery, not in the paper: see module docstring).

    The generations of :func:`needs_answer` are continued in ONE batched ``engine.generate``
    call: prompt = the draft's prompt ids + its generated ids + :func:`answer_marker_ids`, at
    most ``answer_max_tokens`` new tokens, the same ``temperature``, ``top_p`` and ``seed``.
    (The engine counts the call and its tokens in its usage. Every engine call starts from an
    empty prefix cache, :meth:`~specrag_batch.engines.engine.Engine._generate`, so the prompt + draft
    prefix is computed again; continuations of one row share it within the call.)

    Args:
        prompts: the drafter prompt of each generation (token ids), in the same order.
        gens: the drafting call's generations, one per prompt.

    Returns:
        (generations, forced): ``gens`` with each continued one replaced by the joined
        sequence (token ids = generated + marker + continuation; log-probs: the sampled ones
        of both calls, :data:`FORCED_LOGPROB` for the marker; finish reason ``"length"`` of the
        cut draft, so it keeps flag ``truncated_at_max_tokens``; ``non_finite`` of either
        call), and position -> index range of the marker tokens in the joined ids, for
        :func:`score_generation`'s ``forced``. No call when no generation needs an answer.

    Raises:
        ValueError: ``prompts`` and ``gens`` differ in length."""
    if len(prompts) != len(gens):
        raise ValueError(f"{len(prompts)} prompts but {len(gens)} generations")
    todo = [i for i, gen in enumerate(gens) if needs_answer(engine.tokenizer, gen)]
    if not todo:
        return list(gens), {}
    marker = answer_marker_ids(engine.tokenizer)
    answers = engine.generate([list(prompts[i]) + list(gens[i].token_ids) + marker for i in todo],
                              max_tokens=answer_max_tokens, temperature=temperature, top_p=top_p,
                              seed=seed, desc=f"{desc}: answers after the budget")
    out, forced = list(gens), {}
    for i, answer in zip(todo, answers):
        cut = gens[i]
        out[i] = GenerationResult(cut.text + ANSWER_MARKER + answer.text,
                                  list(cut.token_ids) + marker + list(answer.token_ids),
                                  list(cut.logprobs) + [FORCED_LOGPROB] * len(marker) + list(answer.logprobs),
                                  cut.finish_reason, cut.non_finite or answer.non_finite)
        forced[i] = range(len(cut.token_ids), len(cut.token_ids) + len(marker))
    return out, forced


def run_drafts(engine: Engine, requests: Sequence[DraftRequest], *, max_tokens: int,
               temperature: float, top_p: float, seed: int, labels: list[str],
               desc: str = "drafting", answer_max_tokens: int | None = None) -> list[Draft]:
    """Generate and score all drafts in one batched engine call (paper §3.2); one
    :class:`Draft` each, in request order, with ``score_draft`` = log ρ_draft (natural log,
    nats; :func:`score_generation`, module docstring) and ``tokens_draft`` the drafter tokens
    of β and α behind it. ``max_tokens``: generated tokens per draft at most.
    Unparseable drafts are kept with flags (``valid`` False). A draft
    whose parsing or scoring raised is returned with ``valid`` False, flag
    ``draft_processing_error`` and the message as its ``rationale`` (the caller makes it the
    row's error).

    ``answer_max_tokens`` (``drafter.answer_budget``): None = drafts as generated; a number =
    drafts cut at ``max_tokens`` before their answer line get one (:func:`force_answers`, one
    more batched call over those drafts only; flag ``answer_forced``). ``tokens_draft`` then
    counts the continuation's α tokens too.

    Raises:
        Whatever the engine raises (one failing call fails the batch); errors of parsing or
        scoring one draft are caught as above."""
    prompts = [request.prompt_ids for request in requests]
    gens = engine.generate(prompts, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                           seed=seed, desc=desc)
    forced: dict[int, range] = {}
    if answer_max_tokens is not None:
        gens, forced = force_answers(engine, prompts, gens, answer_max_tokens=answer_max_tokens,
                                     temperature=temperature, top_p=top_p, seed=seed, desc=desc)
    drafts = []
    for i, (req, gen) in enumerate(zip(requests, gens)):
        try:
            parsed, score, tokens = score_generation(engine.tokenizer, gen, req.task, labels, req.choices,
                                                     forced.get(i, range(0)))
        except Exception as e:  # one row's odd output must not fail the shard
            drafts.append(Draft(doc_ids=req.doc_ids, answer="", valid=False, flags=[PROCESSING_ERROR],
                                rationale=f"parsing the draft failed: {type(e).__name__}: {e}"))
            continue
        drafts.append(Draft(doc_ids=req.doc_ids, answer=parsed.answer, rationale=parsed.rationale,
                            flags=parsed.flags, valid=parsed.valid, score_draft=score,
                            written_answer=parsed.written_answer, tokens_draft=tokens))
    return drafts


Prompt = tuple[list[str], list[int], bool]
"""(document ids, prompt token ids, whether a document was truncated to fit)."""


def suspect_field(row: QueryRow) -> str:
    """The input field most likely behind an unexpected prompt-building error of ``row``."""
    return "choices" if row.task == "choice" else "documents"


class GenerationStage(Stage):
    """Shared by :class:`Drafting` and :class:`StandardAnswer`: subclasses yield a row's
    prompts (:meth:`prompts`); a row whose prompt cannot be built gets an error and none of
    its requests are sent."""

    writes = ("drafts",)
    what = "prompt"
    desc = "drafting"
    layout = "documents_first"
    """Drafter prompt layout (:data:`specrag_batch.stages.prompts.PROMPT_LAYOUTS`)."""
    rationale_style = "one_or_two_sentences"
    """Rationale instruction (:data:`specrag_batch.stages.prompts.RATIONALE_STYLES`)."""
    answer_max_tokens: int | None = None
    """Budget of answers recovered after a budget cut (``drafter.answer_budget``,
    :func:`specrag_batch.stages.drafting.force_answers`); None = no recovery."""

    def __init__(self, config: RunConfig, engine: EngineLike, model: ModelConfig):
        self.config, self.engine, self.model = config, engine, model

    def prompts(self, row: QueryRow) -> Iterator[Prompt]:  # pragma: no cover - abstract
        """The prompts of ``row`` (a subclass's: one per subset, or one per row).

        Raises:
            NotImplementedError: always, here."""
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
        if self.config.selection.label_distribution:  # labels after each β (stages.label_scoring)
            score_labels(self.engine, [r.prompt_ids for r in requests], drafts, lambda i: label_names(
                requests[i].task, requests[i].choices, self.config.claim_labels),
                max_model_len=self.model.max_model_len, desc=f"{self.desc}: label scores")
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


class Drafting(GenerationStage):
    """The drafter writes (rationale β, answer α) for each subset of each row, the prompt
    holding the subset's documents cut to fit ``drafter.max_model_len - drafter.max_tokens``
    tokens (flag ``truncated_documents``) in the layout ``drafter.prompt_layout`` with the
    rationale instruction ``drafter.rationale_style``; ``score_draft`` = log ρ_draft =
    log P(β, α | Q, δ) in nats (paper §3.2; :mod:`specrag_batch.stages.drafting`). With
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
    consensus rule (:func:`specrag_batch.stages.selection.consensus` with c =
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
