"""``specrag-batch`` run as its console script runs it (:func:`specrag_batch.cli.commands.main`), with
tests/fakes.py's FakeEngine in place of vLLM: for tests that need the real process (signals,
exit codes, the manifest's engine usage) without an engine. Everything but the engine is the
product's: the CLI, Prefect's flow and task runner, storage, resume, the usage accounting (the
fakes count tokens as the real engine does, :class:`~tests.fakes.FakeEngine`). ``python -m tests.fake_engine_cli run -i ... -o ...``
from the repository root.

``SPECRAG_TEST_ENGINE_DELAY`` (seconds, default 0): each engine call sleeps this long first,
standing in for a model's compute so that a shard is still in flight when a test signals."""

from __future__ import annotations

import os
import time

from specrag_batch.cli import commands as cli
from specrag_batch.engines import engine as engines

from .fakes import FakeEngine

DELAY = float(os.environ.get("SPECRAG_TEST_ENGINE_DELAY", "0"))


class SlowFakeEngine(FakeEngine):
    """:class:`FakeEngine` whose calls each take at least ``DELAY`` seconds (a sleep, which
    like a model's compute in a worker thread leaves the main thread free to take a signal)."""

    load_seconds = 0.0  # as engines.Engine records its start (a fake starts in no time)

    def generate(self, prompts, **kw):
        time.sleep(DELAY)
        return super().generate(prompts, **kw)

    def prompt_logprobs(self, prompts, desc="score"):
        time.sleep(DELAY)
        return super().prompt_logprobs(prompts, desc)

    def prompt_and_next_logprobs(self, prompts, next_ids, desc="score"):
        time.sleep(DELAY)
        return super().prompt_and_next_logprobs(prompts, next_ids, desc)


_ENGINES: dict = {}


def fake_get_engine(cfg, seed: int = 0) -> SlowFakeEngine:
    """One fake per model name and seed, as :func:`specrag_batch.engines.engine.get_engine` keys them."""
    return _ENGINES.setdefault((cfg.model, seed), SlowFakeEngine())


engines.get_engine = fake_get_engine  # what the shard tasks' LazyEngine handles start
engines.loaded_engines = lambda: list(_ENGINES.values())  # usage snapshots see the fakes' counters

if __name__ == "__main__":
    cli.main()
