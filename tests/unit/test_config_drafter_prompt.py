"""Both drafter prompt options (``drafter.prompt_layout`` and ``drafter.rationale_style``) are
part of the config hash, each at its default leaving earlier hashes unchanged. The prompts
they give: tests/integration/test_rationale_style.py."""

from __future__ import annotations

import pytest

from specrag_batch.config import RunConfig

from ..conftest import small_config


DRAFTER_PROMPT_OPTIONS = [("prompt_layout", "documents_first", "question_first"),
                          ("rationale_style", "one_or_two_sentences", "one_sentence")]
"""Drafter prompt options (field, default, other value): each is part of the config hash away
from its default and flows through the drafter-training data step and training alike."""


@pytest.mark.parametrize("field,default,other", DRAFTER_PROMPT_OPTIONS)
def test_drafter_prompt_option_is_part_of_the_config_hash(tmp_path, field, default, other):
    """Default: the hash of configs written before the option (resume keeps working); the other
    value: another hash, so resuming an output written with the other prompt is refused."""
    from specrag_batch.run import resume

    base = small_config()
    assert getattr(base.drafter, field) == default
    data = base.model_dump(mode="json")
    del data["drafter"][field]  # a config dumped before the option existed
    assert RunConfig.model_validate(data).config_hash() == base.config_hash()
    # recorded at fa4b01a, before either option (and before the defaults changed since: verifier deduplication and adaptive drafting on, log ρ_SC and log ρ_SR off)
    assert RunConfig.model_validate({"verifier": {"deduplicate_drafts": False},
                                   "sampling": {"adaptive": False},
                                   "selection": {"use_self_consistency": True,
                                                 "use_self_reflection": True}}).config_hash() == "420716c9f187c07c"
    changed = small_config(**{f"drafter.{field}": other})
    assert changed.config_hash() != base.config_hash()
    with pytest.raises(Exception, match=field):
        small_config(**{f"verifier.{field}": other})  # a drafter option only
    with pytest.raises(Exception, match=field):
        small_config(**{f"drafter.{field}": "free"})
    out, inp = str(tmp_path / "out"), "file:///in"
    resume.claim_output(out, inp, base.config_hash(), base.model_dump(mode="json"), "run-1")
    with pytest.raises(resume.RunConflictError):
        resume.check_output(out, inp, changed.config_hash())
    assert resume.check_output(out, inp, base.config_hash()) is not None  # same prompt: resumes
