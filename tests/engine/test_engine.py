"""Drafting and verification with the real vLLM engine (SmolLM2-135M-Instruct on CPU)."""

import math

import pytest

from specrag_batch.drafting import token_char_spans
from specrag_batch.engines import NON_FINITE_FLOOR, clean_logprob, get_engine
from specrag_batch.pipeline import StageTimer, run_speculative
from specrag_batch.prompts import Question, verifier_prompt
from specrag_batch.schema import validate_table

from ..conftest import sample_rows, small_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cfg():
    return small_config(**{"sampling.num_drafts": 3})


@pytest.fixture(scope="module")
def engine(cfg):
    return get_engine(cfg.drafter, cfg.seed)


def test_clean_logprob():
    assert clean_logprob(-1.5) == (-1.5, False)
    assert clean_logprob(float("-inf")) == (NON_FINITE_FLOOR, True)
    assert clean_logprob(float("nan")) == (NON_FINITE_FLOOR, True)
    assert clean_logprob(None) == (NON_FINITE_FLOOR, True)


def test_verifier_spans_are_the_answer_and_rationale_tokens(engine):
    tok = engine.tokenizer
    q = Question("qa", "What is Henry Feilden's occupation?", None, ())
    vp = verifier_prompt(tok, q, "politician", "He was an English Conservative Party politician.",
                         "Do you think the explanation supports the answers? (Yes or No)")
    text = tok.decode(vp.token_ids)
    assert tok.decode(vp.token_ids[vp.answer_tokens.start:vp.answer_tokens.stop]) == " politician"
    assert tok.decode(vp.token_ids[vp.rationale_tokens.start:vp.rationale_tokens.stop]) == \
        " He was an English Conservative Party politician."
    assert text.endswith("(Yes or No)<|im_end|>\n<|im_start|>assistant\n")
    assert "Feilden" in text and "Documents" not in text  # the verifier never sees documents


def test_drafting_and_verification_on_real_rows(cfg, engine):
    rows = validate_table(sample_rows("popqa", 2), "popqa") + validate_table(sample_rows("climate_fever", 2), "cf")
    res = run_speculative(rows, cfg, engine, engine, StageTimer())
    assert sorted(res) == [0, 1, 2, 3]
    for i, (drafts, sel) in res.items():
        assert 1 <= len(drafts) <= 3
        assert len({tuple(d.doc_ids) for d in drafts}) == len(drafts)  # distinct subsets
        assert all(len(d.doc_ids) == 2 for d in drafts)  # k = 2: one document per cluster
        for d in drafts:
            assert math.isfinite(d.score_draft) and d.score_draft <= 0
            if d.valid and not sel.fast_path:
                assert d.score_self_consistency <= 0 and d.score_self_reflection <= 0
                assert d.score == pytest.approx(d.score_draft + d.score_self_consistency + d.score_self_reflection)
        if not sel.fast_path and any(d.valid for d in drafts):
            best = max((d for d in drafts if d.valid), key=lambda d: d.score)
            assert drafts[sel.index].score == best.score
    for i in (2, 3):  # claims: the answer is one of the labels whenever a draft is valid
        drafts, sel = res[i]
        if drafts[sel.index].valid:
            assert drafts[sel.index].answer in cfg.claim_labels


def test_draft_score_matches_drafter_forward_pass(cfg, engine):
    """log ρ_draft from generation log-probs equals the same tokens' prompt log-probs when the
    prompt + draft is fed back through the drafter: the score is the drafter's own likelihood."""
    from specrag_batch.drafting import fitted_prompt, span_logprob
    from specrag_batch.parsing import parse_draft

    rows = validate_table(sample_rows("popqa", 1), "popqa")
    docs = rows[0].documents[:2]
    ids, _ = fitted_prompt(engine.tokenizer, "qa", rows[0].query, docs, None, cfg.claim_labels, 128, 1800)
    gen = engine.generate([ids], max_tokens=48, temperature=0.0, top_p=1.0, seed=0)[0]
    text, spans = token_char_spans(engine.tokenizer, gen.token_ids)
    parsed = parse_draft(text, "qa")
    score = span_logprob(spans, gen.logprobs, parsed.rationale_span)[0] + \
        span_logprob(spans, gen.logprobs, parsed.answer_span)[0]
    replay = engine.prompt_logprobs([ids + gen.token_ids])[0][len(ids):]
    assert len(replay) == len(gen.logprobs)
    rescored = span_logprob(spans, replay, parsed.rationale_span)[0] + \
        span_logprob(spans, replay, parsed.answer_span)[0]
    assert score < 0
    assert rescored == pytest.approx(score, rel=0.1, abs=0.5)
