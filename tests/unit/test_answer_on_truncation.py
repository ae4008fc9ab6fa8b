"""``drafter.answer_on_truncation`` is off by default and leaves the config hash of earlier
configs unchanged while off. The answer recovery on the fake engine:
tests/integration/test_answer_on_truncation.py; on the real engine: tests/engine/test_engine.py."""

from __future__ import annotations

import pytest

from specrag_batch.config import ADDED_FIELDS, RunConfig
from specrag_batch.core.records import Flag

from ..conftest import small_config


def test_switch_is_off_by_default_and_hash_neutral_off():
    """Off (the default) a config hashes as before the fields existed, whatever the answer
    budget is left at; on, or with another budget, the hash differs."""
    base = small_config()
    assert base.drafter.answer_on_truncation is False and base.drafter.answer_max_tokens == 16
    assert base.drafter.answer_budget is None
    assert ("drafter", "answer_on_truncation", False) in ADDED_FIELDS
    assert ("drafter", "answer_max_tokens", 16) in ADDED_FIELDS
    data = base.model_dump(mode="json")
    del data["drafter"]["answer_on_truncation"], data["drafter"]["answer_max_tokens"]  # a config from before
    assert RunConfig.model_validate(data).config_hash() == base.config_hash()
    for budget in (8, 32):  # off, the budget is never read: no hash of its own
        assert small_config(**{"drafter.answer_max_tokens": budget}).config_hash() == base.config_hash()
    on = small_config(**{"drafter.answer_on_truncation": True})
    assert on.drafter.answer_budget == 16 and on.config_hash() != base.config_hash()
    assert small_config(**{"drafter.answer_on_truncation": True, "drafter.answer_max_tokens": 8}).config_hash() \
        != on.config_hash()
    # recorded at fa4b01a, before these fields (as in test_rationale_style), with the defaults
    # switched since (verifier deduplication, adaptive drafting on; log ρ_SC, log ρ_SR off) set as then
    assert RunConfig.model_validate({"verifier": {"deduplicate_drafts": False},
                                   "sampling": {"adaptive": False},
                                   "selection": {"use_self_consistency": True,
                                                 "use_self_reflection": True}}).config_hash() == "420716c9f187c07c"
    with pytest.raises(Exception, match="answer_max_tokens"):
        small_config(**{"drafter.answer_max_tokens": 0})
    with pytest.raises(Exception, match="answer_on_truncation"):
        small_config(**{"verifier.answer_on_truncation": True})  # a drafter option only
    assert Flag.ANSWER_FORCED == "answer_forced"
