"""The pipeline's bookkeeping on the FAKE engine (tests/fakes.py; no vLLM): chunking,
fused vs disaggregated runs, the consensus fast path, one record per input row in order.

The fake's outputs depend only on each prompt's token ids, so any difference between two
runs over the same rows is the pipeline's doing. Real rows (the bundled demo shards), the real
SmolLM2 tokenizer, the real sentence-transformers encoder and K-Means (paper §3.2), real
Parquet for the intermediate draft shard. What a real model computes is tested in
tests/engine. The rows, the config and the two run layouts: tests/pipeline_runs.py.
"""

from __future__ import annotations

import pytest

from specrag_batch.run import pipeline

from ..conftest import sample_rows, small_config
from ..fakes import FakeEngine, default_reply
from ..pipeline_runs import (CLUSTERED, ERRORS, INFO, REASONS, SHARD, TABLE, config, disaggregated, fresh_rows,
                             fused)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reference():
    """The fused run in one chunk: the records every other layout must reproduce."""
    return fused(config(chunk_rows=256))


def test_one_record_per_input_row_in_order_with_errors(reference):
    ids = TABLE.column("query_id").to_pylist()
    assert [r["query_id"] for r in reference] == ids
    by_pos = dict(enumerate(reference))
    dup = ids.index(ids[1], 2)  # the second row with that id
    assert by_pos[dup]["error"].endswith(f"row {dup}: field 'query_id': duplicate id {ids[1]!r}, "
                                         "held by row 1 of this shard")
    assert by_pos[dup]["error_reason"] == "duplicate_query_id"
    for pos, rec in by_pos.items():
        reason = ERRORS.get(rec["query_id"])
        if reason is not None:
            assert reason in rec["error"] and f"row {pos}" in rec["error"], rec
            assert rec["error_reason"] == REASONS[rec["query_id"]], rec
            assert rec["answer"] is None and rec["drafts"] == []
        elif pos != dup:
            assert rec["error"] is None and rec["error_reason"] is None and rec["answer"], rec
            assert len(rec["drafts"]) == small_config().sampling.num_drafts
    assert [r["query_id"] for r in reference if r["error"]] == ["q-null", ids[1], "q-nodocs", "q-blank",
                                                                "q-nochoices"]
    assert {r["run_id"] for r in reference} == {"run-1"} and {r["source_file"] for r in reference} == {SHARD}
    choice = next(r for r in reference if r["query_id"] == "q-choice")
    assert choice["answer"] in ("Paris", "Lyon", "Nice")  # the fake's letter mapped to its option


@pytest.mark.parametrize("chunk_rows", [1, 2])
def test_chunking_does_not_change_records(reference, chunk_rows):
    """Rows go to the engines ``chunk_rows`` at a time (one generate call per chunk with
    rows to draft); the records are the same as in one chunk."""
    eng = FakeEngine()
    recs = fused(config(chunk_rows=chunk_rows), eng)
    assert recs == reference
    chunks_with_drafts = {i // chunk_rows for i, r in enumerate(reference) if r["drafts"]}
    gens = eng.calls_to("generate")
    assert len(gens) == len(chunks_with_drafts)
    assert all(c.prompts <= chunk_rows * small_config().sampling.num_drafts for c in gens)
    assert sum(c.prompts for c in gens) == sum(len(r["drafts"]) for r in reference)


@pytest.mark.parametrize("chunk_rows", [2, 256])
def test_disaggregated_equals_fused(reference, tmp_path, chunk_rows):
    """draft_stage -> intermediate draft Parquet -> verify_stage gives the fused run's
    records, record for record; the drafter never scores and the verifier never drafts."""
    drafter, verifier = FakeEngine(), FakeEngine()
    recs = disaggregated(config(chunk_rows=chunk_rows), tmp_path, drafter, verifier)
    assert recs == reference
    assert {c.method for c in drafter.calls} == {"generate"}
    assert {c.method for c in verifier.calls} == {"prompt_and_next_logprobs"}


def test_consensus_fast_path_skips_the_verifier(tmp_path):
    """Rows whose m drafts agree (paper §3.3 fast path) are not sent to the verifier: the
    verifier scores exactly the valid drafts of the other rows."""
    agree = {r["query"] for r in sample_rows("popqa", 3).to_pylist()[:2]}

    def reply(text, h):
        if any(q in text for q in agree):
            return " All documents name the same city.\nAnswer: Paris"
        return default_reply(text, h)

    cfg = config()
    for run in ("fused", "disaggregated"):
        drafter, verifier = FakeEngine(reply=reply), FakeEngine()
        recs = (fused(cfg, drafter, verifier) if run == "fused"
                else disaggregated(cfg, tmp_path, drafter, verifier))
        fast = [r for r in recs if r["fast_path"]]
        assert {r["query"] for r in fast} == agree, run
        assert all(r["answer"] == "Paris" and r["score_self_consistency"] is None for r in fast)
        slow = [r for r in recs if r["fast_path"] is False]
        assert slow and all(r["score_self_consistency"] is not None for r in slow)
        scored = sum(len(r["drafts"]) for r in slow)  # the default replies are all valid
        assert [c.prompts for c in verifier.calls_to("prompt_and_next_logprobs")] == [scored], run


def test_consensus_off_sends_every_valid_draft_to_the_verifier():
    # deduplication off: every draft here is the same, so on it would score one per row
    cfg = config(**{"selection.consensus_enabled": False, "verifier.deduplicate_drafts": False})
    drafter, verifier = FakeEngine(reply=lambda text, h: " Same.\nAnswer: Paris"), FakeEngine()
    recs = fused(cfg, drafter, verifier)
    answered = [r for r in recs if r["error"] is None]
    assert all(r["fast_path"] is False for r in answered)
    invalid = {"answer_not_a_label", "answer_not_a_choice"}  # "Paris" is no claim label
    valid = [d for r in answered for d in r["drafts"] if not invalid & set(d["flags"])]
    assert 0 < len(valid) < sum(len(r["drafts"]) for r in answered)
    assert [c.prompts for c in verifier.calls_to("prompt_and_next_logprobs")] == [len(valid)]


def test_standard_mode_one_generation_per_row_and_chunk_invariant():
    """Standard RAG: the verifier model answers each row once from all N documents; no
    drafter, no scoring call; the same records in any chunking."""
    ref_engine = FakeEngine()
    ref = pipeline.process_rows(fresh_rows(), config(mode="standard"), drafter=None,
                                verifier=ref_engine, info=INFO)
    assert [r["query_id"] for r in ref] == TABLE.column("query_id").to_pylist()
    answered = [r for r in ref if r["error"] is None]
    assert answered and all(len(r["drafts"]) == 1 and r["mode"] == "standard" for r in answered)
    assert all(r["drafter_model"] is None for r in ref)
    assert [(c.method, c.prompts) for c in ref_engine.calls] == [("generate", len(answered))]
    eng = FakeEngine()
    assert pipeline.process_rows(fresh_rows(), config(mode="standard", chunk_rows=1), drafter=None,
                                 verifier=eng, info=INFO) == ref
    assert len(eng.calls) == len(answered)
    with pytest.raises(ValueError, match="speculative"):
        pipeline.draft_stage(fresh_rows(), config(mode="standard"), drafter=eng)


def test_chunking_with_clustered_subsets(reference):
    """The paper's multi-perspective sampling embeds every (query, document) pair of a chunk
    in one encoder call; a row's clusters, subsets and record do not depend on which rows
    share its chunk."""
    cfg = small_config(**CLUSTERED)
    whole = fused(cfg.model_copy(update={"chunk_rows": 256}))
    assert fused(cfg.model_copy(update={"chunk_rows": 1})) == whole
    assert whole != reference  # the clustered subsets are not the random ones
