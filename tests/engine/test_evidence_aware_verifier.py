"""``verifier.evidence_aware`` (paper Table 2, Score(α|Q,δ)) on the real vLLM engine with
SmolLM2-135M: the pass sent is [Q, δ_j, α, β, R] with the documents in it, log ρ_SC is the sum
of the engine's prompt log-probs over exactly α's and β's tokens of that pass (recomputed here
by a separate prompt_logprobs call), log ρ_SR is read at the next token of the same pass, and
the documents change the scores (a passage holding the rationale makes β likelier than an
unrelated one; no documents give yet other scores). Prompt layout without a model:
tests/unit/test_evidence_aware_verifier.py; the pipeline on the fake engine:
tests/integration/test_evidence_aware_verifier.py."""

from __future__ import annotations

import math

import pytest

from specrag_batch.engines.engine import get_engine
from specrag_batch.stages.prompts import Question, verifier_prompt
from specrag_batch.core.records import Document, Draft
from specrag_batch.stages.verification import verify, word_token_ids

from ..conftest import small_config

pytestmark = pytest.mark.slow

R = "Do you think the explanation supports the answers? (Yes or No)"
Q = Question("qa", "What is the capital of France?", None, ())
ANSWER, RATIONALE = "Paris", "Paris is the capital and the largest city of France."
SUPPORT = [Document("s0", "Paris", "Paris is the capital and the largest city of France, on the Seine."),
           Document("s1", "France", "France is a country in Western Europe.")]
UNRELATED = [Document("u0", "Photosynthesis", "Plants turn light, water and carbon dioxide into sugar."),
             Document("u1", "Volcano", "A volcano is an opening in the crust through which lava erupts.")]


class Recording:
    """The real engine, keeping the token ids of every verifier pass it is sent."""

    def __init__(self, engine):
        self.engine, self.tokenizer, self.sent = engine, engine.tokenizer, []

    def prompt_and_next_logprobs(self, prompts, next_ids, desc="score"):
        self.sent += [list(p) for p in prompts]
        return self.engine.prompt_and_next_logprobs(prompts, next_ids, desc=desc)


@pytest.fixture(scope="module")
def engine():
    cfg = small_config()
    return get_engine(cfg.verifier, cfg.seed)


def scored(engine, documents) -> tuple[Draft, list[int]]:
    draft = Draft([d.doc_id for d in documents or []], ANSWER, RATIONALE, score_draft=-1.0)
    rec = Recording(engine)
    assert verify(rec, [(0, Q, draft)], R, 2000, mode="paper",
                  documents=None if documents is None else [documents]) == {}
    [sent] = rec.sent
    return draft, sent


def test_the_spans_read_are_alpha_and_beta_of_the_pass_that_holds_the_documents(engine):
    tok = engine.tokenizer
    draft, sent = scored(engine, SUPPORT)
    vp = verifier_prompt(tok, Q, ANSWER, RATIONALE, R, documents=SUPPORT)
    assert sent == vp.token_ids  # the documents are in the pass
    text = tok.decode(sent)
    assert text.index(Q.query) < text.index(SUPPORT[0].text) < text.index(SUPPORT[1].text) < text.index(
        "Answer: Paris") < text.rindex(R)
    assert tok.decode(sent[vp.answer_tokens.start:vp.answer_tokens.stop]) == " Paris"
    assert tok.decode(sent[vp.rationale_tokens.start:vp.rationale_tokens.stop]) == " " + RATIONALE
    assert [tok.decode(sent[s.start:s.stop]).strip() for s in vp.document_tokens] == [d.text for d in SUPPORT]
    assert (draft.tokens_answer, draft.tokens_rationale) == (len(vp.answer_tokens), len(vp.rationale_tokens))
    # log ρ_SC: the engine's own prompt log-probs over exactly those positions, nothing else
    lps = engine.prompt_logprobs([sent])[0]
    expect = sum(lps[p] for p in vp.answer_tokens) + sum(lps[p] for p in vp.rationale_tokens)
    assert draft.score_self_consistency == pytest.approx(expect, abs=1e-3)
    assert abs(sum(lps[p] for p in range(1, len(sent))) - expect) > 1.0  # the rest of the pass is not in it
    # log ρ_SR: P(Yes) at the next token of the same pass
    yes = word_token_ids(tok, "yes")
    nxt = engine.prompt_and_next_logprobs([sent], sorted(yes))[0][1]
    assert draft.logprob_yes == pytest.approx(math.log(sum(math.exp(nxt[t]) for t in yes)), abs=1e-3)
    assert draft.score_self_reflection == draft.logprob_yes and draft.flags == []


def test_the_documents_change_the_scores(engine):
    support, _ = scored(engine, SUPPORT)
    unrelated, _ = scored(engine, UNRELATED)
    none, sent = scored(engine, None)
    assert "Documents" not in engine.tokenizer.decode(sent)
    for a, b in ((support, unrelated), (support, none), (unrelated, none)):
        assert abs(a.score_self_consistency - b.score_self_consistency) > 1e-2
        assert abs(a.logprob_yes - b.logprob_yes) > 1e-3
    # a passage holding the rationale's words makes β likelier than an unrelated passage
    assert support.score_self_consistency > unrelated.score_self_consistency
