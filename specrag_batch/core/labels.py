"""Label distributions of ``claim`` and ``choice`` rows (issue 50; not in the paper, whose
drafter writes one answer α per subset, §3.2).

For a row whose answer is one of a few known strings (a claim label, an option letter) each
draft carries the drafter's log-probability of every label after its rationale β,
``log P(label | Q, δ, β)`` summed over the label's tokens (:mod:`specrag_batch.stages.label_scoring`).
This module turns those numbers into the row's answer and its probability:

* a draft's distribution: softmax of its label log-probs over the row's labels
  (:func:`normalise`): P_j(ℓ) = exp(log P_j(ℓ)) / Σ_ℓ' exp(log P_j(ℓ'));
* the row's distribution: the mixture over its drafts with equal weights (:func:`mixture`):
  P(ℓ) = (1/m') Σ_j P_j(ℓ) over the m' drafts that have one (equal weights: ρ_draft
  falls with the length of β, so weighting by it would let the shortest rationale decide);
* label-prior correction (contextual calibration, Zhao et al. 2021, "Calibrate Before Use"):
  P'(ℓ) ∝ P(ℓ) / prior(ℓ), renormalised (:func:`correct`); the prior is estimated without gold
  as the mean distribution of the rows of one chunk (:func:`batch_prior`);
* the answer is the argmax label and its probability the confidence (:func:`argmax`).

Pure functions of their inputs (numpy only); they never raise on a row's odd numbers: a
non-finite log-prob counts as probability 0.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from .parsing import option_index, option_label

LABEL_TASKS = ("claim", "choice")
"""Tasks whose answer is one of a known set of labels."""


def label_names(task: str, choices: Sequence[str] | None, claim_labels: Sequence[str]) -> list[str]:
    """The labels a row's drafter writes after ``Answer:``: the configured claim labels for a
    ``claim`` row, the option letters A, B, ... (:func:`~specrag_batch.core.parsing.option_label`)
    for a ``choice`` row; [] for any other task."""
    if task == "claim":
        return list(claim_labels)
    if task == "choice":
        return [option_label(i) for i in range(len(choices or []))]
    return []


def canonical_answer(task: str, label: str, choices: Sequence[str] | None) -> str:
    """The answer a label stands for, in the form drafts' ``answer`` holds: the claim label
    itself, or the text of the option a letter names (the letter when it names none)."""
    if task == "choice":
        i = option_index(label)
        if 0 <= i < len(choices or []):
            return choices[i]  # type: ignore[index]
    return label


def normalise(logprobs: Mapping[str, float]) -> dict[str, float]:
    """Softmax of natural-log scores over their labels (a probability per label, summing to
    1; a non-finite score gets 0; all non-finite: uniform). Order of ``logprobs`` kept."""
    finite = {k: v for k, v in logprobs.items() if v is not None and math.isfinite(v)}
    if not finite:
        return {k: 1.0 / len(logprobs) for k in logprobs} if logprobs else {}
    top = max(finite.values())
    w = {k: math.exp(finite[k] - top) if k in finite else 0.0 for k in logprobs}
    total = sum(w.values())
    return {k: v / total for k, v in w.items()}


def mixture(draft_logprobs: Sequence[Mapping[str, float] | None]) -> dict[str, float] | None:
    """The row's distribution: the equal-weight mean of its drafts' :func:`normalise`\\ d
    distributions (drafts without one, None or empty, are left out); labels in the first
    draft's order (a label some draft lacks counts 0 there). None when no draft has one."""
    dists = [normalise(d) for d in draft_logprobs if d]
    if not dists:
        return None
    labels = list(dict.fromkeys(k for d in dists for k in d))
    return {k: sum(d.get(k, 0.0) for d in dists) / len(dists) for k in labels}


def batch_prior(distributions: Sequence[Mapping[str, float] | None]) -> dict[str, float]:
    """The label prior estimated from the rows themselves (no gold): per label, the mean of its
    probability over the distributions that hold it (None entries skipped). {} for none."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for d in distributions:
        for k, v in (d or {}).items():
            sums[k] = sums.get(k, 0.0) + v
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


PRIOR_FLOOR = 1e-6
"""Least prior probability divided by (:func:`correct`): a label the drafter all but never
gives is not multiplied by more than 10⁶."""


def correct(distribution: Mapping[str, float], prior: Mapping[str, float]) -> dict[str, float]:
    """Contextual calibration (Zhao et al. 2021, Eq. 2 with W = diag(prior)⁻¹, b = 0):
    P'(ℓ) = (P(ℓ) / prior(ℓ)) / Σ_ℓ' P(ℓ') / prior(ℓ'); a label without a prior keeps a prior
    of 1 / (number of labels); priors below :data:`PRIOR_FLOOR` are raised to it."""
    n = len(distribution) or 1
    w = {k: v / max(prior.get(k, 1.0 / n), PRIOR_FLOOR) for k, v in distribution.items()}
    total = sum(w.values())
    return dict(distribution) if total <= 0 else {k: v / total for k, v in w.items()}


def argmax(distribution: Mapping[str, float]) -> tuple[str, float] | None:
    """(label, probability) of the most probable label (ties: the first); None when empty."""
    if not distribution:
        return None
    label = max(distribution, key=lambda k: distribution[k])  # max keeps the first of equals
    return label, float(distribution[label])


def per_label_recall(gold: Sequence[str], answers: Sequence[str | None]) -> dict[str, tuple[float, int]]:
    """Recall per gold label: label -> (share of rows with that gold whose answer is it, rows
    with that gold), labels sorted. ``gold`` and ``answers`` are aligned per row (canonical
    forms; an answer None is wrong)."""
    out: dict[str, tuple[float, int]] = {}
    for label in sorted(set(gold)):
        rows = [a for g, a in zip(gold, answers) if g == label]
        out[label] = (sum(a == label for a in rows) / len(rows), len(rows))
    return out
