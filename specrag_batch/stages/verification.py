"""Stage 4: verification (paper §3.3). The verifier scores each draft in one forward pass.

Input per draft: ``[Q, α, β, R]`` — the question block (no documents), the draft's answer α
*as the drafter wrote it* (e.g. the letter ``B`` of a choice row) and rationale β, the
reflection question R, then the chat template's assistant opening. With
``verifier.evidence_aware`` (the paper's variant that adds the draft's documents to its rationale, Score(α|Q,β,δ)) the input is
``[Q, δ_j, α_j, β_j, R]``: the draft's own subset δ_j (its k documents, not all N;
:func:`draft_documents`) follows the question block in the first user turn, cut to fit
(:func:`~specrag_batch.stages.prompts.fitted_verifier_prompt`), and both terms below come from that
pass. One vLLM request returns the prompt's log-probs and, for the next token, the log-probs
of exactly the yes/no token ids (vLLM's ``logprob_token_ids``; natural log):

* self-consistency  log ρ_SC = Σ log P(t | prefix) over the α and β tokens = log P(α, β | Q)
  (log P(α, β | Q, δ_j) with the documents)
* self-reflection   from the next token, where the verifier answers R:
  P(Yes) = Σ P(t) over the tokenizer's single-token spellings of "yes" (``Yes``, ``yes``,
  ``YES``, each with and without a leading space), P(No) likewise.
  ``selection.self_reflection: paper``    log ρ_SR = log P(Yes)               (the paper's term)
  ``selection.self_reflection: contrast`` log ρ_SR = log P(Yes) / (P(Yes) + P(No))
  (:func:`self_reflection_score`; the draft keeps log P(Yes) and log P(No), so the other
  variant can be computed after a run from the output's drafts)

Every spelling's log-prob is read directly, wherever it ranks among the vocabulary, so the
scores depend on no top-k setting and on no engine's ``max_logprobs``. A tokenizer with no
single-token spelling of "yes" or "no" gives no self-reflection score (flag
``self_reflection_unavailable``). Outputs of older versions, which read a top-20 and bounded
a missing word by the 20th log-prob, may carry ``self_reflection_yes_not_in_top_k`` /
``self_reflection_no_not_in_top_k``.

α and β token positions come from :func:`prompts.verifier_prompt` (data encoded separately,
never located by searching the text).

The stage class :class:`Verification` runs the consensus fast path, then :func:`verify` over
every remaining valid draft of the chunk in one batched call.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Sequence

from ..config import RunConfig
from ..engines.engine import Engine, clean_logprob
from .prompts import Question, VerifierPrompt, encode_plain, fitted_verifier_prompt, verifier_prompt
from ..core.records import Document, Draft, ErrorReason, Flag, QueryRow, add_flag
from .base import EngineLike, Stage
from .selection import consensus

NON_FINITE = Flag.NON_FINITE_LOGPROB
TOO_LONG = Flag.VERIFIER_INPUT_TOO_LONG
DOCUMENTS_CUT = Flag.VERIFIER_DOCUMENTS_TRUNCATED
SELF_REFLECTION_MODES = ("paper", "contrast")


def _sum(logprobs: Sequence[float | None], positions: range) -> tuple[float, bool]:
    """(Sum of the cleaned log-probs at ``positions``, whether any was not finite)."""
    total, bad = 0.0, False
    for position in positions:
        value, non_finite = clean_logprob(logprobs[position])
        total += value
        bad |= non_finite
    return total, bad


def word_token_ids(tokenizer, word: str) -> set[int]:
    """Ids of the tokenizer's single-token spellings of ``word``: lower, Capitalised and
    UPPER case, each with and without a leading space (spellings that take several tokens
    are left out). ``tokenizer``: a Hugging Face tokenizer (encoded with
    :func:`~specrag_batch.stages.prompts.encode_plain`). May be empty: then no probability mass is
    found for the word and :func:`reflection_scores` gives no score."""
    ids = set()
    for w in {word.lower(), word.capitalize(), word.upper()}:
        for pre in ("", " "):
            t = encode_plain(tokenizer, pre + w)
            if len(t) == 1:
                ids.add(t[0])
    return ids


def _logsumexp(xs: Sequence[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def _check_mode(mode: str) -> None:
    if mode not in SELF_REFLECTION_MODES:
        raise ValueError(f"selection.self_reflection must be one of {SELF_REFLECTION_MODES}, got {mode!r}")


def self_reflection_score(logprob_yes: float | None, logprob_no: float | None, mode: str) -> float | None:
    """log ρ_SR of one draft from the verifier's log P(Yes) and log P(No) after R (paper §3.3,
    self-reflection score; natural log-probs in, a natural log-prob out).

    ``paper``: log ρ_SR = log P(Yes), the paper's term. ``contrast``: log ρ_SR =
    log P(Yes) / (P(Yes) + P(No)) = log P(Yes) - logsumexp(log P(Yes), log P(No)), in (-inf, 0].
    The stored ``Draft.logprob_yes`` / ``logprob_no`` give either variant after a run.

    Returns None when either log-prob is None (the verifier gives both or neither: the draft
    was not verified, or the next token's log-probs were unavailable); selection then ranks
    the draft after every fully scored draft (:func:`specrag_batch.stages.selection.select`).

    Raises:
        ValueError: ``mode`` not in :data:`SELF_REFLECTION_MODES`.
    """
    _check_mode(mode)
    if logprob_yes is None or logprob_no is None:
        return None
    return logprob_yes if mode == "paper" else logprob_yes - _logsumexp([logprob_yes, logprob_no])


def reflection_scores(next_logprobs: dict[int, float], yes_ids: set[int], no_ids: set[int],
                      mode: str) -> tuple[float | None, float | None, float | None, list[str]]:
    """(log ρ_SR, log P(Yes), log P(No), flags) from the next token's log-probs of the yes/no
    spellings (paper §3.3, self-reflection).

    Args:
        next_logprobs: token id -> natural log P(token | [Q, α, β, R]) for (at least) every id
            of ``yes_ids`` and ``no_ids``, as the engine's ``prompt_and_next_logprobs`` reads
            them.
        yes_ids, no_ids: :func:`word_token_ids` of "yes" and "no".
        mode: ``paper`` (log P(Yes)) or ``contrast`` (log P(Yes)/(P(Yes)+P(No))).

    log P(Yes) = logsumexp of the yes ids' log-probs (P(No) likewise). A word with no id, or an
    id the engine gave no log-prob for: all None, flag ``self_reflection_unavailable``. A word
    whose every log-prob is not finite (probability 0) takes
    :data:`~specrag_batch.engines.engine.NON_FINITE_FLOOR`, flag ``non_finite_logprob``.

    Raises:
        ValueError: unknown ``mode``.
    """
    _check_mode(mode)
    out, flags = [], []
    for ids in (yes_ids, no_ids):
        values = [next_logprobs.get(t) for t in ids]
        if not values or any(v is None for v in values):
            return None, None, None, [Flag.SELF_REFLECTION_UNAVAILABLE]
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            out.append(_logsumexp(finite))
        else:
            out.append(clean_logprob(None)[0])
            flags.append(NON_FINITE)
    lp_yes, lp_no = out
    return self_reflection_score(lp_yes, lp_no, mode), lp_yes, lp_no, sorted(set(flags))


def prompt_scores(prompt: VerifierPrompt, prompt_logprobs: Sequence[float | None], next_logprobs: dict[int, float],
                  yes_ids: set[int], no_ids: set[int], mode: str
                  ) -> tuple[float, float, float | None, float | None, float | None, list[str]]:
    """The verifier's terms from one forward pass over ``prompt`` (paper §3.3; natural log):
    (log-prob of α's tokens, log-prob of β's tokens, log ρ_SR, log P(Yes), log P(No), flags).
    The two sums are over ``prompt.answer_tokens`` / ``prompt.rationale_tokens``, each token
    given everything before it, so their sum is log ρ_SC = log P(α, β | Q) in either order
    of :data:`~specrag_batch.stages.prompts.VERIFIER_ORDERS`. Flags: :func:`reflection_scores`'s,
    plus ``non_finite_logprob`` when a summed log-prob was not finite (cleaned as
    :func:`~specrag_batch.engines.engine.clean_logprob` does).

    Args:
        prompt_logprobs: per prompt token, its log-prob (None at position 0), as the engine's
            ``prompt_and_next_logprobs`` returns it; next_logprobs: the next token's log-probs
            of the yes/no ids.

    Raises:
        ValueError: unknown ``mode``."""
    answer_logprob, answer_bad = _sum(prompt_logprobs, prompt.answer_tokens)
    rationale_logprob, rationale_bad = _sum(prompt_logprobs, prompt.rationale_tokens)
    sr, lp_yes, lp_no, flags = reflection_scores(next_logprobs, yes_ids, no_ids, mode)
    flags += [NON_FINITE] if answer_bad or rationale_bad else []
    return answer_logprob, rationale_logprob, sr, lp_yes, lp_no, flags


def verify(engine: Engine, items: Sequence[tuple[Hashable, Question, Draft]], reflection_question: str,
           max_prompt_tokens: int, mode: str = "paper", desc: str = "verification", *,
           deduplicate: bool = False, saved: dict[Hashable, int] | None = None,
           documents: Sequence[Sequence[Document]] | None = None, doc_budget: int = 256) -> dict[Hashable, str]:
    """Fill each draft's verifier scores in place (paper §3.3; natural log-probs):
    ``score_self_consistency`` (log ρ_SC, the summed log-probs of α's and β's tokens given Q),
    ``score_self_reflection`` (log ρ_SR after R), ``logprob_yes``/``logprob_no`` and the
    token counts ``tokens_answer``/``tokens_rationale`` (verifier tokens). One forward pass
    per draft over [Q, α, β, R] and the template's assistant opening
    (:func:`~specrag_batch.stages.prompts.verifier_prompt`): its prompt log-probs give log ρ_SC and
    the next token's log-probs of the yes/no spellings give log ρ_SR. Without ``documents`` the
    verifier reads no document (§3.3); with them, over [Q, δ_j, α, β, R] (the paper's verification ablation,
    Score(α|Q,β,δ)), log ρ_SC is still the sum over α's and β's tokens only, now given Q and δ_j.

    Args:
        engine: the verifier engine (its tokenizer renders the prompts).
        items: (row key, question, draft); all scored in one batched engine call.
        reflection_question: R, the self-reflection statement asked after the draft.
        max_prompt_tokens: the verifier's context, tokens; a longer input gets flag
            ``verifier_input_too_long`` and null verifier scores instead of failing the batch
            (selection then ranks it after every fully scored draft).
        mode: self-reflection variant, ``paper`` | ``contrast`` (module docstring).
        desc: progress-bar label.
        deduplicate: ``verifier.deduplicate_drafts``: drafts of one row key whose verifier
            inputs have the same token ids (same Q, α as written, β and R) share one forward
            pass, and each gets the same scores, token counts and verifier flags (the inputs
            are identical, so are the scores a pass of their own would give, up to the
            engine's batch-dependent low digits). Only within a row key: across rows the
            question differs (a repeated question in two rows is scored twice). This
            product's optimisation, not the paper's. Drafts over ``max_prompt_tokens`` are
            flagged each, as without it.
        saved: when given, filled with row key -> forward passes saved by ``deduplicate``
            (drafts scored from another draft's pass; 0 for a scored row with none), for the
            row keys whose drafts were scored (not the rows of the returned errors).
        documents: ``verifier.evidence_aware``: per item (same length and order as ``items``)
            the draft's own documents δ_j (:func:`draft_documents`), placed after Q
            (:func:`~specrag_batch.stages.prompts.fitted_verifier_prompt`): each document's text cut to
            ``doc_budget`` verifier tokens, the budget shrunk until the input fits
            ``max_prompt_tokens`` (never α or β; flag ``verifier_documents_truncated`` on a
            scored draft whose documents were cut). The documents are part of the input, so
            ``deduplicate`` shares a pass only between drafts of the same documents. None
            (default): [Q, α, β, R].
        doc_budget: per-document budget, verifier tokens (``retrieval.max_doc_tokens``); read
            only with ``documents``.

    Returns:
        row key -> error message for rows where building a verifier input raised; those rows'
        drafts are not scored (the caller turns the message into the row's ``error``).

    Raises:
        ValueError: unknown ``mode`` (checked before any work, even with no items), or
            ``documents`` not one entry per item.
    """
    _check_mode(mode)
    if documents is not None and len(documents) != len(items):
        raise ValueError(f"documents: {len(documents)} entries for {len(items)} verifier items")
    if not items:  # nothing to score: the engine is not touched (a lazy one stays unstarted)
        return {}
    tokenizer = engine.tokenizer
    yes_ids, no_ids = word_token_ids(tokenizer, "yes"), word_token_ids(tokenizer, "no")
    prompts, groups, errors = [], [], {}  # groups[i]: (row key, drafts scored by prompts[i])
    first: dict[tuple, int] = {}  # (row key, prompt token ids) -> index in prompts (deduplicate)
    cut_prompts: set[int] = set()  # indices in prompts whose documents were cut
    for i, (key, question, draft) in enumerate(items):
        if key in errors:
            continue
        try:
            answer, cut = draft.written_answer or draft.answer, False
            if documents is None:
                prompt = verifier_prompt(tokenizer, question, answer, draft.rationale, reflection_question)
            else:
                prompt, cut = fitted_verifier_prompt(tokenizer, question, answer, draft.rationale,
                                                     reflection_question, documents[i], doc_budget,
                                                     max_prompt_tokens)
        except Exception as e:  # one row's bad input must not fail the batch
            errors[key] = f"building the verifier input failed: {type(e).__name__}: {e}"
            continue
        if len(prompt.token_ids) > max_prompt_tokens:
            add_flag(draft.flags, TOO_LONG)
            continue
        if deduplicate:
            ident = (key, tuple(prompt.token_ids))
            if ident in first:
                groups[first[ident]][1].append(draft)
                continue
            first[ident] = len(prompts)
        if cut:
            cut_prompts.add(len(prompts))
        prompts.append(prompt)
        groups.append((key, [draft]))
    outputs = engine.prompt_and_next_logprobs([p.token_ids for p in prompts], sorted(yes_ids | no_ids), desc=desc)
    for j, (prompt, (key, drafts), (prompt_logprobs, next_logprobs)) in enumerate(zip(prompts, groups, outputs)):
        if key in errors:
            continue
        answer_logprob, rationale_logprob, sr, lp_yes, lp_no, flags = prompt_scores(
            prompt, prompt_logprobs, next_logprobs, yes_ids, no_ids, mode)
        flags += [DOCUMENTS_CUT] if j in cut_prompts else []
        for draft in drafts:
            draft.score_self_consistency = answer_logprob + rationale_logprob
            draft.tokens_answer, draft.tokens_rationale = len(prompt.answer_tokens), len(prompt.rationale_tokens)
            draft.score_self_reflection, draft.logprob_yes, draft.logprob_no = sr, lp_yes, lp_no
            for flag in flags:
                add_flag(draft.flags, flag)
        if saved is not None:
            saved[key] = saved.get(key, 0) + len(drafts) - 1
    return errors



def question(row: QueryRow, config: RunConfig) -> Question:
    """The question block Q of ``row`` as the verifier sees it."""
    return Question(row.task, row.query, tuple(row.choices) if row.choices is not None else None,
                    tuple(config.claim_labels))


def draft_documents(row: QueryRow) -> list[list[Document]]:
    """Per draft of ``row`` (same order), the documents δ_j it was drafted from: its subset
    ``row.subsets[j]`` (indices into ``row.top_documents``; paper §3.2), the k documents of
    that draft, not the row's N. Drafting writes one draft per subset in subset order (adaptive
    drafting too: its rounds take the subsets in order), so draft j is subset j; each draft's
    ``doc_ids`` is checked against its subset's.

    Raises:
        ValueError: the row has no ``top_documents``/``subsets``, more drafts than subsets, or a
            draft whose ``doc_ids`` are not its subset's documents (the message names the draft)."""
    if row.top_documents is None or row.subsets is None:
        raise ValueError("the row's documents or subsets are missing (needed by verifier.evidence_aware)")
    if len(row.drafts or []) > len(row.subsets):
        raise ValueError(f"{len(row.drafts)} drafts for {len(row.subsets)} document subsets")
    out = []
    for j, (draft, subset) in enumerate(zip(row.drafts or [], row.subsets)):
        documents = [row.top_documents[i] for i in subset]
        if [d.doc_id for d in documents] != list(draft.doc_ids):
            raise ValueError(f"draft {j}'s doc_ids {list(draft.doc_ids)} are not those of subset {j} "
                             f"{[d.doc_id for d in documents]}")
        out.append(documents)
    return out


class Verification(Stage):
    """``consensus``: indices of the valid drafts agreeing on one answer when at least c' of
    them do (``consensus_threshold``; [] otherwise); those rows skip the verifier. Other rows'
    valid drafts get ``score_self_consistency`` = log ρ_SC = log P(α, β | Q) and
    ``score_self_reflection`` = log ρ_SR (paper §3.3; nats;
    :func:`specrag_batch.stages.verification.verify`) within ``verifier.max_model_len - 1`` tokens.
    With no verifier, or both verifier terms switched off, only ``consensus`` is set.
    ``verifier.deduplicate_drafts``: a row's drafts with the same verifier input share one
    forward pass; ``verifier_drafts_deduplicated`` counts the passes saved per scored row.
    ``verifier.evidence_aware`` (:attr:`RunConfig.verifier_reads_documents`): each draft is
    scored with its own documents after Q (the paper's verification ablation, Score(α|Q,β,δ); log ρ_SC = log P(α, β |
    Q, δ_j)), so the stage also reads ``top_documents`` and ``subsets``; a row whose drafts
    cannot be matched to their subsets (:func:`draft_documents`) gets an error."""

    name = timer_name = "verification"
    reads = ("task", "query", "choices", "drafts")
    writes = ("consensus", "drafts.score_self_consistency", "drafts.score_self_reflection",
              "drafts.logprob_yes", "drafts.logprob_no", "drafts.tokens_answer", "drafts.tokens_rationale",
              "verifier_drafts_deduplicated")

    def __init__(self, config: RunConfig, *, verifier: EngineLike | None):
        self.config, self.verifier = config, verifier
        self.evidence = config.verifier_reads_documents
        if self.evidence:
            self.reads = (*type(self).reads, "top_documents", "subsets")

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        config, selection = self.config, self.config.selection
        active = [row for row in rows if row.error is None and row.drafts is not None]
        for row in active:
            row.consensus = consensus(row.drafts, config.consensus_threshold) or []
        if self.verifier is None or not (selection.use_self_consistency or selection.use_self_reflection):
            return
        items, documents = [], []
        for position, row in enumerate(rows):
            if row.error is not None or row.drafts is None or row.consensus:
                continue
            try:
                row_documents = draft_documents(row) if self.evidence else [None] * len(row.drafts)
            except ValueError as e:
                row.fail("drafts", f"building the verifier input failed: {e}", code=ErrorReason.VERIFIER_INPUT_FAILED)
                continue
            for draft, draft_docs in zip(row.drafts, row_documents):
                if draft.valid:
                    items.append((position, question(row, config), draft))
                    documents.append(draft_docs)
        dedupe, saved = config.verifier.deduplicate_drafts, {}
        errors = verify(self.verifier, items, config.reflection_question,
                        config.verifier.max_model_len - 1, mode=selection.self_reflection,
                        deduplicate=dedupe, saved=saved, documents=documents if self.evidence else None,
                        doc_budget=config.retrieval.max_doc_tokens)
        for position, message in errors.items():
            rows[position].fail("drafts", message, code=ErrorReason.VERIFIER_INPUT_FAILED)
        for position, n in saved.items() if dedupe else ():
            rows[position].verifier_drafts_deduplicated = n
