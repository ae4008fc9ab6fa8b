"""Stage 5: combine draft scores and select the answer (paper §3.3).

The paper ranks drafts by ρ_j = ρ_Draft,j · ρ_SC,j · ρ_SR,j and returns the argmax. Products
of token probabilities underflow, so everything here is in natural-log space:
log ρ_j = log ρ_draft + log ρ_SC + log ρ_SR, each term switchable for ablations (Table 3).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .parsing import normalize_answer


@dataclass
class Draft:
    """One (subset, draft) pair and its scores (natural-log probabilities, None = not computed).

    ``score_draft`` = log P(β|Q,δ) + log P(α|Q,δ,β) from the drafter's own tokens;
    ``score_self_consistency`` = log P(α, β | Q) under the verifier;
    ``score_self_reflection`` = log P("Yes" | Q, α, β, R) under the verifier."""

    doc_ids: list[str]
    answer: str
    rationale: str
    flags: list[str] = field(default_factory=list)
    valid: bool = True
    score_draft: float | None = None
    score_self_consistency: float | None = None
    score_self_reflection: float | None = None
    score: float | None = None


@dataclass
class Selection:
    """Outcome for one row."""

    index: int | None
    score: float | None
    low_confidence: bool
    fast_path: bool
    flags: list[str] = field(default_factory=list)


def combine(d: Draft, use_draft: bool, use_sc: bool, use_sr: bool) -> float:
    """log ρ = Σ of the enabled log terms; a missing enabled term counts as 0 (neutral)."""
    total = 0.0
    for on, v in ((use_draft, d.score_draft), (use_sc, d.score_self_consistency),
                  (use_sr, d.score_self_reflection)):
        if on and v is not None:
            total += v
    return total


def consensus(drafts: list[Draft], c: int | None) -> list[int] | None:
    """Indices of the valid drafts sharing the most common normalised answer, when at least
    ``c`` of them agree (the fast path); otherwise None."""
    if not c:
        return None
    keys = [normalize_answer(d.answer) if d.valid else None for d in drafts]
    counts = Counter(k for k in keys if k)
    if not counts:
        return None
    key, n = counts.most_common(1)[0]
    if n < c:
        return None
    return [i for i, k in enumerate(keys) if k == key]


def select(drafts: list[Draft], *, use_draft: bool = True, use_sc: bool = True, use_sr: bool = True,
           tau_min: float | None = None, fast_path: list[int] | None = None,
           random_seed: int | None = None) -> Selection:
    """Pick the draft with the highest log ρ among valid drafts (ties: first).

    Args:
        drafts: the row's drafts; their ``score`` is filled in here.
        fast_path: indices from :func:`consensus`; the verifier was skipped and the argmax of
            the draft score among them is taken; never flagged low-confidence.
        random_seed: when set, the ablation "random selection": a uniformly random valid draft.
        tau_min: low-confidence threshold on the selected log ρ.

    Returns:
        :class:`Selection`; index None only when there are no drafts. When no draft is valid
        the best invalid one is returned with flag ``no_valid_draft`` and low confidence.
    """
    if not drafts:
        return Selection(None, None, True, False, ["no_drafts"])
    for d in drafts:
        d.score = combine(d, use_draft, use_sc, use_sr)
    flags: list[str] = []
    if fast_path:
        best = max(fast_path, key=lambda i: (drafts[i].score_draft or 0.0, -i))
        return Selection(best, drafts[best].score, False, True, flags)
    pool = [i for i, d in enumerate(drafts) if d.valid]
    if not pool:
        pool = list(range(len(drafts)))
        flags.append("no_valid_draft")
    if random_seed is not None:
        best = int(np.random.default_rng(random_seed).choice(pool))
    else:
        best = max(pool, key=lambda i: (drafts[i].score, -i))
    score = drafts[best].score
    low = bool(flags) or (tau_min is not None and (score is None or not math.isfinite(score)
                                                   or score < tau_min))
    return Selection(best, score, low, False, flags)
