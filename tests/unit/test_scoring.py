"""Scores and requests that need no tokenizer: option labels round trip, self-reflection scores
(the paper's contrast, missing words, only the yes/no ids), the score from stored log-probs,
and a draft request keeping its choices. On every packaged chat template with real tokenizers:
tests/integration/test_scoring_prompts.py."""

import math

import pytest

from specrag_batch.stages.drafting import DraftRequest
from specrag_batch.core.parsing import option_index, option_label
from specrag_batch.stages.verification import SELF_REFLECTION_MODES, reflection_scores, self_reflection_score


def test_option_label_round_trip():
    assert [option_label(i) for i in (0, 25, 26, 27, 51, 52, 701, 702)] == \
        ["A", "Z", "AA", "AB", "AZ", "BA", "ZZ", "AAA"]
    assert all(option_index(option_label(i)) == i for i in range(800))
    assert option_index("a") == -1 and option_index("") == -1


def test_reflection_scores_paper_contrast_and_missing_words():
    read = {1: math.log(0.6), 2: math.log(0.1), 3: math.log(0.2), 4: math.log(0.01), 9: math.log(0.05)}
    sr, y, n, flags = reflection_scores(read, {1, 2}, {3, 4}, "paper")
    assert (sr, y, n, flags) == (pytest.approx(math.log(0.7)), pytest.approx(math.log(0.7)),
                                 pytest.approx(math.log(0.21)), [])
    sr, *_ = reflection_scores(read, {1, 2}, {3, 4}, "contrast")
    assert sr == pytest.approx(math.log(0.7 / 0.91))
    # an id the engine gave no log-prob for, or a word with no single-token spelling: no score
    assert reflection_scores(read, {1}, {7}, "contrast") == (None, None, None, ["self_reflection_unavailable"])
    assert reflection_scores(read, set(), {3}, "paper") == (None, None, None, ["self_reflection_unavailable"])
    assert reflection_scores({}, {1}, {2}, "paper") == (None, None, None, ["self_reflection_unavailable"])
    # probability 0 (-inf): the floor, flagged, never a NaN
    sr, y, n, flags = reflection_scores({1: math.log(0.5), 3: -math.inf}, {1}, {3}, "contrast")
    assert n == -100.0 and flags == ["non_finite_logprob"] and sr == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="self_reflection"):
        reflection_scores(read, {1}, {2}, "other")


def test_reflection_scores_depend_only_on_the_yes_no_ids():
    """The score reads the yes/no ids' own log-probs: ids of other tokens (a top-k's filler,
    whatever k) change nothing, so the score is the same for any top-k an engine might give."""
    base = {1: math.log(0.30), 2: math.log(0.002), 3: math.log(0.25), 4: math.log(0.0004)}
    ref = reflection_scores(base, {1, 2}, {3, 4}, "contrast")
    for k in (5, 20, 100):
        wider = {**base, **{100 + i: -3.0 - i / 50 for i in range(k)}}
        assert reflection_scores(wider, {1, 2}, {3, 4}, "contrast") == ref


def test_self_reflection_score_from_stored_logprobs():
    # P(Yes) = 0.3, P(No) = 0.1: paper log 0.3, contrast log 0.3 / 0.4 = log 0.75
    y, n = math.log(0.3), math.log(0.1)
    assert self_reflection_score(y, n, "paper") == y
    assert self_reflection_score(y, n, "contrast") == pytest.approx(math.log(0.75))
    # the value reflection_scores gives a verified draft, recomputed from its stored log-probs
    top = {1: math.log(0.3), 2: math.log(0.1), 5: math.log(0.5)}
    for mode in SELF_REFLECTION_MODES:
        sr, ly, ln, _ = reflection_scores(top, {1}, {2}, mode)
        assert self_reflection_score(ly, ln, mode) == sr
    # a draft missing either log-prob (not verified) has no self-reflection score
    assert self_reflection_score(None, n, "contrast") is None and self_reflection_score(y, None, "paper") is None
    with pytest.raises(ValueError, match="self_reflection"):
        self_reflection_score(y, n, "other")


def test_draft_request_keeps_choices():
    assert DraftRequest(0, "choice", ["d"], [1], ["a"]).choices == ["a"]
