"""``verifier.deduplicate_drafts``: on by default and hash-neutral when off, and a row answered
again counts the passes saved in both passes. The deduplication on the fake engine:
tests/integration/test_verifier_dedup.py."""

from __future__ import annotations

from specrag_batch.config import ModelConfig, RunConfig
from specrag_batch.core.records import Draft

from ..pipeline_runs import config


COUNT = "verifier_drafts_deduplicated"


def dedupe(**over):
    return config(**{"verifier.deduplicate_drafts": True, **over})


def test_the_switch_is_on_by_default_and_hash_neutral_off():
    """On by default (measured by the decision benchmark). Off, the config hash is the one of
    the same config before the field existed (the verifier section a plain ``ModelConfig``):
    those runs ran without deduplication and resume only under a config that turns it off.
    On, whether by default or written out (configs/bench.yaml), the hash is one and the same,
    and differs from the old runs' hash."""
    import yaml

    from specrag_batch.config import ADDED_FIELDS, load_config

    from ..conftest import ROOT

    assert RunConfig().verifier.deduplicate_drafts is True and config().verifier.deduplicate_drafts is True
    assert ("verifier", "deduplicate_drafts", False) in ADDED_FIELDS  # the behaviour before the field
    off = config(**{"verifier.deduplicate_drafts": False})
    before = off.model_copy(update={"verifier": ModelConfig(**off.verifier.model_dump(
        exclude={"deduplicate_drafts", "evidence_aware"}))})  # evidence_aware: added later, off
    assert "deduplicate_drafts" not in before.model_dump()["verifier"]
    assert off.config_hash() == before.config_hash()
    assert dedupe().config_hash() == config().config_hash() != off.config_hash()
    # configs/bench.yaml writes the switch out; left out it now means the same, so the same hash
    bench = yaml.safe_load((ROOT / "configs" / "bench.yaml").read_text())
    assert bench["verifier"]["deduplicate_drafts"] is True
    del bench["verifier"]["deduplicate_drafts"]
    assert load_config(None, base=bench).config_hash() == load_config(ROOT / "configs" / "bench.yaml").config_hash()
    bench["verifier"]["deduplicate_drafts"] = False
    assert load_config(None, base=bench).config_hash() != load_config(ROOT / "configs" / "bench.yaml").config_hash()


def test_a_row_answered_again_counts_the_passes_saved_in_both_passes():
    """The ``wider`` fallback drafts and verifies a flagged row again: its output row counts
    the passes saved in the first pass and in the fallback's (either may be null)."""
    from specrag_batch.core.records import FallbackAnswer, QueryRow, SelectedAnswer
    from specrag_batch.stages import output_record

    from ..pipeline_runs import INFO

    def row(saved):
        r = QueryRow(row_index=0, query_id="q0", query="Which city?", task="qa", gold=["Paris"])
        r.drafts = [Draft(["d1"], "Paris", "The text says so.", score=-1.0)]
        r.selection = SelectedAnswer(0, -1.0, low_confidence=True, fast_path=False)
        r.verifier_drafts_deduplicated = saved
        return r

    for first, again, expect in ((2, 3, 5), (None, 3, 3), (2, None, 2), (None, None, None)):
        r = row(first)
        r.fallback = FallbackAnswer("fallback_wider", row(again))
        rec = output_record(r, dedupe(), INFO)
        assert rec["answer_source"] == "fallback_wider" and rec[COUNT] == expect
