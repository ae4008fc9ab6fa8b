"""The fake engine of :mod:`specrag_batch.run.testing` under the name the benchmarks' tests import it by."""

from specrag_batch.run.testing import (ANSWERS, FAKE_BLOCK, TEST_MODEL, FakeCall, FakeEngine, cached_prefix_tokens,  # noqa: F401
                                   default_reply, digest, prompt_task, real_tokenizer, token_logprob)
