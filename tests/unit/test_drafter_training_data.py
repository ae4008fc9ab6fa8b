"""The drafter-training data step's key (``drafter_training.data``): it ignores settings that
change no teacher output, such as verifier deduplication. The teacher's prompts on a real
tokenizer: tests/integration/test_drafter_training_prompts.py."""

from __future__ import annotations


def test_the_data_key_ignores_verifier_deduplication():
    """The data step runs no verifier scoring: ``verifier.deduplicate_drafts`` (default true since
    the decision benchmark) leaves the shard key as it was when the field defaulted to false,
    so existing drafter data resumes; a setting the step does use still changes the key."""
    from specrag_batch.drafter_training.data import DataOptions

    from ..conftest import small_config

    cfg, opts = small_config(), DataOptions()
    assert cfg.verifier.deduplicate_drafts is True
    off = small_config(**{"verifier.deduplicate_drafts": False})
    assert off.config_hash() != cfg.config_hash()  # a run's hash does tell them apart
    assert opts.key(cfg) == opts.key(off)
    assert opts.key(small_config(**{"retrieval.max_doc_tokens": 64})) != opts.key(cfg)
