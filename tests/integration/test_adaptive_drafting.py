"""Adaptive drafting (``sampling.adaptive``, stage ``AdaptiveDrafting``) on the FAKE engine
(tests/fakes.py; real SmolLM2 tokenizer, real rows): rows whose first-round drafts meet the
consensus rule stop there and take the fast path; the others get the same m drafts as a
non-adaptive run; round 1 is one batched call over the chunk, round 2 one over the open rows;
the counts of rows per number of rounds reach the manifest. Its config rules:
tests/unit/test_adaptive_drafting.py."""

from __future__ import annotations

import pytest

from specrag_batch.stages.evaluation import summarize
from specrag_batch.core.records import Draft
from specrag_batch.run.manifest import merge_summaries
from specrag_batch.stages.selection import consensus

from ..fakes import FakeEngine, default_reply
from ..pipeline_runs import config, disaggregated, fused
from ..unit.test_adaptive_drafting import AGREE, FIRST, adaptive

pytestmark = pytest.mark.integration


def reply(text: str, h: int) -> str:
    if any(q in text for q in AGREE):
        return " All documents name the same city.\nAnswer: Paris"
    return default_reply(text, h)


@pytest.fixture(scope="module")
def runs():
    """(non-adaptive records, adaptive records, adaptive drafter, adaptive verifier)."""
    reference = fused(config(), FakeEngine(reply=reply), FakeEngine())
    drafter, verifier = FakeEngine(reply=reply), FakeEngine()
    return reference, fused(adaptive(), drafter, verifier), drafter, verifier


def _drafts(rec):
    return [(d["doc_ids"], d["answer"], d["rationale"], d["score_draft"]) for d in rec["drafts"]]


def test_rows_agreeing_in_round_one_stop_and_take_the_fast_path(runs):
    reference, records, _, _ = runs
    m = config().sampling.num_drafts
    c = config().consensus_threshold
    stopped = 0
    for ref, rec in zip(reference, records):
        assert rec["query_id"] == ref["query_id"]
        if ref["error"] is not None:
            assert rec == ref  # rows with an error pass through, no rounds
            continue
        agree = consensus([Draft.from_record(d) for d in ref["drafts"][:FIRST]], c) is not None
        if agree:
            stopped += 1
            assert rec["draft_rounds"] == 1 and len(rec["drafts"]) == FIRST
            assert _drafts(rec) == _drafts(ref)[:FIRST]  # the first subsets, the same drafts
            assert rec["fast_path"] is True and rec["low_confidence"] is False
            assert rec["score_self_consistency"] is None and rec["score_self_reflection"] is None
            assert rec["score"] == rec["score_draft"]  # the fast path's log ρ: the draft score
        else:
            assert rec["draft_rounds"] == 2 and len(rec["drafts"]) == m
            assert {**rec, "draft_rounds": None} == ref  # same drafts, scores and answer
    assert stopped >= 2  # the AGREE rows, at least
    assert any(r["draft_rounds"] == 2 for r in records)


def test_round_one_over_the_chunk_then_round_two_over_the_open_rows(runs):
    """Two generate calls per chunk: FIRST prompts per valid row, then m - FIRST per open row;
    the verifier scores only the valid drafts of rows that did not stop."""
    _, records, drafter, verifier = runs
    answered = [r for r in records if r["error"] is None]
    open_rows = [r for r in answered if r["draft_rounds"] == 2]
    m = config().sampling.num_drafts
    assert [c.prompts for c in drafter.calls_to("generate")] == [FIRST * len(answered),
                                                                  (m - FIRST) * len(open_rows)]
    scored = sum(1 for r in open_rows if not r["fast_path"] for d in r["drafts"]
                 if d["score_self_consistency"] is not None)
    assert sum(c.prompts for c in verifier.calls_to("prompt_and_next_logprobs")) == scored
    assert all(r["score_self_consistency"] is None for r in answered if r["draft_rounds"] == 1)


def test_chunked_and_disaggregated_adaptive_runs_give_the_same_records(runs, tmp_path):
    """Rounds run per chunk; the drafter side's draft_rounds survive the draft Parquet."""
    _, records, _, _ = runs
    assert fused(adaptive(chunk_rows=3), FakeEngine(reply=reply), FakeEngine()) == records
    assert disaggregated(adaptive(chunk_rows=3), tmp_path, FakeEngine(reply=reply), FakeEngine()) == records


def test_rows_per_number_of_rounds_are_counted(runs):
    reference, records, _, _ = runs
    ones = sum(r["draft_rounds"] == 1 for r in records)
    twos = sum(r["draft_rounds"] == 2 for r in records)
    assert summarize(records)["draft_rounds"] == {"1": ones, "2": twos}
    assert summarize(reference)["draft_rounds"] == {}
    merged = merge_summaries([summarize(records), summarize(records[:4]), summarize(reference)])
    assert merged["draft_rounds"] == {"1": ones + sum(r["draft_rounds"] == 1 for r in records[:4]),
                                      "2": twos + sum(r["draft_rounds"] == 2 for r in records[:4])}


def test_a_first_round_of_all_subsets_is_one_round():
    """first_round >= m: every subset in round 1, no second call (never an empty one)."""
    drafter = FakeEngine(reply=reply)
    m = config().sampling.num_drafts
    records = fused(adaptive(**{"sampling.first_round": m}), drafter, FakeEngine())
    assert {r["draft_rounds"] for r in records if r["error"] is None} == {1}
    assert len(drafter.calls_to("generate")) == 1
