"""Verifier prefill with and without prefix-cache reads (issue 13 item 3): does any arrangement
reduce the verifier's prefill?

vLLM skips prefix-cache reads for requests that ask for prompt log-probs (vLLM PR 17251:
``SamplingParams.skip_reading_prefix_cache`` defaults to True when ``prompt_logprobs`` is
set), so the m verifier prompts of a row, which all start with the same question block
``[Q]`` and the assistant's ``Answer:``, compute that prefix m times. vLLM 0.32 lets a request
set ``skip_reading_prefix_cache=False``; its model runner then computes prompt log-probs only
from the first uncached position (``_get_prompt_logprobs_dict`` starts at
``num_computed_tokens``), so the log-probs of tokens 1..N (N = cached tokens) are lost or
filled with whatever the buffer held, and tokens N+1.. are computed. The verifier reads
log-probs only over α and β (ρ_SC) and at the next token (ρ_SR), after the shared prefix, so
reading the cache would be safe whenever α starts after N.

This script measures exactly that on the verifier prompts the product builds
(:func:`specrag_batch.stages.prompts.verifier_prompt`) from a finished benchmark cell's drafts:

* ``skip``: the product's request (prompt log-probs, one greedy token with top-20 log-probs),
  default ``skip_reading_prefix_cache`` (True);
* ``read``: the same request with ``skip_reading_prefix_cache=False``.

Both on one verifier engine with ``--block-size`` KV blocks (32: the shared prefix is about
50-85 Qwen2.5 tokens, shorter than the CPU default of 128), each repetition from an empty
prefix cache, alternating order. Reported: seconds per repetition (and the paired ratio
read / skip), cached prompt tokens, the prompts whose α starts at or before N (unsafe), and
the largest absolute difference of log ρ_SC (α+β log-probs, the positions after N only) and of
the next token's top-20 log-probs between the two. Nothing in the product changes; if ``read``
is faster with equal scores, Engine.prompt_and_next_logprobs can set the flag.

    python benchmarks/verifier_prefix.py --config configs/bench.yaml \\
        --runs benchmarks/runs --dataset popqa --arm speculative --rows 50 --reps 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specrag_batch.config import load_config  # noqa: E402
from specrag_batch.stages.prompts import Question, verifier_prompt  # noqa: E402
from specrag_batch.core.records import Draft  # noqa: E402
from specrag_batch.stages.verification import word_token_ids  # noqa: E402


def verifier_prompts(cfg, tok, runs: Path, dataset: str, arm: str, rows: int) -> list:
    """The product's verifier prompts (``tok``: the verifier's tokenizer) for the valid drafts
    of the first ``rows`` rows of a finished cell that went to the verifier (no error, not on
    the fast path), in row order.

    Raises:
        SystemExit: the cell has no such row."""
    import pyarrow.parquet as pq

    from specrag_batch.core.schema import validate_table

    inputs = {}
    for f in sorted((runs / dataset / "input").glob("part-*.parquet")):
        for r in validate_table(pq.read_table(f), str(f)):
            inputs[r.query_id] = r
    prompts = []
    out_rows = [r for f in sorted((runs / dataset / arm).glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()]
    used = 0
    for rec in out_rows:
        if used >= rows:
            break
        if rec["error"] is not None or rec["fast_path"] or not rec["drafts"]:
            continue
        inp = inputs[rec["query_id"]]
        q = Question(inp.task, inp.query, tuple(inp.choices) if inp.choices is not None else None,
                     tuple(cfg.claim_labels))
        drafts = [Draft.from_record(d) for d in rec["drafts"]]
        prompts += [verifier_prompt(tok, q, d.written_answer or d.answer, d.rationale, cfg.reflection_question)
                    for d in drafts if d.valid]
        used += 1
    if not prompts:
        raise SystemExit(f"{runs / dataset / arm}: no finished row with drafts the verifier scored")
    return prompts


def score(llm, prompts, read_cache: bool) -> tuple[float, list]:
    """One vLLM call over ``prompts`` from an empty prefix cache: (seconds, outputs)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    tok = llm.get_tokenizer()
    ids = sorted(word_token_ids(tok, "yes") | word_token_ids(tok, "no"))  # as the product reads them
    sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, logprob_token_ids=ids,
                        skip_reading_prefix_cache=not read_cache)
    llm.reset_prefix_cache()
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p.token_ids) for p in prompts], sp, use_tqdm=False)
    return time.perf_counter() - t0, outs


def rho_sc(prompt, out) -> float:
    """log ρ_SC from one output: α and β token log-probs (natural log)."""
    total = 0.0
    for i in (*prompt.answer_tokens, *prompt.rationale_tokens):
        entry = out.prompt_logprobs[i].get(prompt.token_ids[i]) if out.prompt_logprobs[i] else None
        total += entry.logprob if entry is not None else math.nan
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "bench.yaml")
    ap.add_argument("--runs", type=Path, default=ROOT / "benchmarks" / "runs")
    ap.add_argument("--dataset", default="popqa")
    ap.add_argument("--arm", default="speculative")
    ap.add_argument("--rows", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "verifier_prefix.json")
    a = ap.parse_args(argv)
    os.environ.setdefault("SPECRAG_PROGRESS", "0")
    from specrag_batch.engines.engine import get_engine

    cfg = load_config(a.config)
    vcfg = cfg.verifier.model_copy(update={"engine_kwargs": {**cfg.verifier.engine_kwargs, "block_size": a.block_size}})
    engine = get_engine(vcfg, cfg.seed)
    llm = engine.llm
    prompts = verifier_prompts(cfg, engine.tokenizer, a.runs, a.dataset, a.arm, a.rows)
    score(llm, prompts[:2], False)  # warm-up, not timed
    seconds = {"skip": [], "read": []}
    outs = {}
    for rep in range(a.reps):
        for arrangement in (("skip", "read") if rep % 2 == 0 else ("read", "skip")):
            s, outs[arrangement] = score(llm, prompts, arrangement == "read")
            seconds[arrangement].append(s)
    cached = [o.num_cached_tokens or 0 for o in outs["read"]]
    unsafe = sum(c >= p.answer_tokens.start for c, p in zip(cached, prompts) if len(p.answer_tokens))
    sc_diff = max((abs(rho_sc(p, r) - rho_sc(p, s)) for p, r, s, c in zip(prompts, outs["read"], outs["skip"], cached)
                   if not len(p.answer_tokens) or c < p.answer_tokens.start), default=math.nan)
    top_diff = max(abs(r.outputs[0].logprobs[0][t].logprob - lp.logprob)
                   for r, s in zip(outs["read"], outs["skip"])
                   for t, lp in s.outputs[0].logprobs[0].items() if t in r.outputs[0].logprobs[0])
    res = {"config": str(a.config), "cell": f"{a.dataset}/{a.arm}", "rows": a.rows, "prompts": len(prompts),
           "block_size": a.block_size, "reps": a.reps,
           "prompt_tokens": sum(len(p.token_ids) for p in prompts),
           "cached_prompt_tokens_read": sum(cached),
           "cached_prompt_tokens_skip": sum(o.num_cached_tokens or 0 for o in outs["skip"]),
           "seconds": seconds, "ratio_read_over_skip": [r / s for r, s in zip(seconds["read"], seconds["skip"])],
           "median_ratio": statistics.median(r / s for r, s in zip(seconds["read"], seconds["skip"])),
           "prompts_alpha_inside_cached_prefix": unsafe,
           "max_abs_diff_log_rho_sc": sc_diff, "max_abs_diff_next_token_top_k": top_diff}
    a.out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
