"""Stage 4: verification (paper §3.3). The verifier scores each draft in one forward pass.

Input per draft: ``[Q, α, β, R, "Yes"]`` — the question block (never the documents), the
draft's answer and rationale, the reflection question R and the reply "Yes". From vLLM's
``prompt_logprobs`` (natural log):

* self-consistency  log ρ_SC = Σ log P(t | prefix) over the α and β tokens = log P(α, β | Q)
* self-reflection   log ρ_SR = Σ log P(t | prefix) over the "Yes" tokens = log P("Yes" | Q, α, β, R)

Token positions come from the tokenizer's offset mapping (:func:`prompts.verifier_prompt`).
"""

from __future__ import annotations

from typing import Sequence

from .engines import Engine, clean_logprob
from .prompts import verifier_prompt
from .selection import Draft

NON_FINITE = "non_finite_logprob"


def _sum(lps: Sequence[float | None], idx: range) -> tuple[float, bool]:
    total, bad = 0.0, False
    for i in idx:
        v, nf = clean_logprob(lps[i])
        total += v
        bad |= nf
    return total, bad


def verify(engine: Engine, items: Sequence[tuple[str, Draft]], reflection_question: str,
           max_prompt_tokens: int, desc: str = "verification") -> None:
    """Fill ``score_self_consistency`` and ``score_self_reflection`` of each draft in place.

    Args:
        items: (question block, draft) pairs; all scored in one batched engine call.
        max_prompt_tokens: the verifier's context; a longer input gets flag
            ``verifier_input_too_long`` and null verifier scores instead of failing the batch.
    """
    prompts, keep = [], []
    for q, d in items:
        vp = verifier_prompt(engine.tokenizer, q, d.answer, d.rationale, reflection_question)
        if len(vp.token_ids) > max_prompt_tokens:
            d.flags.append("verifier_input_too_long")
            continue
        prompts.append(vp)
        keep.append(d)
    all_lps = engine.prompt_logprobs([p.token_ids for p in prompts], desc=desc)
    for vp, d, lps in zip(prompts, keep, all_lps):
        a, bad_a = _sum(lps, vp.answer_tokens)
        b, bad_b = _sum(lps, vp.rationale_tokens)
        y, bad_y = _sum(lps, vp.yes_tokens)
        d.score_self_consistency = a + b
        d.score_self_reflection = y
        if (bad_a or bad_b or bad_y) and NON_FINITE not in d.flags:
            d.flags.append(NON_FINITE)
