"""The decision benchmark's prompt-layout and KV-block arms (``question_first``, ``block32``,
``question_first_block32``; benchmarks/decision.py) and the drafter's prefix-cache hit rate in
their cost and tables (benchmarks/decision_stats.py). The layouts and the cached-token
bookkeeping are the product's and are tested with it."""

from __future__ import annotations

import pytest

import decision
import decision_stats as ds

from .conftest import ROOT


def test_decision_arm_and_cost_carry_the_layout_and_hit_rate():
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    assert "question_first" in decision.expand_arms("ablations")
    assert decision.arm_config(base, "question_first").drafter.prompt_layout == "question_first"
    with_kwargs = base.model_copy(update={"drafter": base.drafter.model_copy(update={"engine_kwargs": {"dtype": "float32"}})})
    b32 = decision.arm_config(with_kwargs, "question_first_block32").drafter
    assert b32.prompt_layout == "question_first" and b32.engine_kwargs == {"dtype": "float32", "block_size": 32}
    assert decision.arm_config(base, "block32").drafter.prompt_layout == "documents_first"
    new = {"name": "part-0", "rows_out": 2, "seconds": 1.0,
           "engines": {"m": {"seconds": 1.0, "prompt_tokens": 100, "cached_prompt_tokens": 30, "generated_tokens": 2}}}
    old = {"name": "part-1", "rows_out": 2, "seconds": 1.0,
           "engines": {"m": {"seconds": 1.0, "prompt_tokens": 100, "generated_tokens": 2}}}
    assert ds.cell_cost([new, {**new, "name": "part-2"}], {"m": "drafter"})["models"]["m"]["prefix_cache_hit_rate"] == 0.3
    assert ds.cell_cost([new, old], {"m": "drafter"})["models"]["m"]["prefix_cache_hit_rate"] is None
    res = {"datasets": {"d": {"arms": {"question_first": {"cost": ds.cell_cost([new], {"m": "drafter"})}},
                              "comparisons": {}}}, "pooled": {"arms": {}, "comparisons": {}}}
    assert "cache hits 30.0%" in ds.tables(res)


def test_layout_at_block32_is_compared_with_block32_too():
    """``question_first_block32`` is compared with ``speculative`` and with ``block32`` (the
    same KV block size), in the results and in the table of other arms."""
    from .test_decision_stats import draft, row

    def cell(right: list[bool], seconds: float, cached: int):
        rows = [row(f"q{i}", "qa", ["a"], "a" if ok else "b", ok, [draft("a" if ok else "b")])
                for i, ok in enumerate(right)]
        shards = [{"name": f"part-{i}", "rows_out": 1, "seconds": seconds,
                   "engines": {"m": {"seconds": seconds, "prompt_tokens": 100,
                                     "cached_prompt_tokens": cached, "generated_tokens": 2}}}
                  for i in range(len(right))]
        return {"rows": rows, "shards": shards, "roles": {"m": "drafter"}}

    ok = [True] * 6 + [False] * 4
    cells = {"d": {"speculative": cell(ok, 2.0, 0), "block32": cell(ok, 1.6, 0),
                   "question_first_block32": cell(ok, 1.2, 40)}}
    res = ds.summarise(cells, {"d": {}}, ["SUPPORTS", "REFUTES"], reps=50)
    cmps = res["datasets"]["d"]["comparisons"]
    assert cmps["question_first_block32 - block32"]["seconds"]["ratio"] == pytest.approx(0.75)
    assert cmps["question_first_block32 - speculative"]["seconds"]["ratio"] == pytest.approx(0.6)
    assert "question_first_block32 - block32" in res["pooled"]["comparisons"]
    table = ds.tables(res)
    assert "| d | question_first_block32 - block32 | 10 |" in table and "cache hits 40.0%" in table
