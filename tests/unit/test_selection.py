import math

import pytest

from specrag_batch.selection import Draft, combine, consensus, select


def d(ans, sd, sc, sr, valid=True):
    return Draft(doc_ids=["x"], answer=ans, rationale="r", valid=valid,
                 score_draft=sd, score_self_consistency=sc, score_self_reflection=sr)


def test_log_score_is_sum_of_terms_and_equals_log_of_product():
    x = d("a", math.log(0.5), math.log(0.2), math.log(0.9))
    assert combine(x, True, True, True) == pytest.approx(math.log(0.5 * 0.2 * 0.9))
    assert combine(x, False, True, True) == pytest.approx(math.log(0.2 * 0.9))
    assert combine(x, True, False, False) == pytest.approx(math.log(0.5))


def test_argmax_over_valid_drafts_and_switches_change_winner():
    drafts = [d("a", -1.0, -10.0, -0.1), d("b", -5.0, -2.0, -0.1), d("c", 0.0, 0.0, 0.0, valid=False)]
    s = select(drafts)
    assert s.index == 1 and s.score == pytest.approx(-7.1) and not s.fast_path
    assert select(drafts, use_sc=False).index == 0  # without ρ_SC the drafter's favourite wins
    assert drafts[0].score == pytest.approx(-1.1)


def test_tau_min_flags_low_confidence():
    drafts = [d("a", -1.0, -1.0, -1.0)]
    assert select(drafts, tau_min=-2.0).low_confidence is True
    assert select(drafts, tau_min=-4.0).low_confidence is False
    assert select(drafts, tau_min=None).low_confidence is False


def test_no_valid_draft_picks_best_and_flags():
    s = select([d("a", -3.0, None, None, valid=False), d("b", -1.0, None, None, valid=False)])
    assert s.index == 1 and s.low_confidence and s.flags == ["no_valid_draft"]
    assert select([]).index is None


def test_consensus_fast_path():
    drafts = [d("Paris", -2.0, None, None), d("paris.", -1.0, None, None), d("Lyon", -0.5, None, None),
              d("The Paris", -3.0, None, None, valid=True)]
    assert consensus(drafts, 3) == [0, 1, 3]
    assert consensus(drafts, 4) is None
    assert consensus(drafts, None) is None
    s = select(drafts, fast_path=consensus(drafts, 3))
    assert s.fast_path and s.index == 1 and not s.low_confidence


def test_fast_path_ranks_a_draft_without_draft_score_last():
    # a missing ρ_draft is not probability 1: the scored agreeing draft carries the row
    drafts = [d("Paris", None, None, None), d("paris", -4.0, None, None), d("Lyon", -0.1, None, None)]
    s = select(drafts, fast_path=consensus(drafts, 2))
    assert s.fast_path and s.index == 1 and s.score == pytest.approx(-4.0)


def test_unknown_confidence_measure_is_refused():
    with pytest.raises(ValueError, match="confidence"):
        select([d("a", -1.0, -1.0, -1.0)], tau_min=-2.0, confidence="mean")


def test_random_selection_is_seeded():
    drafts = [d(str(i), -float(i), 0.0, 0.0) for i in range(5)]
    picks = {select(drafts, random_seed=s).index for s in range(20)}
    assert len(picks) > 1
    assert select(drafts, random_seed=3).index == select(drafts, random_seed=3).index


def test_missing_enabled_term_ranks_after_every_fully_scored_draft():
    """Issue 10 item 1: a draft the verifier could not score (input too long) kept only its
    draft score (-2) and beat verified drafts (-30); now it ranks last and says why."""
    too_long = d("short", -2.0, None, None)
    drafts = [d("a", -5.0, -20.0, -5.0), too_long, d("b", -6.0, -15.0, -4.0)]
    s = select(drafts)
    assert s.index == 2 and s.score == pytest.approx(-25.0) and s.flags == []
    assert too_long.score is None
    assert too_long.flags == ["missing_score_self_consistency", "missing_score_self_reflection"]
    assert combine(too_long, True, True, True) is None
    assert combine(too_long, True, False, False) == pytest.approx(-2.0)  # the term is off: fine


def test_only_incomplete_drafts_select_the_best_partial_and_flag_low_confidence():
    drafts = [d("a", -3.0, None, -1.0), d("b", -1.0, None, -1.0)]
    s = select(drafts)
    assert (s.index, s.score, s.low_confidence, s.flags) == (1, None, True, ["selected_draft_missing_score"])


def test_consensus_rule_min_c_valid_never_below_two():
    """Issue 10 item 8: c' = max(2, min(c, number of valid drafts))."""
    from specrag_batch.selection import consensus_threshold

    assert consensus_threshold(5, 3) == 3 and consensus_threshold(5, 5) == 5
    assert consensus_threshold(1, 5) == 2 and consensus_threshold(5, 1) is None
    assert consensus_threshold(None, 5) is None and consensus_threshold(3, 0) is None
    three = [d("Paris", -1, None, None), d("paris.", -2, None, None), d("The Paris", -3, None, None)]
    assert consensus(three, 5) == [0, 1, 2]  # a row with 3 subsets where m = 5
    assert consensus(three[:1], 5) is None  # one draft is not a consensus
    assert consensus(three + [d("Rome", -1, None, None, valid=False)] * 2, 5) == [0, 1, 2]
    assert consensus(three + [d("Rome", -1, None, None)], 5) is None  # 3 of 4 valid agree, c' = 4
