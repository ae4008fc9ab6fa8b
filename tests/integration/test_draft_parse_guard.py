"""Issue 10, fault 4: when parsing or scoring one generated draft raises
(:func:`specrag_batch.stages.drafting.run_drafts`), that row comes out with its ``error`` naming the
reason (``draft_processing_error``) and every other row of the chunk is still answered: one
row's odd output never fails the chunk or the shard, and no row is dropped.

FAKE engine (tests/fakes.py) with the real SmolLM2 tokenizer and real PopQA rows through the
real pipeline; the parser is the real one except for the one row whose drafter output carries
a marker, where it raises (standing in for a parser bug on an output nobody foresaw)."""

from __future__ import annotations

import pytest

from specrag_batch.run import pipeline
from specrag_batch.stages import drafting
from specrag_batch.core.schema import validate_table

from ..conftest import sample_rows
from ..fakes import FakeEngine, default_reply
from ..pipeline_runs import INFO, SHARD, config

pytestmark = pytest.mark.integration

TABLE = sample_rows("popqa", 3)
TARGET = TABLE.to_pylist()[1]
MARKER = "\u2042 unforeseen output"


def reply(text: str, h: int) -> str:
    """The fake's draft; the target row's carries the marker in its rationale."""
    draft = default_reply(text, h)
    return f" {MARKER}.{draft}" if TARGET["query"] in text else draft


def test_a_draft_that_fails_to_parse_fails_its_row_only(monkeypatch):
    real_parse = drafting.parse_draft

    def parse_draft(text, *args, **kwargs):
        if MARKER in text:
            raise ValueError("parser cannot read this draft")
        return real_parse(text, *args, **kwargs)

    monkeypatch.setattr(drafting, "parse_draft", parse_draft)
    cfg = config(chunk_rows=len(TABLE))  # one chunk: the failure happens inside the others' batch
    engine = FakeEngine(reply=reply)
    records = pipeline.process_rows(validate_table(TABLE, SHARD), cfg, drafter=engine, verifier=engine, info=INFO)

    assert [r["query_id"] for r in records] == TABLE.column("query_id").to_pylist()  # each row once, in order
    assert len(engine.calls_to("generate")) == 1  # all rows drafted in one batched call
    for rec in records:
        if rec["query_id"] == TARGET["query_id"]:
            assert rec["error_reason"] == "draft_processing_error", rec
            assert "parsing the draft failed: ValueError: parser cannot read this draft" in rec["error"]
            assert rec["answer"] is None
        else:
            assert rec["error"] is None and rec["error_reason"] is None and rec["answer"], rec
