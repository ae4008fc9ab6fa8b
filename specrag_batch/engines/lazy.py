"""Engines started only when work reaches them (:class:`LazyEngine`): the shard tasks' handles on
the drafter and the verifier, so a shard whose every row is invalid starts none."""

from __future__ import annotations

import time
from typing import Sequence

from . import engine as engines
from ..config import ModelConfig
from .usage import EngineStats, EngineUsage
from .engine import Engine, loaded_engines


class LazyEngine:
    """An engine started only when work reaches it: :meth:`load` (or any attribute of the engine
    other than ``name``) calls :func:`get_engine`. A shard whose every row is invalid never
    starts one (the shard job loads its engines after validation, when a row is valid).

    A failed start is remembered for this process (per model, settings and seed), so the other
    shards of the run fail at once with the same error instead of starting again.

    Raises (from :meth:`load` and attribute access): whatever :func:`get_engine` raised."""

    _failed: dict[tuple, BaseException] = {}

    def __init__(self, cfg: ModelConfig, seed: int = 0):
        self.cfg, self.seed = cfg, seed
        self._engine: Engine | None = None
        self.role = {"DrafterConfig": "drafter", "VerifierConfig": "verifier"}.get(type(cfg).__name__, "model")
        self.usage = EngineStats()  # this handle's calls only: its role's share of the engine's usage

    def _call(self, method: str, prompts, *args, **kw):
        """``method`` of the engine (started on the first call; no prompts: ``[]``), its usage
        added to :attr:`usage` as well as the engine's own ``stats``: when the drafter and the
        verifier are one engine (the same model and settings), the handles keep the roles apart."""
        if not prompts:
            return []
        engine = self.load()
        stats = getattr(engine, "stats", None)
        before = dict(vars(stats)) if stats is not None else {}
        out = getattr(engine, method)(prompts, *args, **kw)
        for k, v in (vars(stats) if stats is not None else {}).items():
            setattr(self.usage, k, getattr(self.usage, k, 0) + v - before.get(k, 0))
        return out

    @property
    def name(self) -> str:
        """The started engine's name (the key of its usage), else the configured model."""
        return self._engine.name if self._engine is not None else self.cfg.model

    def _key(self) -> tuple:
        return (self.cfg.model_dump_json(), self.seed)

    @classmethod
    def failures(cls) -> dict[tuple, BaseException]:
        """Starts that failed in this process: (settings, seed) -> the error (a copy)."""
        return dict(cls._failed)

    @classmethod
    def forget_failures(cls) -> None:
        """Let the next :meth:`load` try again (a new run: memory or files may have changed)."""
        cls._failed.clear()

    @property
    def loaded(self) -> bool:
        """Whether the engine has been started."""
        return self._engine is not None

    def load(self) -> Engine:
        """The engine, started on the first call (seconds to minutes)."""
        if self._engine is None:
            failed = LazyEngine._failed.get(self._key())
            if failed is not None:
                raise failed
            try:
                self._engine = engines.get_engine(self.cfg, self.seed)
            except Exception as e:  # not a stop signal: a retry in this process would fail alike
                LazyEngine._failed[self._key()] = e
                raise
        return self._engine

    def generate(self, prompts, **kw):
        """:meth:`Engine.generate`; no prompts: ``[]`` without starting the engine."""
        return self._call("generate", prompts, **kw)

    def prompt_logprobs(self, prompts, **kw):
        """:meth:`Engine.prompt_logprobs`; no prompts: ``[]`` without starting the engine."""
        return self._call("prompt_logprobs", prompts, **kw)

    def prompt_and_next_logprobs(self, prompts, next_ids, **kw):
        """:meth:`Engine.prompt_and_next_logprobs`; no prompts: ``[]`` without starting the engine."""
        return self._call("prompt_and_next_logprobs", prompts, next_ids, **kw)

    def next_token_logprobs(self, prompts, next_ids, **kw):
        """:meth:`Engine.next_token_logprobs`; no prompts: ``[]`` without starting the engine."""
        return self._call("next_token_logprobs", prompts, next_ids, **kw)

    def __getattr__(self, attr: str):
        if attr.startswith("_") or attr in ("cfg", "seed"):
            raise AttributeError(attr)
        return getattr(self.load(), attr)


def usage_by_role(handles: Sequence) -> EngineUsage:
    """Engine usage per role (``drafter``, ``verifier``) of the :class:`LazyEngine` ``handles``
    that made calls (None and started engines without a handle are skipped): a shard's usage by
    role even when one engine served both roles. Counters as :class:`EngineStats` (seconds
    inside engine calls, tokens)."""
    return EngineUsage.total([EngineUsage({h.role: dict(vars(h.usage))}) for h in handles
                              if isinstance(h, LazyEngine) and h.usage.calls])


def load_needed(rows, *handles) -> float:
    """Start the lazy ``handles`` (:class:`LazyEngine`; None and started engines are skipped)
    when some row of ``rows`` has no ``error``: a stage will need them. Called by the shard job
    after validation, outside the stage timers. Returns the wall seconds spent starting them,
    which the shard leaves out of its own seconds (the run counts them as engine load)."""
    t0 = time.perf_counter()
    if any(getattr(row, "error", None) is None for row in rows):
        for handle in handles:
            if isinstance(handle, LazyEngine) and not handle.loaded:
                handle.load()
    return time.perf_counter() - t0


def loaded_since(before: Sequence[Engine]) -> float:
    """Seconds spent starting the engines loaded in this process since ``before`` (a
    :func:`loaded_engines` list)."""
    seen = {id(e) for e in before}
    return round(sum(e.load_seconds for e in loaded_engines() if id(e) not in seen), 3)
