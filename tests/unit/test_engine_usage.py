"""Cached prompt tokens in the engine usage (vLLM's ``num_cached_tokens``): summed per engine,
and shard markers written before the field read as unknown. The prompt layouts on the real
tokenizer and a shard run through marker, manifest, report and CLI:
tests/integration/test_prefix_cache.py."""

from __future__ import annotations

from specrag_batch.engines.usage import EngineStats, EngineUsage

from ..conftest import small_config


def test_usage_sums_cached_tokens_and_old_markers_read_as_unknown():
    from specrag_batch.engines.usage import prefix_cache_hit_rate

    new = {"d": {"seconds": 1.0, "prompt_tokens": 100, "cached_prompt_tokens": 40, "generated_tokens": 5, "calls": 1}}
    newer = {"d": {"seconds": 1.0, "prompt_tokens": 100, "cached_prompt_tokens": 20, "generated_tokens": 5,
                   "calls": 1, "prefix_cache_hit_rate": 0.2}}  # a marker's derived rate is not summed
    old = {"d": {"seconds": 2.0, "prompt_tokens": 50, "generated_tokens": 3, "calls": 1}}
    both = EngineUsage.total([new, newer, {}]).as_dict()["d"]
    assert both["cached_prompt_tokens"] == 60 and both["prefix_cache_hit_rate"] == 0.3
    mixed = EngineUsage.total([new, old]).as_dict()["d"]
    assert mixed["prompt_tokens"] == 150 and mixed["cached_prompt_tokens"] is None
    assert mixed["prefix_cache_hit_rate"] is None  # unknown, not 40/150
    assert EngineUsage.total([old]).as_dict()["d"]["prefix_cache_hit_rate"] is None
    assert prefix_cache_hit_rate({"prompt_tokens": 0, "cached_prompt_tokens": 0}) is None
    from types import SimpleNamespace

    from specrag_batch.engines.engine import Engine

    eng = Engine("e", "/nowhere", small_config().drafter, llm=None, tokenizer=None)
    outs = [SimpleNamespace(num_cached_tokens=n, outputs=[SimpleNamespace(token_ids=[1, 2])]) for n in (0, 32, None)]
    eng._account(0.0, [[1] * 40] * 3, outs)  # what Engine._generate records from vLLM's outputs
    assert (eng.stats.prompt_tokens, eng.stats.cached_prompt_tokens, eng.stats.generated_tokens) == (120, 32, 6)
    before = EngineUsage({"d": EngineStats(1.0, 10, 4, 1, 1).as_dict()})
    now = EngineUsage({"d": EngineStats(3.0, 110, 54, 6, 2).as_dict()})
    assert now.since(before).as_dict()["d"] == {"seconds": 2.0, "prompt_tokens": 100, "cached_prompt_tokens": 50,
                                                "generated_tokens": 5, "calls": 1, "prefix_cache_hit_rate": 0.5}
