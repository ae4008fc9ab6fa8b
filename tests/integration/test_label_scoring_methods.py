"""The label scores' two methods on the fake engine (real SmolLM2 tokenizer):
``prefix`` (the default) asks one request per draft when the labels' first tokens differ and
reads each label's distinguishing tokens only; ``whole_label`` asks one request per label-token
prefix. Both are one engine call per chunk."""

from specrag_batch.stages.prompts import encode_plain
from specrag_batch.core.records import Draft
from specrag_batch.stages.label_scoring import label_prefix, score_labels

from ..fakes import FakeEngine

CLAIMS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]


def _drafts(n):
    return [Draft(doc_ids=[], answer="SUPPORTS", rationale=f"Reason number {i}.") for i in range(n)]


def _prompts(engine, n):
    return [encode_plain(engine.tokenizer, f"Claim {i}: the sea is rising.") for i in range(n)]


def test_prefix_method_sends_one_request_per_draft_and_reads_first_tokens():
    engine, drafts = FakeEngine(), _drafts(3)
    prompts = _prompts(engine, 3)
    sent = score_labels(engine, prompts, drafts, lambda i: CLAIMS, max_model_len=4096)
    assert sent == 3 and [c.prompts for c in engine.calls_to("next_token_logprobs")] == [3]
    for prompt, draft in zip(prompts, drafts):
        prefix = label_prefix(engine.tokenizer, prompt, draft.rationale)
        first = {lab: encode_plain(engine.tokenizer, " " + lab)[0] for lab in CLAIMS}
        want = engine.next_token_logprobs([prefix], [sorted(first.values())])[0]
        assert draft.label_logprobs == {lab: want[t] for lab, t in first.items()}


def test_whole_label_method_scores_every_token_of_every_label():
    engine, drafts = FakeEngine(), _drafts(2)
    prompts = _prompts(engine, 2)
    sent = score_labels(engine, prompts, drafts, lambda i: CLAIMS, max_model_len=4096, method="whole_label")
    toks = {lab: encode_plain(engine.tokenizer, " " + lab) for lab in CLAIMS}
    per_draft = 1 + sum(len(t) - 1 for t in toks.values())  # distinct first tokens: one shared request
    assert sent == 2 * per_draft and len(engine.calls_to("next_token_logprobs")) == 1
    prefix = label_prefix(engine.tokenizer, prompts[0], drafts[0].rationale)
    lab = "NOT_ENOUGH_INFO"
    steps = [engine.next_token_logprobs([prefix + toks[lab][:j]], [[t]])[0][t] for j, t in enumerate(toks[lab])]
    assert drafts[0].label_logprobs[lab] == sum(steps)


def test_prefix_method_scores_labels_sharing_first_tokens_until_they_part():
    engine, drafts = FakeEngine(), _drafts(1)
    prompts = _prompts(engine, 1)
    names = ["NOT_ENOUGH_INFO", "NOT_SUPPORTED", "SUPPORTS"]
    toks = {lab: encode_plain(engine.tokenizer, " " + lab) for lab in names}
    common = next(j for j, (a, b) in enumerate(zip(toks[names[0]], toks[names[1]])) if a != b)
    assert common >= 1  # the tokenizer does split them after a shared start
    sent = score_labels(engine, prompts, drafts, lambda i: names, max_model_len=4096)
    assert sent == 1 + common  # the shared prefix's requests, then the one where they part
    prefix = label_prefix(engine.tokenizer, prompts[0], drafts[0].rationale)
    for lab in names[:2]:
        steps = [engine.next_token_logprobs([prefix + toks[lab][:j]], [[t]])[0][t]
                 for j, t in enumerate(toks[lab][:common + 1])]
        assert drafts[0].label_logprobs[lab] == sum(steps)
    first = toks["SUPPORTS"][0]
    assert drafts[0].label_logprobs["SUPPORTS"] == engine.next_token_logprobs([prefix], [[first]])[0][first]
