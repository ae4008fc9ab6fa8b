"""``verifier.deduplicate_drafts`` on the FAKE engine (tests/fakes.py; real SmolLM2 tokenizer,
real rows): a row's drafts with the same verifier input [Q, α, β, R] share one verifier
forward pass; the verifier receives each distinct input of a row once, every duplicate gets
its twin's verifier fields, and the records equal those of the switch-off run except for the
``verifier_drafts_deduplicated`` count. The switch: tests/unit/test_verifier_dedup.py."""

from __future__ import annotations

import pytest

from specrag_batch.config import RunConfig
from specrag_batch.stages.evaluation import summarize
from specrag_batch.stages.prompts import Question
from specrag_batch.core.records import Draft, Flag
from specrag_batch.run.manifest import merge_summaries
from specrag_batch.stages.verification import verify

from ..conftest import sample_rows
from ..fakes import FakeEngine, default_reply
from ..pipeline_runs import config, disaggregated, fused
from ..unit.test_verifier_dedup import COUNT, dedupe

pytestmark = pytest.mark.integration


REPEAT = {r["query"] for r in sample_rows("popqa", 3).to_pylist()}
"""Queries whose drafts come from three canned drafts (two share the answer, not the
rationale), so most of their m drafts repeat one another byte for byte."""


CANNED = [" The first passage names the city.\nAnswer: Paris",
          " The second passage names another city.\nAnswer: Lyon",
          " The second passage names another city.\nAnswer: Paris"]


VERIFIER_FIELDS = ("score_self_consistency", "score_self_reflection", "logprob_yes", "logprob_no",
                   "tokens_answer", "tokens_rationale", "flags")


def reply(text: str, h: int) -> str:
    return CANNED[h % 3] if any(q in text for q in REPEAT) else default_reply(text, h)


class RecordingVerifier(FakeEngine):
    """The FAKE engine, keeping the token ids of every verifier prompt it receives."""

    def __init__(self):
        super().__init__()
        self.received: list[tuple[int, ...]] = []

    def prompt_and_next_logprobs(self, prompts, next_ids, desc="score"):
        self.received += [tuple(p) for p in prompts]
        return super().prompt_and_next_logprobs(prompts, next_ids, desc)


@pytest.fixture(scope="module")
def runs():
    """(switch-off records, its verifier, switch-on records, its verifier)."""
    off_verifier, on_verifier = RecordingVerifier(), RecordingVerifier()
    off = fused(config(**{"verifier.deduplicate_drafts": False}), FakeEngine(reply=reply), off_verifier)
    on = fused(dedupe(), FakeEngine(reply=reply), on_verifier)
    return off, off_verifier, on, on_verifier


def _key(draft: dict) -> tuple[str, str]:
    """What the verifier reads of a draft besides Q and R: α as written, β."""
    return draft["written_answer"], draft["rationale"]


def scored(rec: dict) -> list[dict]:
    """The record's drafts the verifier scored."""
    return [d for d in rec["drafts"] if d["tokens_answer"] is not None]


def test_the_verifier_receives_each_distinct_input_of_a_row_once(runs):
    off, off_verifier, on, on_verifier = runs
    assert on_verifier.received == list(dict.fromkeys(off_verifier.received))
    assert len(on_verifier.received) < len(off_verifier.received)  # the test rows do repeat
    assert len(on_verifier.calls_to("prompt_and_next_logprobs")) == len(off_verifier.calls_to("prompt_and_next_logprobs"))


def test_every_duplicate_draft_gets_its_twins_verifier_fields(runs):
    _, _, on, _ = runs
    twins = 0
    for rec in on:
        first: dict = {}
        for d in scored(rec):
            twin = first.setdefault(_key(d), d)
            if twin is not d:
                twins += 1
                assert {f: d[f] for f in VERIFIER_FIELDS} == {f: twin[f] for f in VERIFIER_FIELDS}
    assert twins >= 3


def test_records_equal_the_switch_off_run_but_for_the_count(runs):
    """Answers, selected draft, every score, token count and flag: the same records."""
    off, _, on, _ = runs
    assert all(r[COUNT] is None for r in off)
    assert [{**r, COUNT: None} for r in on] == off
    assert sum(any(q == r["query"] for q in REPEAT) and not r["fast_path"] for r in on) >= 2


def test_the_count_is_the_passes_saved_per_row(runs):
    """Verified drafts minus distinct verifier inputs; 0 on a verified row whose drafts are all
    distinct; null on fast-path and error rows."""
    _, _, on, _ = runs
    distinct_rows = 0
    for rec in on:
        if rec["error"] is not None or rec["fast_path"]:
            assert rec[COUNT] is None
            continue
        drafts = scored(rec)
        assert rec[COUNT] == len(drafts) - len({_key(d) for d in drafts})
        distinct_rows += rec[COUNT] == 0
    assert distinct_rows >= 2 and any(rec[COUNT] for rec in on)


def test_the_count_reaches_the_summary_and_the_manifest_merge(runs):
    off, _, on, _ = runs
    total = sum(r[COUNT] or 0 for r in on)
    assert total > 0 and summarize(on)[COUNT] == total and summarize(off)[COUNT] == 0
    old_marker = {k: v for k, v in summarize(off).items() if k != COUNT}  # written before the count
    assert merge_summaries([summarize(on), summarize(on[:6]), old_marker])[COUNT] == (
        total + sum(r[COUNT] or 0 for r in on[:6]))


def test_chunked_and_disaggregated_runs_save_the_same(runs, tmp_path):
    """Deduplication is within a row, so chunking and the draft Parquet hand-off change nothing."""
    _, _, on, _ = runs
    assert fused(dedupe(chunk_rows=3), FakeEngine(reply=reply), FakeEngine()) == on
    assert disaggregated(dedupe(chunk_rows=3), tmp_path, FakeEngine(reply=reply), FakeEngine()) == on


def test_verify_deduplicates_within_a_row_key_only():
    """Two rows with the same question and the same two drafts each: one pass per (row,
    distinct input), so the repeated question of row 1 is scored again; too-long drafts are
    flagged each and never scored."""
    q = Question("qa", "What is the capital of France?", None, ())
    R = RunConfig().reflection_question

    def items():
        return [(row, q, Draft([], answer, "Because the text says so.")) for row in (0, 1)
                for answer in ("Paris", "Paris", "Lyon")]

    for flag, expect_prompts, expect_saved in ((True, 4, {0: 1, 1: 1}), (False, 6, {0: 0, 1: 0})):
        engine, got, saved = FakeEngine(), items(), {}
        assert verify(engine, got, R, 2048, deduplicate=flag, saved=saved) == {}
        assert sum(c.prompts for c in engine.calls_to("prompt_and_next_logprobs")) == expect_prompts
        assert saved == expect_saved
        assert got[0][2] == got[1][2] != got[2][2] and got[0][2] == got[3][2]
    long_items, saved = items(), {}
    assert verify(FakeEngine(), long_items, R, 8, deduplicate=True, saved=saved) == {} and saved == {}
    assert all(d.flags == [Flag.VERIFIER_INPUT_TOO_LONG] and d.tokens_answer is None for _, _, d in long_items)
