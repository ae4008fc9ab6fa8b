"""Engine usage accounting: seconds inside engine calls and tokens per model, summed over
shards and runs for the manifest, the report and cost estimates; engine dtypes per model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence


HIT_RATE = "prefix_cache_hit_rate"
"""Key of the derived prefix-cache hit rate in usage dicts (never summed)."""


def prefix_cache_hit_rate(stats: Mapping[str, float | None]) -> float | None:
    """``cached_prompt_tokens / prompt_tokens`` of one engine's usage (a fraction in [0, 1],
    4 decimals): the share of prompt tokens read from vLLM's prefix cache. None when there are
    no prompt tokens or the cached count is unknown (missing or None: usage recorded before
    the field existed)."""
    prompt, cached = stats.get("prompt_tokens"), stats.get("cached_prompt_tokens")
    if not prompt or cached is None:
        return None
    return round(cached / prompt, 4)


@dataclass
class EngineStats:
    """Cumulative engine usage: seconds inside vLLM calls and tokens processed.

    ``cached_prompt_tokens``: prompt tokens whose KV came from vLLM's prefix cache instead of
    being computed (``RequestOutput.num_cached_tokens``, summed), a subset of
    ``prompt_tokens``. Every call starts from an empty cache (:meth:`Engine._generate`), so
    these are prefixes shared by prompts of the same call; requests with prompt log-probs (the
    verifier's) read no cache in vLLM (PR 17251) and count 0."""

    seconds: float = 0.0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    calls: int = 0

    def as_dict(self) -> dict[str, float | None]:
        """The counters and the derived :data:`HIT_RATE` (:func:`prefix_cache_hit_rate`)."""
        return {**self.__dict__, HIT_RATE: prefix_cache_hit_rate(self.__dict__)}


def merge_dtypes(parts: Sequence[Mapping[str, str | None] | None]) -> dict[str, str]:
    """Engine dtypes per model name (``{name: "bfloat16"}``) of several parts (a shard's
    drafting and verification tasks, or every shard of an output) in one dict: per name the
    distinct dtypes, sorted and joined by ``+`` (``"bfloat16+float32"`` when the parts
    disagree; a part's value may itself be joined). A None value (unknown) is left out; a
    name with no known value is left out too."""
    seen: dict[str, set[str]] = {}
    for part in parts:
        for name, dt in (part or {}).items():
            if dt is not None:
                seen.setdefault(name, set()).update(str(dt).split("+"))
    return {name: "+".join(sorted(v)) for name, v in seen.items()}


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a + b, 3)


@dataclass(frozen=True)
class EngineUsage:
    """Engine usage per engine name: ``{name: {"seconds": s, "prompt_tokens": n,
    "cached_prompt_tokens": n, "generated_tokens": n, "calls": n}}`` (seconds inside vLLM
    calls; token counts), as in :class:`EngineStats`. Values are rounded to 3 decimals by
    :meth:`since` and :meth:`total`. A counter missing from some part of a sum (a shard marker
    written before ``cached_prompt_tokens`` existed) makes that counter unknown (None), never
    0. :meth:`as_dict` adds the derived :data:`HIT_RATE` (:func:`prefix_cache_hit_rate`)."""

    by_engine: dict[str, dict[str, float | None]] = field(default_factory=dict)

    @classmethod
    def snapshot(cls, engines: Mapping[str, Any] | Iterable[Any]) -> EngineUsage:
        """Cumulative usage now of ``engines``: a mapping name -> engine, or engines (objects
        with ``name`` and ``stats``, an :class:`EngineStats`) summed per model name: one model
        loaded with two seeds or settings is two engines under one name, and a shard's usage
        must count whichever it used (``engines.usage_now`` passes every loaded engine)."""
        if isinstance(engines, Mapping):
            return cls({name: dict(e.stats.as_dict()) for name, e in engines.items()})
        return cls.total([cls({e.name: dict(e.stats.as_dict())}) for e in engines])

    def since(self, before: EngineUsage) -> EngineUsage:
        """The difference ``self - before``: usage between two snapshots (an engine missing
        from ``before`` counts from zero). Engines with no call in between are left out: a
        run's or shard's usage names only the engines it used, not every engine an earlier
        job left loaded in the process."""
        out = {}
        for name, now in self.by_engine.items():
            prev = before.by_engine.get(name, {})
            if "calls" in now and now["calls"] == prev.get("calls", 0):
                continue
            out[name] = {k: None if v is None or prev.get(k, 0) is None else round(v - prev.get(k, 0), 3)
                         for k, v in now.items() if k != HIT_RATE}
        return EngineUsage(out)

    @classmethod
    def total(cls, parts: Sequence[EngineUsage | dict]) -> EngineUsage:
        """Sum of usages (or their :meth:`as_dict` forms), per engine name and counter; a
        counter some part of an engine lacks is None (unknown)."""
        out: dict[str, dict[str, float | None]] = {}
        for part in parts:
            for name, stats in (part.by_engine if isinstance(part, EngineUsage) else part or {}).items():
                stats = {k: v for k, v in stats.items() if k != HIT_RATE}
                cur = out.get(name)
                if cur is None:
                    out[name] = {k: None if v is None else round(v, 3) for k, v in stats.items()}
                    continue
                for k in cur.keys() | stats.keys():
                    cur[k] = _sum(cur.get(k), stats.get(k))
        return cls(out)

    def as_dict(self) -> dict[str, dict[str, float | None]]:
        """JSON form (manifest ``engines``, ShardResult ``engines``, shard markers): the
        counters plus :data:`HIT_RATE` for engines whose usage has ``prompt_tokens``."""
        return {name: {**stats, HIT_RATE: prefix_cache_hit_rate(stats)} if "prompt_tokens" in stats
                else dict(stats) for name, stats in self.by_engine.items()}
