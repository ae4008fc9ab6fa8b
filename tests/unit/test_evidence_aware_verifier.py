"""``verifier.evidence_aware`` (the paper's Table 2 variant Score(α|Q,δ)) without a model: the
switch is off by default and hash-neutral off; the verifier input [Q, δ_j, α_j, β_j, R] and its
token spans (on a word tokenizer written here, no tokenizer file); documents cut to fit, never
α or β; each draft's own documents, through the draft Parquet too; scores read over α and β
only; deduplication only between drafts of the same documents. On the fake engine with a real
tokenizer: tests/integration/test_evidence_aware_verifier.py; on SmolLM2:
tests/engine/test_evidence_aware_verifier.py."""

from __future__ import annotations

import math
import re

import pytest

from specrag_batch.run import intermediate
from specrag_batch.config import ADDED_FIELDS, RunConfig
from specrag_batch.stages.prompts import Question, fitted_verifier_prompt, verifier_prompt
from specrag_batch.core.records import Document, Draft, ErrorReason, Flag, QueryRow
from specrag_batch.stages.verification import Verification, draft_documents, verify

R = RunConfig().reflection_question
Q = Question("qa", "Which city is the capital of France?", None, ())
DOCS = [Document("d0", "Paris", "Paris is the capital and largest city of France."),
        Document("d1", "Lyon", "Lyon is a city in France on the Rhone."),
        Document("d2", "", "France borders Spain and Italy.")]


class WordTokenizer:
    """A lossless word tokenizer (each token a run of spaces plus a word, or trailing spaces)
    with no chat template and no special tokens: enough for prompt layout and spans."""

    chat_template = None

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def _id(self, piece: str) -> int:
        if piece not in self.vocab:
            self.vocab[piece] = len(self.words)
            self.words.append(piece)
        return self.vocab[piece]

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        return {"input_ids": [self._id(t) for t in re.findall(r"\s*\S+|\s+", text)]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.words[i] for i in ids)


class StubVerifier:
    """An engine stand-in: per prompt, log P(token at position p) = -(id + 1) / 100 - p / 1000
    (natural log) and the next token's log-probs of the requested ids; records the prompts."""

    def __init__(self):
        self.tokenizer = WordTokenizer()
        self.received: list[list[int]] = []

    def prompt_and_next_logprobs(self, prompts, next_ids, desc="score"):
        self.received += [list(p) for p in prompts]
        return [([None] + [-(t + 1) / 100 - p / 1000 for p, t in enumerate(ids) if p],
                 {t: -1.0 - (sum(ids) % 7) / 10 - t / 1000 for t in next_ids}) for ids in prompts]


def text(tok, ids, span) -> str:
    return tok.decode(ids[span.start:span.stop])


# --- config ---------------------------------------------------------------------------------

def test_off_by_default_and_a_config_without_it_keeps_its_hash():
    """Off, the hash is the one of the same config before the field existed; on, it differs.
    The verifier reads documents only in Speculative RAG with a verifier term in log ρ."""
    from specrag_batch.config import VerifierConfig

    base = RunConfig()
    assert base.verifier.evidence_aware is False and ("verifier", "evidence_aware", False) in ADDED_FIELDS
    data = base.model_dump(mode="json")
    del data["verifier"]["evidence_aware"]
    assert "evidence_aware" in VerifierConfig.model_fields
    from specrag_batch.config.hashing import hashed_view
    assert hashed_view(base.model_dump(mode="json")) == hashed_view(data)
    on = RunConfig.model_validate({"verifier": {"evidence_aware": True}})
    assert on.config_hash() != base.config_hash()
    assert RunConfig.model_validate({"verifier": {"evidence_aware": False}}).config_hash() == base.config_hash()
    assert not base.verifier_reads_documents and not on.verifier_reads_documents  # no verifier term
    scored = {"verifier": {"evidence_aware": True}, "selection": {"use_self_reflection": True}}
    assert RunConfig.model_validate(scored).verifier_reads_documents
    assert not RunConfig.model_validate({**scored, "mode": "standard"}).verifier_reads_documents


def test_the_switch_with_no_verifier_pass_is_named_at_the_start_of_a_run():
    idle = RunConfig.model_validate({"verifier": {"evidence_aware": True}}).idle_settings()
    assert len(idle) == 1 and idle[0].startswith("verifier.evidence_aware is on")
    assert RunConfig.model_validate({"verifier": {"evidence_aware": True},
                                     "selection": {"use_self_reflection": True}}).idle_settings() == []


# --- the prompt -----------------------------------------------------------------------------

def test_the_input_is_question_documents_answer_rationale_reflection_with_exact_spans():
    tok = WordTokenizer()
    answer, rationale = "Paris", "The first document names Paris as the capital."
    vp = verifier_prompt(tok, Q, answer, rationale, R, documents=DOCS[:2])
    ids, full = vp.token_ids, tok.decode(vp.token_ids)
    assert text(tok, ids, vp.answer_tokens) == " Paris"
    assert text(tok, ids, vp.rationale_tokens) == " " + rationale
    assert [text(tok, ids, s).strip() for s in vp.document_tokens] == [d.text for d in DOCS[:2]]
    # order: Q, δ_1, δ_2, α, β, R; the documents sit in the first user turn, before the draft
    starts = [vp.document_tokens[0].start, vp.document_tokens[1].start, vp.answer_tokens.start,
              vp.rationale_tokens.start]
    assert starts == sorted(starts) and vp.document_tokens[1].stop <= vp.answer_tokens.start
    assert full.index(Q.query) < full.index("Documents:") < full.index("[1] Paris") < full.index(
        "[2] Lyon") < full.index("Answer: Paris") < full.index(R)
    assert full.rindex(R) > full.index("Rationale:")
    # no documents: the input of every earlier version, byte for byte
    plain = verifier_prompt(tok, Q, answer, rationale, R)
    assert plain.token_ids == verifier_prompt(tok, Q, answer, rationale, R, documents=()).token_ids
    assert plain.document_tokens == () and "Documents:" not in tok.decode(plain.token_ids)
    # a document without title or text: spans still name each document's text
    vp = verifier_prompt(tok, Q, answer, rationale, R, documents=[DOCS[2], Document("x", "T", ""), DOCS[0]])
    assert [text(tok, vp.token_ids, s).strip() for s in vp.document_tokens] == [DOCS[2].text, "", DOCS[0].text]
    assert text(tok, vp.token_ids, vp.answer_tokens) == " Paris"


def test_drafts_of_one_subset_share_the_prefix_up_to_their_draft():
    """The layout the engine can cache: the question and the subset's documents come before
    anything draft-specific; drafts of other subsets share the prefix up to the first document."""
    tok = WordTokenizer()
    a = verifier_prompt(tok, Q, "Paris", "It says Paris.", R, documents=DOCS[:2])
    b = verifier_prompt(tok, Q, "Lyon", "It says Lyon.", R, documents=DOCS[:2])
    c = verifier_prompt(tok, Q, "Paris", "It says Paris.", R, documents=[DOCS[0], DOCS[2]])
    same = a.document_tokens[-1].stop
    assert a.token_ids[:same] == b.token_ids[:same] and a.token_ids != b.token_ids
    first = a.document_tokens[0].start
    assert a.token_ids[:first] == c.token_ids[:first] and a.token_ids[:same] != c.token_ids[:same]


def test_documents_shrink_to_fit_and_the_draft_is_never_cut():
    tok = WordTokenizer()
    long_docs = [Document("a", "A", " ".join(f"alpha{i}" for i in range(300))),
                 Document("b", "B", " ".join(f"beta{i}" for i in range(300)))]
    rationale = " ".join(f"because{i}" for i in range(40))
    whole, cut = fitted_verifier_prompt(tok, Q, "Paris", rationale, R, long_docs, 1000, 10_000)
    assert not cut and whole.token_ids == verifier_prompt(tok, Q, "Paris", rationale, R, documents=long_docs).token_ids
    budget, cut = fitted_verifier_prompt(tok, Q, "Paris", rationale, R, long_docs, 50, 10_000)
    assert cut and all(len(s) <= 52 for s in budget.document_tokens)  # 50 tokens + " ..."
    limit = len(whole.token_ids) // 3
    small, cut = fitted_verifier_prompt(tok, Q, "Paris", rationale, R, long_docs, 256, limit)
    assert cut and len(small.token_ids) <= limit
    assert text(tok, small.token_ids, small.rationale_tokens) == " " + rationale  # β whole
    assert text(tok, small.token_ids, small.answer_tokens) == " Paris"
    assert all(text(tok, small.token_ids, s).endswith(" ...") for s in small.document_tokens)
    # the draft alone is longer than the context: documents at 16 tokens, still too long
    tiny, cut = fitted_verifier_prompt(tok, Q, "Paris", rationale, R, long_docs, 256, 40)
    assert cut and len(tiny.token_ids) > 40 and all(len(s) <= 18 for s in tiny.document_tokens)


# --- each draft's own documents -------------------------------------------------------------

def _row(drafts, subsets=((0, 1), (0, 2), (1, 2))) -> QueryRow:
    row = QueryRow(0, "q0", Q.query, "qa", top_documents=list(DOCS), subsets=[tuple(s) for s in subsets])
    row.drafts = drafts
    return row


def _draft(subset, answer="Paris", rationale="The documents say Paris.") -> Draft:
    return Draft([DOCS[i].doc_id for i in subset], answer, rationale, score_draft=-1.0)


def test_each_draft_gets_its_own_subset_not_all_n_documents():
    subsets = ((0, 1), (0, 2), (1, 2))
    row = _row([_draft(s) for s in subsets])
    assert draft_documents(row) == [[DOCS[i] for i in s] for s in subsets]
    row.drafts = row.drafts[:2]  # adaptive drafting stopped after its first round
    assert len(draft_documents(row)) == 2
    row.drafts = [_draft((0, 1)), _draft((1, 2))]  # draft 1 is not subset 1's
    with pytest.raises(ValueError, match="draft 1's doc_ids"):
        draft_documents(row)
    row.drafts = [_draft(s) for s in subsets] + [_draft((0, 1))]
    with pytest.raises(ValueError, match="4 drafts for 3 document subsets"):
        draft_documents(row)
    with pytest.raises(ValueError, match="missing"):
        draft_documents(QueryRow(0, "q", "Q", "qa"))


def test_documents_and_subsets_survive_the_draft_parquet_only_when_the_verifier_reads_them():
    row = _row([_draft(s) for s in ((0, 1), (0, 2), (1, 2))])
    failed = QueryRow(1, "q1", "Q1?", "qa", error="row 1: field 'documents': none", error_reason="no_documents")
    drafts = {0: row.drafts}
    back, back_drafts = intermediate.from_table(intermediate.to_table([row, failed], drafts, documents=True), "d")
    assert back[0].top_documents == DOCS and back[0].subsets == row.subsets and back_drafts == drafts
    assert back[1].top_documents is None and back[1].subsets is None
    assert draft_documents(QueryRow(0, "q0", "Q", "qa", top_documents=back[0].top_documents,
                                    subsets=back[0].subsets, drafts=back_drafts[0])) == draft_documents(row)
    table = intermediate.to_table([row, failed], drafts)
    assert table.column("top_documents").null_count == 2 and table.column("subsets").null_count == 2
    plain, _ = intermediate.from_table(table, "d")
    assert plain[0].top_documents is None and plain[0].subsets is None
    old, _ = intermediate.from_table(table.drop_columns(["top_documents", "subsets"]), "d")  # an older shard
    assert old[0].query_id == "q0" and old[0].top_documents is None


# --- scoring --------------------------------------------------------------------------------

def _items(row: QueryRow):
    return [(0, Q, d) for d in row.drafts]


def test_scores_are_read_over_alpha_and_beta_in_the_pass_that_holds_the_documents():
    engine = StubVerifier()
    row = _row([_draft((0, 1)), _draft((0, 2), "Lyon", "Lyon is named.")])
    assert verify(engine, _items(row), R, 10_000, documents=draft_documents(row), doc_budget=256) == {}
    tok = engine.tokenizer
    for draft, docs, ids in zip(row.drafts, draft_documents(row), engine.received):
        vp = verifier_prompt(tok, Q, draft.answer, draft.rationale, R, documents=docs)
        assert vp.token_ids == ids and all(d.text in tok.decode(ids) for d in docs)
        lp = [None] + [-(t + 1) / 100 - p / 1000 for p, t in enumerate(ids) if p]
        expect = sum(lp[p] for p in vp.answer_tokens) + sum(lp[p] for p in vp.rationale_tokens)
        assert draft.score_self_consistency == pytest.approx(expect, abs=1e-12)
        assert (draft.tokens_answer, draft.tokens_rationale) == (len(vp.answer_tokens), len(vp.rationale_tokens))
        assert draft.logprob_yes is not None and draft.score_self_reflection == draft.logprob_yes
        assert draft.flags == []
    # without documents the same drafts are scored over [Q, α, β, R]: other inputs, other scores
    plain = StubVerifier()
    again = _row([_draft((0, 1)), _draft((0, 2), "Lyon", "Lyon is named.")])
    assert verify(plain, _items(again), R, 10_000) == {}
    assert all(DOCS[0].text not in plain.tokenizer.decode(ids) for ids in plain.received)
    assert [d.score_self_consistency for d in again.drafts] != [d.score_self_consistency for d in row.drafts]


def test_identical_drafts_share_a_pass_only_when_their_documents_are_the_same():
    """Without documents, three identical drafts take one pass; with them, the two from the
    same subset still share one and the third (another subset) gets its own."""
    row = _row([_draft((0, 1)), _draft((0, 1)), _draft((1, 2))], subsets=((0, 1), (0, 1), (1, 2)))
    engine, saved = StubVerifier(), {}
    assert verify(engine, _items(row), R, 10_000, deduplicate=True, saved=saved,
                  documents=draft_documents(row)) == {}
    assert len(engine.received) == 2 and saved == {0: 1}
    assert row.drafts[0].score_self_consistency == row.drafts[1].score_self_consistency
    assert row.drafts[2].score_self_consistency != row.drafts[0].score_self_consistency
    plain, saved = StubVerifier(), {}
    row = _row([_draft((0, 1)), _draft((0, 1)), _draft((1, 2))], subsets=((0, 1), (0, 1), (1, 2)))
    assert verify(plain, _items(row), R, 10_000, deduplicate=True, saved=saved) == {}
    assert len(plain.received) == 1 and saved == {0: 2}


def test_cut_documents_are_flagged_and_a_draft_too_long_anyway_is_not_scored():
    long_docs = [Document(f"d{i}", "", " ".join(f"w{i}x{j}" for j in range(400))) for i in range(2)]
    row = QueryRow(0, "q0", Q.query, "qa", top_documents=long_docs, subsets=[(0, 1), (0, 1)])
    row.drafts = [Draft(["d0", "d1"], "Paris", "Short."), Draft(["d0", "d1"], "Paris", "Long " * 500)]
    engine = StubVerifier()
    assert verify(engine, _items(row), R, 400, documents=draft_documents(row), doc_budget=256) == {}
    short, long_ = row.drafts
    assert short.flags == [Flag.VERIFIER_DOCUMENTS_TRUNCATED] and short.score_self_consistency is not None
    assert len(engine.received) == 1 and len(engine.received[0]) <= 400
    assert long_.flags == [Flag.VERIFIER_INPUT_TOO_LONG] and long_.score_self_consistency is None
    with pytest.raises(ValueError, match="1 entries for 2 verifier items"):
        verify(engine, _items(row), R, 400, documents=[long_docs])


def test_the_stage_reads_the_documents_and_fails_a_row_whose_drafts_do_not_match_them():
    cfg = RunConfig.model_validate({"verifier": {"evidence_aware": True},
                                    "selection": {"use_self_reflection": True, "consensus_enabled": False}})
    stage = Verification(cfg, verifier=StubVerifier())
    assert stage.reads[-2:] == ("top_documents", "subsets") and "top_documents" not in Verification.reads
    assert Verification(RunConfig(), verifier=None).reads == Verification.reads
    good = _row([_draft((0, 1)), _draft((0, 2), "Lyon", "Lyon.")])
    bad = _row([_draft((0, 1)), _draft((0, 1), "Lyon", "Lyon.")])
    bad.row_index, bad.query_id = 1, "q1"
    stage([good, bad])
    assert good.error is None and all(math.isfinite(d.score_self_consistency) for d in good.drafts)
    assert bad.error_reason == ErrorReason.VERIFIER_INPUT_FAILED and "draft 1's doc_ids" in bad.error
    assert all(d.score_self_consistency is None for d in bad.drafts)
