"""Answer recovery after a budget cut (``drafter.answer_on_truncation``) on the FAKE engine
(tests/fakes.py) with the real SmolLM2 tokenizer: a draft that stops at ``drafter.max_tokens``
before its ``Answer:`` line is continued after a forced ``"\\nAnswer:"`` in one more batched
call; log ρ_draft is the sampled log-probs of β and α only; off, drafting is unchanged. The
switch and the config hash: tests/unit/test_answer_on_truncation.py."""

from __future__ import annotations

import math

import pytest

from specrag_batch.stages.drafting import (ANSWER_MARKER, DraftRequest, answer_marker_ids, force_answers,
                                          max_prompt_tokens, run_drafts, score_generation, token_char_spans)
from specrag_batch.engines.engine import GenerationResult
from specrag_batch.core.parsing import ANSWER_FORCED, NO_ANSWER_FIELD, TRUNCATED, parse_draft
from specrag_batch.stages.prompts import drafter_prompt_ids
from specrag_batch.core.schema import Document

from ..conftest import sample_rows, small_config
from ..fakes import FakeEngine, prompt_task, real_tokenizer, token_logprob

pytestmark = pytest.mark.integration


LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO"]


DOCS = [Document("d1", "Tower", "The Eiffel Tower stands in Paris."),
        Document("d2", "City", "Paris is the capital of France.")]


LONG = (" The first passage says the tower stands in the city, and the second passage says that "
        "the same city is the capital of the country, so taken together the passages")
"""A rationale that runs past the test budget and never reaches an answer line."""


CUT_AFTER_ANSWER = " The tower is there.\nAnswer: Paris, the capital of France, a city on the river Seine"
"""A draft that reaches its answer line and is then cut inside the answer."""


WELL_FORMED = " The tower is in Paris.\nAnswer: Paris"


MAX_TOKENS = 12


ANSWER = {"claim": " SUPPORTS", "qa": " Paris"}


def reply(text: str, h: int) -> str:
    """Per prompt: the continuation of a forced answer line (the prompt ends with it) is the
    task's answer; otherwise the query picks a long rationale, a draft cut after its answer
    line or a well-formed draft."""
    if text.endswith("Answer:"):
        return ANSWER[prompt_task(text)]
    if "Who finishes?" in text:
        return WELL_FORMED
    if "Who is cut late?" in text:
        return CUT_AFTER_ANSWER
    return LONG


class Recorder(FakeEngine):
    """The fake engine, recording each generate call's prompts and max_tokens."""

    def generate(self, prompts, **kw):
        self.sent = getattr(self, "sent", []) + [([list(p) for p in prompts], kw["max_tokens"])]
        return super().generate(prompts, **kw)


def requests(tok) -> list[DraftRequest]:
    """A claim and a QA prompt cut before their answer, one that finishes, one cut after its
    answer line."""
    rows = [("claim", "The tower is in Paris."), ("qa", "Where is the tower?"), ("qa", "Who finishes?"),
            ("qa", "Who is cut late?")]
    return [DraftRequest(i, task, ["d1", "d2"], drafter_prompt_ids(tok, task, query, DOCS, None, LABELS))
            for i, (task, query) in enumerate(rows)]


def draft(engine, reqs, answer_max_tokens):
    return run_drafts(engine, reqs, max_tokens=MAX_TOKENS, temperature=0.0, top_p=1.0, seed=0, labels=LABELS,
                      answer_max_tokens=answer_max_tokens)


def ids_of(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def sampled_logprobs(prompt_last: int, ids: list[int]) -> list[float]:
    """What the fake's generate gives each token (tests/fakes.py ``token_logprob``)."""
    return [token_logprob(prompt_last if i == 0 else ids[i - 1], t, i) for i, t in enumerate(ids)]


def test_a_draft_cut_before_its_answer_gets_one_from_one_more_call():
    tok = real_tokenizer()
    eng, reqs = Recorder(reply=reply), requests(tok)
    drafts = draft(eng, reqs, 16)
    marker = answer_marker_ids(tok)
    assert tok.decode(marker) == ANSWER_MARKER and len(marker) == 3
    cut = ids_of(tok, LONG)[:MAX_TOKENS]
    # exactly one more call, over exactly the prompts cut before an answer line, with the budget
    assert [n for _, n in eng.sent] == [MAX_TOKENS, 16] and len(eng.calls_to("generate")) == 2
    assert eng.sent[1][0] == [reqs[0].prompt_ids + cut + marker, reqs[1].prompt_ids + cut + marker]
    assert all(tok.decode(p).endswith("stands in the city, and\nAnswer:") for p in eng.sent[1][0])
    for d, task, answer in ((drafts[0], "claim", "SUPPORTS"), (drafts[1], "qa", "Paris")):
        assert d.valid and d.answer == answer and d.written_answer == answer, d
        assert d.flags == [TRUNCATED, ANSWER_FORCED]
        assert d.rationale == tok.decode(cut).strip()
        cont = ids_of(tok, ANSWER[task])
        # ρ_draft: the sampled log-probs of β (the cut rationale) and α (the continuation) only
        expected = sum(sampled_logprobs(reqs[0].prompt_ids[-1], cut)) + sum(sampled_logprobs(marker[-1], cont))
        assert d.score_draft == pytest.approx(expected, abs=1e-9)
        assert d.tokens_draft == len(cut) + len(cont)
    # the other two drafts are the first call's, unchanged
    assert drafts[2].flags == [] and drafts[2].answer == "Paris"
    assert drafts[3].flags == [TRUNCATED] and drafts[3].answer.startswith("Paris, the capital")
    # usage counts both calls: prompts, generated tokens (the continuations too), calls
    first = [len(ids_of(tok, t)[:MAX_TOKENS]) for t in (LONG, LONG, WELL_FORMED, CUT_AFTER_ANSWER)]
    conts = [len(ids_of(tok, ANSWER[t])) for t in ("claim", "qa")]
    assert eng.stats.calls == 2 and eng.stats.generated_tokens == sum(first) + sum(conts)
    assert eng.stats.prompt_tokens == sum(len(r.prompt_ids) for r in reqs) + sum(map(len, eng.sent[1][0]))


def test_switch_off_drafts_as_before():
    """Off (the default): one call, the cut drafts keep today's flags and last-sentence guess;
    on, the drafts that needed no answer are the same as off."""
    tok = real_tokenizer()
    reqs = requests(tok)
    eng = Recorder(reply=reply)
    off = draft(eng, reqs, None)
    assert len(eng.sent) == 1 and eng.stats.calls == 1
    default = run_drafts(FakeEngine(reply=reply), reqs, max_tokens=MAX_TOKENS, temperature=0.0, top_p=1.0,
                         seed=0, labels=LABELS)
    assert default == off
    assert off[0].flags[:2] == [TRUNCATED, NO_ANSWER_FIELD] and not off[0].valid  # no label in the guess
    assert off[1].flags[:2] == [TRUNCATED, NO_ANSWER_FIELD] and ANSWER_FORCED not in off[1].flags
    assert not off[1].valid  # no sentence break: the whole text is the guessed answer, β is empty
    on = draft(FakeEngine(reply=reply), reqs, 16)
    assert on[2:] == off[2:] and on[:2] != off[:2]


def test_no_call_when_nothing_was_cut_before_its_answer():
    tok = real_tokenizer()
    eng = Recorder(reply=reply)
    reqs = requests(tok)[2:]
    assert draft(eng, reqs, 16) == draft(FakeEngine(reply=reply), reqs, None)
    assert len(eng.sent) == 1


def test_forced_marker_tokens_lie_outside_alpha_and_beta():
    """The joined sequence: the marker's tokens have the NaN placeholder and their characters
    are outside both spans parse_draft finds, so they never enter ρ_draft; the continuation's
    answer line ends at its first line break."""
    tok = real_tokenizer()
    eng = FakeEngine(reply=lambda text, h: " Paris\nRationale: more" if text.endswith("Answer:") else LONG)
    prompt = requests(tok)[1].prompt_ids
    first = eng.generate([prompt], max_tokens=MAX_TOKENS, temperature=0.0, top_p=1.0, seed=0)
    gens, forced = force_answers(eng, [prompt], first, answer_max_tokens=16, temperature=0.0, top_p=1.0, seed=0)
    joined, marker = gens[0], forced[0]
    assert joined.token_ids[marker.start:marker.stop] == answer_marker_ids(tok)
    assert all(math.isnan(joined.logprobs[i]) for i in marker) and joined.finish_reason == "length"
    assert not any(math.isnan(x) for i, x in enumerate(joined.logprobs) if i not in marker)
    text, spans = token_char_spans(tok, joined.token_ids)
    parsed = parse_draft(text, "qa", finish_reason=joined.finish_reason)
    assert parsed.answer == "Paris" and NO_ANSWER_FIELD not in parsed.flags
    for i in marker:
        start, end = spans[i]
        for span in (parsed.rationale_span, parsed.answer_span):
            assert end <= span[0] or start >= span[1], (i, spans[i], span)
    d, score, tokens = score_generation(tok, joined, "qa", LABELS, None, marker)
    assert math.isfinite(score) and d.flags == [TRUNCATED, ANSWER_FORCED]
    # the answer span is " Paris" only: the rest of the continuation is not α
    assert tokens == MAX_TOKENS + len(ids_of(tok, " Paris"))


def test_a_forced_token_inside_a_span_is_refused():
    """score_generation refuses to score a forced (unsampled) token that the parse put in α or
    β; run_drafts turns that into the draft's processing error, never a silent score."""
    tok = real_tokenizer()
    ids = ids_of(tok, WELL_FORMED)
    gen = GenerationResult(WELL_FORMED, ids, [-1.0] * len(ids), "stop")
    with pytest.raises(ValueError, match="rationale span"):
        score_generation(tok, gen, "qa", LABELS, None, range(1, 2))
    with pytest.raises(ValueError, match="answer span"):
        score_generation(tok, gen, "qa", LABELS, None, range(len(ids) - 1, len(ids)))


def test_prompt_room_keeps_marker_and_answer_inside_the_context():
    """On, the drafter prompts leave room for draft + marker + answer (vLLM refuses a prompt at
    the context length); off, the room is ``max_model_len - max_tokens`` as before."""
    from specrag_batch.run import pipeline
    from specrag_batch.core.schema import validate_table

    tok = real_tokenizer()
    assert max_prompt_tokens(tok, 256, 64) == 192 and max_prompt_tokens(tok, 256, 64, 16) == 192 - 3 - 16
    sent = {}
    for on in (False, True):
        cfg = small_config(**{"sampling.strategy": "random", "drafter.max_model_len": 256,
                              "drafter.answer_on_truncation": on, "sampling.num_drafts": 2})
        eng = Recorder(reply=reply)
        pipeline.draft_rows(validate_table(sample_rows("popqa", 3), "s.parquet"), cfg, eng, pipeline.StageTimer())
        sent[on] = [p for p in eng.sent[0][0]]
    assert max(map(len, sent[True])) <= 173 < max(map(len, sent[False])) <= 192


def test_drafting_stage_recovers_answers_and_standard_rag_does_not():
    """Through the pipeline (real rows, random subsets): the switch reaches the drafting stage;
    Standard RAG (the verifier model, a fixed baseline) never recovers an answer."""
    from specrag_batch.run import pipeline
    from specrag_batch.core.schema import validate_table

    for mode, calls in (("speculative", 2), ("standard", 1)):
        cfg = small_config(**{"sampling.strategy": "random", "drafter.max_tokens": MAX_TOKENS,
                              "verifier.max_tokens": MAX_TOKENS, "drafter.answer_on_truncation": True,
                              "mode": mode, "selection.consensus_enabled": False})
        eng = Recorder(reply=reply)
        res = pipeline.process_rows(validate_table(sample_rows("climate_fever", 2), "s.parquet"), cfg,
                                    drafter=eng, verifier=eng, info=pipeline.RunInfo(run_id="r", source_file="s"))
        assert len(eng.sent) == calls, mode
        flags = [f for r in res for d in r["drafts"] for f in d["flags"]]
        if mode == "speculative":
            assert all(d["answer"] == "SUPPORTS" and d["flags"][:2] == [TRUNCATED, ANSWER_FORCED]
                       for r in res for d in r["drafts"])  # then the verifier's flags, if any
            assert ANSWER_FORCED in flags and all(ANSWER_FORCED in r["flags"] for r in res)
        else:
            assert ANSWER_FORCED not in flags and NO_ANSWER_FIELD in flags


def test_answer_marker_room_bounds_the_real_marker():
    """ANSWER_MARKER_ROOM is at least the forced marker's tokens for the packaged tokenizers."""
    from specrag_batch.config import ANSWER_MARKER_ROOM
    from specrag_batch.stages.drafting import answer_marker_ids

    assert 0 < len(answer_marker_ids(real_tokenizer())) <= ANSWER_MARKER_ROOM
