"""Stage 5: combine draft scores and select the answer (paper §3.3).

The paper ranks drafts by ρ_j = ρ_Draft,j · ρ_SC,j · ρ_SR,j and returns the argmax. Products
of token probabilities underflow, so everything here is in natural-log space:
log ρ_j = log ρ_draft + log ρ_SC + log ρ_SR, each term switchable for ablations (Table 3).
Besides the paper's argmax, :data:`RULES` holds this product's two extensions (answer vote,
length-normalised ranking; ``selection.rule``).

The stage class :class:`Selection` applies :func:`select` to every row of a chunk.
"""

from __future__ import annotations

import math
import dataclasses
from collections import Counter
from typing import Sequence

import numpy as np

from ..config import RunConfig
from ..confidence.measures import answer_key, features, probability
from ..core.labels import LABEL_TASKS, argmax, batch_prior, canonical_answer, correct, mixture
from ..core.records import Draft, Flag, QueryRow, SelectedAnswer, add_flag
from .base import Stage
from .sampling import row_seed


MISSING = {"draft": Flag.MISSING_SCORE_DRAFT, "self_consistency": Flag.MISSING_SCORE_SELF_CONSISTENCY,
           "self_reflection": Flag.MISSING_SCORE_SELF_REFLECTION}
"""Draft flag per enabled score term that could not be computed (e.g. the verifier input was
too long); such a draft ranks after every fully scored draft."""


CONFIDENCE = ("score", "mean_logprob")
"""Measures :func:`select` compares with ``tau_min`` (``selection.confidence``)."""

RULES = ("argmax", "answer_vote", "length_normalised")
"""Selection rules of :func:`select` (``selection.rule``): ``argmax`` is the paper's (§3.3);
``answer_vote`` and ``length_normalised`` are this product's extensions, not the paper's."""


def _terms(draft: Draft, use_draft: bool, use_sc: bool, use_sr: bool) -> list[tuple[str, float | None]]:
    """(term name, its log-prob or None) of each enabled term of log ρ."""
    return [(name, value) for name, enabled, value in (
        ("draft", use_draft, draft.score_draft),
        ("self_consistency", use_sc, draft.score_self_consistency),
        ("self_reflection", use_sr, draft.score_self_reflection)) if enabled]


def combine(d: Draft, use_draft: bool, use_sc: bool, use_sr: bool) -> float | None:
    """log ρ = Σ of the enabled log terms (paper §3.3: ρ = ρ_Draft·ρ_SC·ρ_SR in log space).

    Args:
        d: a draft whose ``score_draft``, ``score_self_consistency`` and
            ``score_self_reflection`` are natural-log probabilities (or None).
        use_draft, use_sc, use_sr: include log ρ_draft, log ρ_SC, log ρ_SR (the Table 3
            ablations switch them off).

    Returns:
        log ρ in nats (≤ 0 for the paper's terms); 0.0 when no term is enabled; None when an
        enabled term is missing (never counts it as probability 1)."""
    terms = _terms(d, use_draft, use_sc, use_sr)
    if any(v is None for _, v in terms):
        return None
    return float(sum(v for _, v in terms))


def mean_logprob(d: Draft, use_draft: bool, use_sc: bool, use_sr: bool) -> float | None:
    """Length-normalised confidence: each enabled term of log ρ divided by the tokens behind
    it, in nats per token: log ρ_draft / ``tokens_draft`` (drafter tokens of β+α) +
    log ρ_SC / (``tokens_answer`` + ``tokens_rationale``) (verifier tokens of α and β) +
    log ρ_SR (one position). Unlike log ρ (paper §3.3) it does not fall with the length of
    α and β, so one threshold fits short and long drafts.

    Returns None when an enabled term or its token count is missing (or zero)."""
    total = 0.0
    for name, value in _terms(d, use_draft, use_sc, use_sr):
        tokens = {"draft": d.tokens_draft, "self_reflection": 1,
                  "self_consistency": (d.tokens_answer or 0) + (d.tokens_rationale or 0)}[name]
        if value is None or not tokens:
            return None
        total += value / tokens
    return float(total)


def _rule_keys(drafts: list[Draft], pool: list[int], rule: str, use_draft: bool, use_sc: bool,
               use_sr: bool) -> dict[int, tuple[float, ...]]:
    """Ranking key (higher is better) under ``rule`` of each draft of ``pool`` that has every
    enabled term (``score`` not None); drafts left out rank after these in :func:`select`.

    argmax: (log ρ,). length_normalised: (has a per-token measure, :func:`mean_logprob` if so,
    else log ρ). answer_vote: (log Σ ρ over the fully scored drafts of ``pool`` in the draft's
    :func:`answer_key` group (natural log, ``numpy.logaddexp.reduce``), log ρ)."""
    scored = [i for i in pool if drafts[i].score is not None]
    if rule == "length_normalised":
        per_token = {i: mean_logprob(drafts[i], use_draft, use_sc, use_sr) for i in scored}
        return {i: (float(m is not None), drafts[i].score if m is None else m) for i, m in per_token.items()}
    if rule == "answer_vote":
        groups: dict[str, list[int]] = {}
        for i in scored:
            groups.setdefault(answer_key(drafts[i].answer), []).append(i)
        mass = {k: float(np.logaddexp.reduce([drafts[i].score for i in g])) for k, g in groups.items()}
        return {i: (mass[k], drafts[i].score) for k, g in groups.items() for i in g}
    return {i: (drafts[i].score,) for i in scored}


def consensus_threshold(c: int | None, n_valid: int) -> int | None:
    """The consensus rule: c' = max(2, min(c, number of valid drafts)); None when off (c None
    or 0) or when fewer than 2 drafts are valid (one draft is not a consensus).

    The consensus fast path is this product's shortcut, not the paper's (§3.3 verifies every
    draft).

    Args:
        c: ``selection.consensus_min`` (a number of drafts; see
            :attr:`specrag_batch.config.RunConfig.consensus_threshold`).
        n_valid: valid drafts of the row."""
    if not c or n_valid < 2:
        return None
    return max(2, min(c, n_valid))


def consensus(drafts: list[Draft], c: int | None) -> list[int] | None:
    """Indices of the valid drafts sharing the most common normalised answer, when at least
    c' of them agree, c' = :func:`consensus_threshold` (the fast path, this product's
    shortcut, not in the paper); otherwise None.

    Answers are compared by :func:`answer_key`, the key ``answer_vote`` groups by: the
    SQuAD-normalised answer, or the answer with its articles kept when that is empty, so two
    drafts answering ``"The"`` agree (with :func:`~specrag_batch.core.parsing.normalize_answer`
    alone such drafts counted towards the valid drafts but agreed with none). A draft whose
    key is still empty agrees with no other. Between answers with equal counts the one seen
    first wins.

    Returns:
        ascending indices into ``drafts`` (at least c' of them), or None."""
    keys = [answer_key(d.answer) if d.valid else None for d in drafts]
    need = consensus_threshold(c, sum(1 for d in drafts if d.valid))
    counts = Counter(k for k in keys if k)
    if need is None or not counts:
        return None
    key, n = counts.most_common(1)[0]
    if n < need:
        return None
    return [i for i, k in enumerate(keys) if k == key]


def select(drafts: list[Draft], *, use_draft: bool = True, use_sc: bool = True, use_sr: bool = True,
           tau_min: float | None = None, fast_path: list[int] | None = None,
           random_seed: int | None = None, confidence: str = "score", rule: str = "argmax") -> SelectedAnswer:
    """Pick a draft among the valid drafts by ``rule`` (default: the highest log ρ, paper §3.3;
    ties: first).

    Args:
        drafts: the row's drafts; their ``score`` is filled in here.
        fast_path: indices from :func:`consensus`; the verifier was skipped and the argmax of
            the draft score log ρ_draft among them is taken (a draft without one ranks last);
            every draft's ``score`` becomes its log ρ_draft (None when ``use_draft`` is
            False); never flagged low-confidence, ``tau_min`` is not applied.
        random_seed: when set, the ablation "random selection": a uniformly random valid draft.
        tau_min: low-confidence threshold on the selected draft's ``confidence``: its log ρ
            in nats (``"score"``) or :func:`mean_logprob` in nats per token
            (``"mean_logprob"``); a confidence below it, None or not finite flags the row.
        confidence: ``"score"`` or ``"mean_logprob"`` (:data:`CONFIDENCE`).
        rule: how the fully scored valid drafts are ranked (:data:`RULES`), log ρ in natural log:

            * ``"argmax"`` (paper §3.3): the highest log ρ_j.
            * ``"answer_vote"`` (this product's extension): drafts are grouped by
              :func:`answer_key`; a group's weight is log Σ_{j in group} ρ_j (logsumexp of
              their log ρ: the probability mass the verifier's score puts on that answer);
              the heaviest group wins (ties: the group holding the higher log ρ, then the
              first draft), and its draft with the highest log ρ is returned, so a rationale
              comes with the answer.
            * ``"length_normalised"`` (this product's extension): the highest
              :func:`mean_logprob` (each term per token, nats per token), which does not fall
              with the length of α and β; a fully scored draft without token counts ranks
              after those with one, by log ρ.

            Under every rule the returned ``score`` stays the selected draft's log ρ (so
            ``tau_min`` and its calibration keep their meaning), drafts missing an enabled
            term rank after the fully scored ones as under argmax, the fast path and random
            selection ignore the rule, and when no draft is valid the best invalid draft by
            log ρ is returned.

    Returns:
        :class:`~specrag_batch.core.records.SelectedAnswer`; index None only when there are no drafts. When no draft is valid
        the best invalid one is returned with flag ``no_valid_draft`` and low confidence. A
        valid draft missing an enabled term gets flag ``missing_score_<term>``, score None and
        ranks after every fully scored draft; if it is still selected (no draft has every
        term) the row gets ``selected_draft_missing_score`` and low confidence.

    Raises:
        ValueError: ``confidence`` is not one of :data:`CONFIDENCE`, or ``rule`` not one of
            :data:`RULES`.
    """
    if confidence not in CONFIDENCE:
        raise ValueError(f"confidence must be one of {CONFIDENCE}, got {confidence!r}")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if not drafts:
        return SelectedAnswer(None, None, True, False, [Flag.NO_DRAFTS])
    flags: list[str] = []
    if fast_path:
        # the verifier was skipped on purpose: log ρ is the draft score alone; a draft without
        # one ranks after those that have it (never as probability 1), ties: first
        for draft in drafts:
            draft.score = draft.score_draft if use_draft else None
        best = max(fast_path, key=lambda i: (drafts[i].score_draft is not None,
                                             drafts[i].score_draft or 0.0, -i))
        return SelectedAnswer(best, drafts[best].score, False, True, flags)
    partial: dict[int, float] = {}
    for i, draft in enumerate(drafts):
        draft.score = combine(draft, use_draft, use_sc, use_sr)
        terms = _terms(draft, use_draft, use_sc, use_sr)
        for name, value in terms:
            if value is None and draft.valid:
                add_flag(draft.flags, MISSING[name])
        partial[i] = float(sum(value for _, value in terms if value is not None))
    pool = [i for i, draft in enumerate(drafts) if draft.valid]
    if not pool:
        pool = list(range(len(drafts)))
        flags.append(Flag.NO_VALID_DRAFT)
        rule = "argmax"
    if random_seed is not None:
        best = int(np.random.default_rng(random_seed).choice(pool))
    else:
        # fully scored drafts first (by the rule), then drafts missing a term (by the terms they have)
        keys = _rule_keys(drafts, pool, rule, use_draft, use_sc, use_sr)
        best = max(pool, key=lambda i: (i in keys, keys.get(i, (partial[i],)), -i))
    score = drafts[best].score
    if score is None and drafts[best].valid:
        flags.append(Flag.SELECTED_DRAFT_MISSING_SCORE)
    conf = score if confidence == "score" or score is None else \
        mean_logprob(drafts[best], use_draft, use_sc, use_sr)
    low = bool(flags) or (tau_min is not None and (conf is None or not math.isfinite(conf)
                                                   or conf < tau_min))
    return SelectedAnswer(best, score, low, False, flags)



def calibrated(drafts: list[Draft], selected: SelectedAnswer, model, tau_min: float | None) -> SelectedAnswer:
    """``selected`` with its ``confidence``: the probability of being right of ``model`` (a
    :class:`~specrag_batch.config.CalibrationModel`, :mod:`specrag_batch.confidence.measures`) from
    the row's drafts (their ``score`` set) and the selection, fast path included; the row is
    ``low_confidence`` when it has a forcing flag (no valid or fully scored draft) or its
    probability is below ``tau_min`` (in [0, 1]). No model or no selected draft: unchanged
    (confidence None, flagged only by its flags)."""
    if model is None or selected.index is None:
        return selected
    p = float(probability(features(drafts, selected.index, selected.fast_path), model.features,
                          model.coefficients, model.intercept, model.fill))
    return dataclasses.replace(selected, confidence=p,
                               low_confidence=bool(selected.flags) or (tau_min is not None and p < tau_min))


def label_selections(rows: Sequence[QueryRow], prior: str, tau_min, measure: str) -> None:
    """Answer the chunk's ``claim``/``choice`` rows from their label distribution
    (``selection.label_distribution``; :mod:`specrag_batch.core.labels`, issue 50, not in the paper):
    the mixture of the drafts' ``label_logprobs``, divided by the mean mixture of the chunk's
    rows of the same task and renormalised when ``prior`` is ``"batch"`` (contextual
    calibration, Zhao et al. 2021). The row's ``selection`` gets ``answer`` (the argmax label,
    canonical), ``label_distribution``, ``label_probability``; its ``index`` moves to the
    best-scored valid draft with that answer when the selected one has another (kept when
    none has it). Under ``measure`` ``"label_probability"`` the row is ``low_confidence`` when
    it has a forcing flag or its probability is below ``tau_min(task)`` (in [0, 1]).
    A row without a selection or any draft distribution is left as it is."""
    mixtures = {i: mixture([d.label_logprobs for d in row.drafts or []]) for i, row in enumerate(rows)
                if row.error is None and row.selection is not None and row.task in LABEL_TASKS}
    priors = {task: batch_prior([m for i, m in mixtures.items() if rows[i].task == task])
              for task in LABEL_TASKS} if prior == "batch" else {}
    for i, dist in mixtures.items():
        if dist is None:
            continue
        row, sel = rows[i], rows[i].selection
        dist = correct(dist, priors[row.task]) if row.task in priors else dist
        label, p = argmax(dist)
        answer = canonical_answer(row.task, label, row.choices)
        index = sel.index
        if index is not None and row.drafts[index].answer != answer:
            same = [j for j, d in enumerate(row.drafts) if d.valid and d.answer == answer]
            if same:
                index = max(same, key=lambda j: (row.drafts[j].score is not None, row.drafts[j].score or 0.0, -j))
        low = sel.low_confidence
        if measure == "label_probability":
            tau = tau_min(row.task)
            low = bool(sel.flags) or (tau is not None and p < tau)
        row.selection = dataclasses.replace(sel, index=index, answer=answer, label_distribution=dist,
                                            label_probability=p, low_confidence=low)


class Selection(Stage):
    """Each row's drafts get their log ρ ``score`` (natural log; ρ = ρ_draft·ρ_SC·ρ_SR, paper
    §3.3, over the enabled terms of ``selection.use_*``) and the row its
    :class:`~specrag_batch.core.records.SelectedAnswer` (the paper's argmax, or this product's
    ``selection.rule`` extensions: answer vote, length-normalised), flagged low-confidence
    below the row task's ``selection.tau_min`` (:meth:`SelectionConfig.tau_for`;
    :func:`specrag_batch.stages.selection.select`), or, under ``selection.confidence:
    calibrated``, its probability of being right below it (:func:`calibrated`). Under
    ``selection.label_distribution`` claim and choice rows then take their answer from their
    label distribution (:func:`label_selections`).

    Args:
        config: the run's configuration.
        standard: Standard RAG's one draft per row: log ρ is its draft score alone, no
            consensus, no random selection, no ``selection.rule``.
    """

    name = timer_name = "selection"
    writes = ("drafts.score", "selection")

    def __init__(self, config: RunConfig, *, standard: bool = False):
        self.config, self.standard = config, standard
        self.reads = ("query_id", "task", "drafts") + (() if standard else ("consensus",)) + (
            ("choices",) if config.selection.label_distribution else ())

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        config, selection = self.config, self.config.selection
        model_of = (selection.calibration or {}).get if selection.confidence == "calibrated" else None
        on_probability = model_of or selection.confidence == "label_probability"
        measure = "score" if on_probability else selection.confidence
        for row in rows:
            if row.error is not None or row.drafts is None:
                continue
            tau_min = selection.tau_for(row.task)
            on_log = None if on_probability else tau_min  # a probability's threshold is applied below
            if self.standard:
                row.selection = select(row.drafts, use_draft=True, use_sc=False, use_sr=False,
                                       tau_min=on_log, confidence=measure)
            else:
                seed = row_seed(config.seed + 1, row.query_id) if selection.random_selection else None
                row.selection = select(row.drafts, use_draft=selection.use_draft_score,
                                       use_sc=selection.use_self_consistency,
                                       use_sr=selection.use_self_reflection, tau_min=on_log,
                                       fast_path=row.consensus, random_seed=seed,
                                       confidence=measure, rule=selection.rule)
            if model_of:
                row.selection = calibrated(row.drafts, row.selection, model_of(row.task), tau_min)
        if selection.label_distribution:
            label_selections(rows, selection.label_prior, selection.tau_for, selection.confidence)
