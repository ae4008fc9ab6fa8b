"""Issue 10, fault 3: the verifier scores α as the drafter WROTE it. For a multiple-choice row
the drafter writes a letter ("(C)", "C"); the draft's ``answer`` is the option text it names
("Nice"), but log ρ_SC = log P(α, β | Q) (paper §3.3) is over the tokens the drafter wrote, so
the verifier input [Q, α, β, R] must carry the letter, not the option text.

FAKE engine (tests/fakes.py) with the real SmolLM2 tokenizer; a real choice row through the
real pipeline (validation, sampling, drafting, parsing, verification)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from specrag_batch.run import pipeline
from specrag_batch.stages.prompts import verifier_prompt
from specrag_batch.core.schema import validate_table
from specrag_batch.stages.verification import question

from ..conftest import sample_rows
from ..fakes import FakeEngine, default_reply, prompt_task
from ..pipeline_runs import INFO, SHARD, config
from .test_verifier_dedup import RecordingVerifier

pytestmark = pytest.mark.integration

CHOICES = ["Paris", "Lyon", "Nice"]
WRITTEN = ["(C)", "C"]
"""How the drafter writes its choice of option C (alternating by prompt hash)."""


def reply(text: str, h: int) -> str:
    if prompt_task(text) != "choice":
        return default_reply(text, h)
    return f" The third passage names the coastal city (case {h % 97}).\nAnswer: {WRITTEN[h % 2]}"


def test_the_verifier_scores_the_letter_the_drafter_wrote_not_the_option_text():
    docs = sample_rows("popqa", 1).to_pylist()[0]["documents"]
    table = pa.Table.from_pylist(
        [{"query_id": "q-choice", "query": "Which French city lies on the Mediterranean coast?",
          "task": "choice", "documents": docs, "choices": CHOICES, "gold": ["Nice"]}],
        schema=sample_rows("popqa", 1).schema)
    # every draft agrees on "Nice": without this switch the consensus fast path skips the verifier
    cfg = config(**{"selection.consensus_enabled": False})
    rows = validate_table(table, SHARD)
    verifier = RecordingVerifier()
    [rec] = pipeline.process_rows(rows, cfg, drafter=FakeEngine(reply=reply), verifier=verifier, info=INFO)

    assert rec["error"] is None and rec["answer"] == "Nice" and not rec["fast_path"]
    drafts = rec["drafts"]
    assert {d["answer"] for d in drafts} == {"Nice"}
    assert {d["written_answer"] for d in drafts} == set(WRITTEN)  # both forms occur
    tok, q = verifier.tokenizer, question(rows[0], cfg)
    for d in drafts:
        written = verifier_prompt(tok, q, d["written_answer"], d["rationale"], cfg.reflection_question)
        as_option = verifier_prompt(tok, q, d["answer"], d["rationale"], cfg.reflection_question)
        alpha = tok.decode([written.token_ids[i] for i in written.answer_tokens])
        assert alpha.strip() == d["written_answer"]
        assert tuple(written.token_ids) in verifier.received
        assert tuple(as_option.token_ids) not in verifier.received
        assert d["tokens_answer"] == len(written.answer_tokens)
    assert len(verifier.received) == len(drafts)
