"""Each draft's log-probability of every allowed answer of a ``claim`` or ``choice`` row
(``selection.label_distribution``; issue 50, not in the paper).

After a draft's rationale β the drafter is asked, in one more batched engine call per chunk,
how likely each label ℓ is as the answer:

    log P(ℓ | Q, δ, β) = Σ_i log P(t_i | prompt, β, "\\nAnswer:", t_<i)

over the tokens t of ``" " + ℓ``. Two methods (``method`` of :func:`score_labels`):

* ``"prefix"`` (the default): each label's tokens up to and including the first one that tells
  it apart from every other label of the row (:func:`distinguishing_lengths`). When the labels'
  first tokens differ (the claim labels and option letters of the packaged tokenizers) that is
  the first token alone, so a draft costs ONE request asking for every label's first token;
  labels sharing first tokens, as ``NOT_ENOUGH_INFO`` and ``NOT_SUPPORTED``, are scored on until
  they part (a label that is a prefix of another is scored whole). Restricted to the row's
  labels this is the probability of decoding that label: once a label is the only one left its
  remaining tokens are forced, so they add nothing to the distribution over the labels.
* ``"whole_label"``: every token of every label (one request per distinct label-token prefix;
  four claim labels of the Qwen tokenizer: 8 requests per draft). Kept for measurement
  (``benchmarks/label_scoring_cost.py``).

The prefix is the draft's prompt
followed by its rationale re-encoded as text and the answer marker, ``" <β>\\nAnswer:"``, so a
draft that wrote no answer line, wrote free text or was cut at its token budget gets a
distribution too. Each (prefix + the label's first i tokens) is one request asking for the
log-prob of the next label token only (:meth:`~specrag_batch.engines.engine.Engine.next_token_logprobs`);
requests of one draft share its prefix through vLLM's prefix cache.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from ..core.parsing import ANSWER_RE
from .prompts import encode_plain
from ..core.records import Draft, Flag
from .base import EngineLike

ANSWER_MARKER = "\nAnswer:"
"""The answer line the drafter prompt asks for (as :data:`specrag_batch.stages.drafting.ANSWER_MARKER`)."""


def label_prefix(tokenizer, prompt_ids: Sequence[int], rationale: str) -> list[int]:
    """Token ids after which a label is scored: ``prompt_ids`` + ``" <rationale>\\nAnswer:"``
    as plain text (the rationale stripped; an empty one gives the marker alone)."""
    r = ANSWER_RE.split(rationale.strip())[0].strip()  # never two answer lines
    return list(prompt_ids) + encode_plain(tokenizer, (" " + r if r else "") + ANSWER_MARKER)


METHODS = ("prefix", "whole_label")
"""How many tokens of each label are scored (module docstring)."""


def distinguishing_lengths(tokens: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Per label, how many of its tokens tell it apart from every other label of ``tokens``
    (label -> its token ids): 1 + the longest common prefix with any other label, capped at the
    label's length (a label that is a prefix of another, or equal to one, counts whole).
    A single label: 1 (0 for an empty token list)."""
    out = {}
    for lab, toks in tokens.items():
        common = 0
        for other, o in tokens.items():
            if other != lab:
                n = 0
                while n < min(len(toks), len(o)) and toks[n] == o[n]:
                    n += 1
                common = max(common, n)
        out[lab] = min(len(toks), common + 1)
    return out


def score_labels(engine: EngineLike, prompts: Sequence[Sequence[int]], drafts: Sequence[Draft],
                 labels_of: Callable[[int], list[str]], *, max_model_len: int,
                 desc: str = "label scores", method: str = "prefix") -> int:
    """Set ``label_logprobs`` (label -> log P(label | Q, δ, β), nats, summed over the label's
    scored tokens: its distinguishing prefix under ``method="prefix"``, all of them under
    ``"whole_label"``; module docstring) on each draft whose ``labels_of(i)`` is not empty, in
    ONE batched engine call over the chunk.

    Args:
        prompts: the drafter prompt (token ids) of each draft, aligned with ``drafts``.
        labels_of: position -> the labels of that draft's row (:func:`specrag_batch.core.labels.label_names`).
        max_model_len: the engine's context, tokens: a draft whose longest scoring prompt
            would not leave room for one token gets no distribution (``label_logprobs`` None).

    Returns the number of requests sent (0: no call). A draft whose drafting failed (flag
    ``draft_processing_error``) is skipped.

    Raises:
        ValueError: ``prompts`` and ``drafts`` differ in length, or ``method`` is not one of
            :data:`METHODS`; whatever the engine raises."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if len(prompts) != len(drafts):
        raise ValueError(f"{len(prompts)} prompts but {len(drafts)} drafts")
    tokenizer = engine.tokenizer
    continuation: dict[str, list[int]] = {}
    requests: dict[tuple[int, ...], set[int]] = {}
    jobs: list[tuple[int, str, list[tuple[tuple[int, ...], int]]]] = []
    for i, draft in enumerate(drafts):
        labels = labels_of(i)
        if not labels or Flag.DRAFT_PROCESSING_ERROR in draft.flags:
            continue
        prefix = label_prefix(tokenizer, prompts[i], draft.rationale)
        tokens = {lab: continuation.setdefault(lab, encode_plain(tokenizer, " " + lab)) for lab in labels}
        if method == "prefix":
            keep = distinguishing_lengths(tokens)
            tokens = {lab: toks[:keep[lab]] for lab, toks in tokens.items()}
        if len(prefix) + max(len(t) for t in tokens.values()) > max_model_len:
            continue
        for lab, toks in tokens.items():
            steps = []
            for j, t in enumerate(toks):
                key = tuple(prefix + toks[:j])
                requests.setdefault(key, set()).add(t)
                steps.append((key, t))
            jobs.append((i, lab, steps))
    if not requests:
        return 0
    keys = list(requests)
    results = engine.next_token_logprobs([list(k) for k in keys], [sorted(requests[k]) for k in keys],
                                         desc=desc)
    table = dict(zip(keys, results))
    for i, lab, steps in jobs:
        if drafts[i].label_logprobs is None:
            drafts[i].label_logprobs = {}
        drafts[i].label_logprobs[lab] = float(sum(table[key][t] for key, t in steps))
    return len(keys)
