"""A FAKE engine for fast tests of the pipeline's own bookkeeping (no vLLM, no model weights),
shared by the product's tests (``tests/``), the benchmarks' tests (``benchmarks/tests``) and a
user's tests of a pipeline built on specrag-batch; nothing in the product imports it.

:class:`FakeEngine` stands in for :class:`specrag_batch.engines.engine.Engine` where what is under test
is what the pipeline does *around* the model: chunking, the hand-off between drafting and
verification (fused vs disaggregated), the consensus fast path, one output record per input
row, stage contracts. It is NOT a model: its drafts are canned replies and its log-probs are
arithmetic on token ids. Anything that depends on what a real model computes (draft scores
matching the drafter's forward pass, self-reflection from the same pass, prompt templates a
real model reads, vLLM's flags) is tested against the real engine (the repository's ``tests/engine``).

What is real: the tokenizer (SmolLM2-135M-Instruct's, loaded with
``transformers.AutoTokenizer`` from the converted model directory), so prompts, token spans of
α and β, truncation and the "yes"/"no" token ids are exactly those of a real run.

Every output is a pure function of one prompt's token ids (and, for ``generate``, the seed):
never of the other prompts in the call, their order or the call count. A run over the same
rows therefore gives the same records whatever the chunking or topology, which is what the
equivalence tests assert. (A real engine is only batch-invariant up to floating point; see
benchmarks/batch_invariance.py.) Only the usage counters depend on the call: cached prompt
tokens follow vLLM's prefix-cache rule within one call (:func:`cached_prefix_tokens`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Sequence

from specrag_batch.engines.usage import EngineStats
from specrag_batch.engines.engine import GenerationResult

TEST_MODEL = "smollm2-135m-instruct"


@lru_cache(maxsize=1)
def real_tokenizer(name: str = TEST_MODEL):
    """The packaged test model's real tokenizer (``transformers.AutoTokenizer`` over the
    converted model directory; converted on first use by ``make models-test``)."""
    from transformers import AutoTokenizer

    from specrag_batch.engines.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(name))


def digest(ids: Sequence[int], *extra: int) -> int:
    """A stable 64-bit hash of token ids (and extra integers): the fake's only source of
    variation, so outputs depend on nothing but the prompt."""
    h = hashlib.blake2b(digest_size=8)
    for x in (*ids, -1, *extra):
        h.update(int(x).to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest(), "little")


def token_logprob(prev: int, tok: int, pos: int) -> float:
    """Fake log P(tok | prefix) in (-10, -0.01], natural log: arithmetic on the ids."""
    return -0.01 - ((prev * 31 + tok * 17 + pos * 7) % 997) / 100.0


FAKE_BLOCK = 16
"""Block size, tokens, of the fake's prefix cache (vLLM caches whole KV blocks; its CPU
default is 128, GPU 16)."""


def cached_prefix_tokens(prompts: Sequence[Sequence[int]], block: int = FAKE_BLOCK) -> list[int]:
    """Per prompt, the tokens vLLM's prefix cache would serve when ``prompts`` are one call
    starting from an empty cache: the leading full ``block``-token blocks an earlier prompt of
    the call already holds (the same tokens from position 0), never the prompt's last token
    (vLLM computes at least one). A model of the rule for bookkeeping tests, not vLLM's
    scheduler (which may also share blocks between prompts scheduled in the same step)."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for p in prompts:
        p = tuple(p)
        hit = 0
        while hit + block <= len(p) - 1 and p[:hit + block] in seen:
            hit += block
        out.append(hit)
        seen.update(p[:end] for end in range(block, len(p) + 1, block))
    return out


ANSWERS = {
    "qa": ["Paris", "Lyon", "Marseille"],
    "claim": ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO"],
    "choice": ["A", "B", "C"],
}


def prompt_task(text: str) -> str:
    """Which task a drafter prompt asks for, read from its question block
    (:func:`specrag_batch.stages.prompts.task_instruction`)."""
    if "Answer with the letter of the correct option." in text:
        return "choice"
    if "Does the evidence support or refute the claim?" in text:
        return "claim"
    return "qa"


def default_reply(text: str, h: int) -> str:
    """A well-formed draft in the drafter format the parser expects (the prompt ends with the
    prefilled ``Rationale:``): ``" <rationale>\\nAnswer: <answer>"``; the hash picks the answer."""
    answers = ANSWERS[prompt_task(text)]
    return f" The documents point to it (case {h % 97}).\nAnswer: {answers[h % len(answers)]}"


@dataclass
class FakeCall:
    """One engine call: method name, number of prompts, progress label."""

    method: str
    prompts: int
    desc: str


@dataclass
class FakeEngine:
    """FAKE stand-in for :class:`specrag_batch.engines.engine.Engine` (same methods the pipeline
    uses), with a real tokenizer and deterministic outputs (see module docstring).

    Args:
        tokenizer: a real Hugging Face tokenizer (default: SmolLM2's, :func:`real_tokenizer`).
        reply: ``(decoded prompt text, prompt hash) -> generated text`` for ``generate``;
            default :func:`default_reply`. It sees one prompt only, so outputs stay
            independent of batch composition.

    Attributes:
        calls: every call in order (:class:`FakeCall`), for asserting call and prompt counts.
        stats: :class:`~specrag_batch.engines.engine.EngineStats`, accounted as the real engine does
            (seconds stay 0).
        dtype: the dtype the real engine reports (:func:`specrag_batch.engines.engine.engine_dtype`),
            recorded with each shard; nothing of the fake's arithmetic depends on it.
    """

    tokenizer: object = None
    reply: Callable[[str, int], str] = default_reply
    name: str = "fake:" + TEST_MODEL
    calls: list[FakeCall] = field(default_factory=list)
    stats: EngineStats = field(default_factory=EngineStats)
    dtype: str | None = "float32"  # as engines.engine_dtype names it; None: unknown
    load_seconds: float = 0.0  # a fake starts at once

    def __post_init__(self):
        if self.tokenizer is None:
            self.tokenizer = real_tokenizer()

    def _account(self, method: str, prompts: Sequence[list[int]], desc: str, generated: int = 0) -> None:
        """Usage as the real engine counts it; cached prompt tokens by
        :func:`cached_prefix_tokens` for ``generate`` (an empty cache at every call), none for
        the prompt log-prob methods (vLLM reads no cache for them, PR 17251)."""
        self.calls.append(FakeCall(method, len(prompts), desc))
        self.stats.calls += 1
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        if method == "generate":
            self.stats.cached_prompt_tokens += sum(cached_prefix_tokens(prompts))
        self.stats.generated_tokens += generated

    def calls_to(self, method: str) -> list[FakeCall]:
        """The calls made to ``method`` (``generate``, ``prompt_logprobs``,
        ``prompt_and_next_logprobs``, ``next_token_logprobs``)."""
        return [c for c in self.calls if c.method == method]

    def generate(self, prompts: Sequence[list[int]], *, max_tokens: int, temperature: float,
                 top_p: float, seed: int, desc: str = "generate") -> list[GenerationResult]:
        """One :class:`GenerationResult` per prompt: ``reply`` tokenised (at most
        ``max_tokens`` tokens, finish ``"length"`` when cut, else ``"stop"``), each token with
        :func:`token_logprob`. An empty ``prompts`` makes no call, as the real engine."""
        if not prompts:
            return []
        out = []
        for p in prompts:
            h = digest(p, seed)
            ids = self.tokenizer(self.reply(self.tokenizer.decode(p), h),
                                 add_special_tokens=False)["input_ids"]
            finish = "length" if len(ids) > max_tokens else "stop"
            ids = ids[:max_tokens]
            lps = [token_logprob(p[-1] if i == 0 else ids[i - 1], t, i) for i, t in enumerate(ids)]
            out.append(GenerationResult(self.tokenizer.decode(ids, skip_special_tokens=True),
                                        list(ids), lps, finish))
        self._account("generate", prompts, desc, sum(len(r.token_ids) for r in out))
        return out

    @staticmethod
    def _prompt_row(p: list[int]) -> list[float | None]:
        return [None] + [token_logprob(p[i - 1], p[i], i) for i in range(1, len(p))]

    def prompt_logprobs(self, prompts: Sequence[list[int]], desc: str = "score") -> list[list[float | None]]:
        """Per prompt, entry i = fake log P(token_i | tokens_<i) (:func:`token_logprob`),
        None for i = 0, as the real engine returns them."""
        if not prompts:
            return []
        self._account("prompt_logprobs", prompts, desc, len(prompts))
        return [self._prompt_row(list(p)) for p in prompts]

    def prompt_and_next_logprobs(self, prompts: Sequence[list[int]], next_ids: Sequence[int],
                                 desc: str = "score") -> list[tuple[list[float | None], dict[int, float]]]:
        """Per prompt, (:meth:`prompt_logprobs` row, next-token log-probs of exactly ``next_ids``),
        as the real engine reads them (``logprob_token_ids``). The tokenizer's " Yes" and "No" ids
        get hash-chosen log-probs (P <= 0.95 each), every other id a small one below them."""
        if not prompts:
            return []
        from specrag_batch.stages.verification import word_token_ids

        yes, no = min(word_token_ids(self.tokenizer, "yes")), min(word_token_ids(self.tokenizer, "no"))
        out = []
        for p in prompts:
            h = digest(p)
            main = {yes: -0.05 - (h % 300) / 100.0, no: -0.05 - ((h >> 9) % 300) / 100.0}
            nxt = {int(t): main.get(int(t), -6.0 - (int(t) % 7) / 10.0) for t in next_ids}
            out.append((self._prompt_row(list(p)), nxt))
        self._account("prompt_and_next_logprobs", prompts, desc, len(prompts))
        return out

    def next_token_logprobs(self, prompts: Sequence[list[int]], next_ids: Sequence[Sequence[int]],
                            desc: str = "labels") -> list[dict[int, float]]:
        """Per prompt, {id: fake log P(id | prompt)} for each of its ``next_ids``: a hash of
        (prompt, id) in [-4.05, -0.05], as the real engine reads them (``logprob_token_ids``).
        Cached prompt tokens as for ``generate`` (no prompt log-probs are asked for)."""
        if not prompts:
            return []
        out = [{int(t): -0.05 - (digest(list(p), int(t)) % 400) / 100.0 for t in ids}
               for p, ids in zip(prompts, next_ids)]
        self.calls.append(FakeCall("next_token_logprobs", len(prompts), desc))
        self.stats.calls += 1
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        self.stats.cached_prompt_tokens += sum(cached_prefix_tokens(prompts))
        self.stats.generated_tokens += len(prompts)
        return out
