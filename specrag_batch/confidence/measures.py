"""A calibrated confidence: the probability that a row's selected answer is right, from signals
of the row's drafts (issue 39 item 2; not in the paper, which ranks drafts by ρ and leaves the
use of a low score open, §3.3).

Each signal is one float per row, read from the row's drafts (their answers and log ρ terms,
natural log) and its selection only, so the same numbers come from the Selection stage
(:class:`~specrag_batch.core.records.Draft` objects, selected index) and from an output row
(``drafts`` records, the row's ``answer`` and ``score``):

=====================  ==========================================================================
feature                meaning (unit)
=====================  ==========================================================================
``score``              log ρ of the selected draft (nats; the fast path: log ρ_draft)
``score_draft``        its log ρ_draft (nats)
``score_self_consistency``, ``score_self_reflection``   its log ρ_SC, log ρ_SR (nats; NaN when off)
``draft_per_token``    log ρ_draft / ``tokens_draft`` (nats per drafter token)
``tokens_draft``       drafter tokens of the selected β+α (count)
``agreement``          share of the answered drafts whose :func:`answer_key` is the selected one's
``vote_share``         Σ ρ over those drafts / Σ ρ over all answered drafts (softmax of log ρ, [0, 1])
``margin``             log ρ of the best draft minus that of the second best (nats; 0 with one)
``distinct_answers``   answer keys among the answered drafts (count)
``drafts``             answered drafts (count)
``fast_path``          1 when the row took the consensus fast path, else 0
``answer_words``       words of the selected answer α (count; a sentence instead of a label or a
                       short answer is a wrong answer's sign)
=====================  ==========================================================================

A *model* (``selection.calibration.<task>``, :class:`~specrag_batch.config.CalibrationModel`)
is a logistic regression over some of these features: p = 1 / (1 + exp(-(b + Σ w_i x_i))),
where a NaN feature is replaced by the model's ``fill`` value (the median it was fitted on).
Fitting is :mod:`specrag_batch.confidence.fit` (scikit-learn); applying it needs numpy only.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.parsing import normalize_answer, normalize_answer_keep_articles

FEATURES = ("score", "score_draft", "score_self_consistency", "score_self_reflection",
            "draft_per_token", "tokens_draft", "agreement", "vote_share", "margin",
            "distinct_answers", "drafts", "fast_path", "answer_words")
"""Every feature :func:`features` computes, in the order of its output."""


def answer_key(answer: str) -> str:
    """The key drafts are grouped by (``selection.rule: answer_vote``, the consensus, the
    agreement features): the SQuAD-normalised answer
    (:func:`~specrag_batch.core.parsing.normalize_answer`, the paper's ``match`` normalisation),
    or, when that is empty (``"A"``, ``"The"``), the same text with its articles kept, so
    such answers do not all fall into one group."""
    return normalize_answer(answer) or normalize_answer_keep_articles(answer)


def _get(d: Any, name: str) -> Any:
    return d.get(name) if isinstance(d, Mapping) else getattr(d, name, None)


def _num(v: Any) -> float:
    """``v`` as a float, NaN for None or a non-finite value."""
    return float(v) if v is not None and math.isfinite(float(v)) else math.nan


def selected_index(drafts: Sequence[Any], answer: str | None, score: float | None) -> int | None:
    """Index of the draft an output row selected (the output keeps its ``answer`` and
    ``score``, not its index): the first draft with that answer and score (scores equal to
    1e-9 nats), else the first with that answer; None when no draft has it."""
    if answer is None:
        return None
    same = [i for i, d in enumerate(drafts) if _get(d, "answer") == answer]
    for i in same:
        s = _get(drafts[i], "score")
        if score is None and s is None or (score is not None and s is not None and abs(s - score) <= 1e-9):
            return i
    return same[0] if same else None


def features(drafts: Sequence[Any], index: int | None, fast_path: bool) -> np.ndarray:
    """The :data:`FEATURES` of one row.

    Args:
        drafts: the row's drafts (:class:`~specrag_batch.core.records.Draft` or output draft
            records), their ``score`` (log ρ) already set by selection.
        index: the selected draft (None: no draft was selected).
        fast_path: the row took the consensus fast path.

    Returns:
        float64 array, shape (len(FEATURES),); NaN where a value does not exist (a term that
        is off, no selected draft)."""
    out = np.full(len(FEATURES), np.nan)
    if index is None or not drafts:
        return out
    sel = drafts[index]
    keys = [answer_key(a) if isinstance(a := _get(d, "answer"), str) and a.strip() else None for d in drafts]
    answered = [i for i, k in enumerate(keys) if k]
    scores = np.array([_num(_get(drafts[i], "score")) for i in answered])
    tokens = _get(sel, "tokens_draft")
    own = [j for j, i in enumerate(answered) if keys[i] == keys[index]] if keys[index] else []
    finite = np.isfinite(scores)
    if finite.any() and own:
        w = np.exp(scores[finite] - scores[finite].max())
        mine = np.isin(np.flatnonzero(finite), own)
        vote = float(w[mine].sum() / w.sum())
    else:
        vote = math.nan
    top = np.sort(scores[finite])[::-1]
    draft = _num(_get(sel, "score_draft"))
    values = {
        "score": _num(_get(sel, "score")), "score_draft": draft,
        "score_self_consistency": _num(_get(sel, "score_self_consistency")),
        "score_self_reflection": _num(_get(sel, "score_self_reflection")),
        "draft_per_token": draft / tokens if tokens else math.nan,
        "tokens_draft": _num(tokens), "agreement": len(own) / len(answered) if answered else math.nan,
        "vote_share": vote, "margin": float(top[0] - top[1]) if len(top) > 1 else (0.0 if len(top) else math.nan),
        "distinct_answers": float(len({keys[i] for i in answered})), "drafts": float(len(answered)),
        "fast_path": float(bool(fast_path)),
        "answer_words": float(len(a.split())) if isinstance(a := _get(sel, "answer"), str) else math.nan}
    return np.array([values[name] for name in FEATURES])


def row_features(row: Mapping[str, Any]) -> np.ndarray:
    """:func:`features` of an output row (``drafts``, ``answer``, ``score``, ``fast_path``)."""
    drafts = row.get("drafts") or []
    return features(drafts, selected_index(drafts, row.get("answer"), row.get("score")),
                    bool(row.get("fast_path")))


def probability(x: np.ndarray, names: Sequence[str], coefficients: Sequence[float], intercept: float,
                fill: Sequence[float]) -> np.ndarray:
    """The model's probability of being right for rows ``x``.

    Args:
        x: float array (rows, len(FEATURES)) or (len(FEATURES),) from :func:`features`.
        names: the model's features (a subset of :data:`FEATURES`, in its order).
        coefficients, fill: one per name: weight (per unit of the feature) and the value a
            NaN feature takes.
        intercept: the bias b (log-odds).

    Returns:
        float array (rows,) (or a 0-d array for one row) of probabilities in [0, 1]."""
    x = np.asarray(x, dtype=float)
    cols = [FEATURES.index(n) for n in names]
    sub = x[..., cols]
    sub = np.where(np.isfinite(sub), sub, np.asarray(fill, dtype=float))
    z = sub @ np.asarray(coefficients, dtype=float) + float(intercept)
    return 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))
