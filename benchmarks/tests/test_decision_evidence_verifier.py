"""The decision benchmark's ablation arm ``evidence_verifier`` (benchmarks/decision.py): it turns
``verifier.evidence_aware`` on (the paper's Table 2 variant Score(α|Q,δ)) and nothing else, and is
skipped with a note where it would change nothing. The switch itself is the product's and is
tested with it (tests/*/test_evidence_aware_verifier.py)."""

from __future__ import annotations

import pytest

import decision

from .conftest import ROOT, small_config


def test_the_arm_turns_evidence_aware_verification_on_and_nothing_else():
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")  # a verifier term in log ρ
    assert "evidence_verifier" in decision.expand_arms("ablations")
    arm = decision.arm_config(base, "evidence_verifier")
    assert arm.verifier.evidence_aware is True and arm.verifier_reads_documents
    assert arm.model_copy(update={"verifier": base.verifier}) == base
    assert arm.config_hash() != base.config_hash()
    with pytest.raises(ValueError, match="already sets verifier.evidence_aware true"):
        decision.arm_config(small_config(**{"verifier.evidence_aware": True}), "evidence_verifier")
    no_verifier = small_config(**{"selection.use_self_reflection": False, "selection.use_self_consistency": False})
    with pytest.raises(ValueError, match="no verifier pass"):
        decision.arm_config(no_verifier, "evidence_verifier")
