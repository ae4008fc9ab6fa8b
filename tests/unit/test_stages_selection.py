import math

import pytest

from specrag_batch.core.records import Draft
from specrag_batch.stages.selection import combine, consensus, select


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


def test_consensus_compares_answers_by_the_answer_vote_key():
    """Consensus compares answers by answer_vote's key, not SQuAD-normalised answers (empty for
    "A" or "The"): drafts answering "The" agree (and take the fast path), as answer_vote and the
    evaluation keep their articles."""
    drafts = [d("The", -1.0, None, None), d("the.", -2.0, None, None), d("Lyon", -0.5, None, None)]
    assert consensus(drafts, 2) == [0, 1]
    assert consensus([d("A", -1.0, None, None), d("The", -1.0, None, None)], 2) is None
    assert consensus([d("...", -1.0, None, None), d("!", -1.0, None, None)], 2) is None


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
    from specrag_batch.stages.selection import consensus_threshold

    assert consensus_threshold(5, 3) == 3 and consensus_threshold(5, 5) == 5
    assert consensus_threshold(1, 5) == 2 and consensus_threshold(5, 1) is None
    assert consensus_threshold(None, 5) is None and consensus_threshold(3, 0) is None
    three = [d("Paris", -1, None, None), d("paris.", -2, None, None), d("The Paris", -3, None, None)]
    assert consensus(three, 5) == [0, 1, 2]  # a row with 3 subsets where m = 5
    assert consensus(three[:1], 5) is None  # one draft is not a consensus
    assert consensus(three + [d("Rome", -1, None, None, valid=False)] * 2, 5) == [0, 1, 2]
    assert consensus(three + [d("Rome", -1, None, None)], 5) is None  # 3 of 4 valid agree, c' = 4


def test_answer_vote_picks_the_majority_answer_where_argmax_picks_a_lone_outlier():
    """ρ per draft (probabilities; every term but ρ_draft is 1): three drafts say Paris
    (.25, .20, .15: mass .60), a lone Lyon .30, Nice .10. argmax takes Lyon (.30 > .25);
    answer_vote sums ρ per normalised answer (Paris .60 > Lyon .30 > Nice .10) and returns
    the best-scored Paris draft, whose log ρ stays the row's score."""
    def p(ans, prob, **kw):
        return d(ans, math.log(prob), 0.0, 0.0, **kw)
    drafts = [p("Lyon", 0.30), p("paris.", 0.20), p("Paris", 0.25), p("The Paris", 0.15), p("Nice", 0.10),
              p("Nice", 0.99, valid=False),          # invalid: never votes
              d("Nice", math.log(0.9), None, 0.0)]   # missing ρ_SC: never votes, ranks last
    assert select(drafts).index == 0
    s = select(drafts, rule="answer_vote")
    assert s.index == 2 and s.score == pytest.approx(math.log(0.25)) and not s.low_confidence
    assert select(drafts, rule="answer_vote", tau_min=math.log(0.24)).low_confidence is False
    assert select(drafts, rule="answer_vote", tau_min=math.log(0.26)).low_confidence is True
    # with the Paris drafts' mass below Lyon's the vote follows the verifier again
    drafts[1:4] = [p("paris.", 0.10), p("Paris", 0.12), p("The Paris", 0.07)]
    assert select(drafts, rule="answer_vote").index == 0


def test_length_normalised_ranks_by_log_prob_per_token():
    """A short draft: log ρ_draft -2 over 4 drafter tokens, log ρ_SC -1 over 1 + 1 verifier
    tokens, log ρ_SR -0.1: log ρ = -3.1, per token -0.5 - 0.5 - 0.1 = -1.1. A long draft:
    -4 over 40, -3 over 2 + 28, -0.1: log ρ = -7.1, per token -0.1 - 0.1 - 0.1 = -0.3.
    argmax takes the short one, length_normalised the long one (its score stays log ρ)."""
    short = d("Lyon", -2.0, -1.0, -0.1)
    short.tokens_draft, short.tokens_answer, short.tokens_rationale = 4, 1, 1
    long = d("Paris", -4.0, -3.0, -0.1)
    long.tokens_draft, long.tokens_answer, long.tokens_rationale = 40, 2, 28
    assert select([short, long]).index == 0
    s = select([short, long], rule="length_normalised")
    assert s.index == 1 and s.score == pytest.approx(-7.1)
    assert select([short, long], rule="length_normalised", tau_min=-1.0, confidence="mean_logprob").low_confidence is False
    # a fully scored draft without token counts ranks after those with a per-token measure,
    # before a draft missing a term
    uncounted = d("Nice", -0.1, -0.1, -0.1)
    assert select([uncounted, short, d("Rome", -0.01, None, -0.01)], rule="length_normalised").index == 1
    assert select([uncounted, d("Rome", -0.01, None, -0.01)], rule="length_normalised").index == 0


def test_selection_rules_keep_fast_path_random_and_missing_term_rules():
    drafts = [d("Paris", -2.0, None, None), d("paris", -1.0, None, None), d("Lyon", -0.5, None, None)]
    for rule in ("argmax", "answer_vote", "length_normalised"):
        assert select(drafts, fast_path=[0, 1], rule=rule).index == 1
        assert select(drafts, random_seed=3, rule=rule).index == select(drafts, random_seed=3).index
        s = select([d("a", -3.0, None, -1.0), d("b", -1.0, None, -1.0)], rule=rule)
        assert (s.index, s.flags) == (1, ["selected_draft_missing_score"])
        # no valid draft: the best invalid one by log ρ, flagged (a vote would give "a": mass
        # log(2 e^-1.5) = -0.81 > -1)
        s = select([d("a", -1.5, 0.0, 0.0, valid=False), d("a", -1.5, 0.0, 0.0, valid=False),
                    d("b", -1.0, 0.0, 0.0, valid=False)], rule=rule)
        assert (s.index, s.flags) == (2, ["no_valid_draft"])
    with pytest.raises(ValueError, match="rule"):
        select(drafts, rule="vote")


def test_selection_rule_is_in_the_config_hash_only_away_from_the_paper_default():
    from specrag_batch.config import RunConfig

    base = RunConfig()
    assert base.selection.rule == "argmax"
    # recorded at fa4b01a, before the option (and before the defaults changed since: verifier
    # deduplication and adaptive drafting on, log ρ_SC and log ρ_SR off)
    assert base.model_copy(update={"verifier": base.verifier.model_copy(update={"deduplicate_drafts": False}),
                                   "sampling": base.sampling.model_copy(update={"adaptive": False}),
                                   "selection": base.selection.model_copy(update={"use_self_consistency": True,
                                                                                  "use_self_reflection": True})}
                           ).config_hash() == "420716c9f187c07c"
    hashes = {RunConfig.model_validate({"selection": {"rule": r}}).config_hash()
              for r in ("answer_vote", "length_normalised")}
    assert len(hashes) == 2 and base.config_hash() not in hashes
    with pytest.raises(Exception, match="rule"):
        RunConfig.model_validate({"selection": {"rule": "vote"}})


def test_the_default_leaves_self_consistency_out_where_bench_and_production_keep_it():
    """The default leaves log ρ_SC out (decision 007) and log ρ_SR too (decision 008; the
    figures: benchmarks/studies/selection-rules.md): a run with the default config ranks drafts by
    log ρ_draft alone, so a terse draft the verifier's summed α/β log-probs favour no longer
    wins; configs/bench.yaml keeps the paper's three terms and so the hash of its archived cells,
    and configs/production-gpu.yaml (unmeasured 7B verifier, a tau_min on that log ρ) keeps them."""
    from pathlib import Path

    from specrag_batch.config import RunConfig, load_config
    from specrag_batch.core.records import QueryRow
    from specrag_batch.stages.selection import Selection

    root = Path(__file__).resolve().parents[2]
    bench, prod = load_config(root / "configs/bench.yaml"), load_config(root / "configs/production-gpu.yaml")
    assert RunConfig().selection.use_self_consistency is False
    assert bench.selection.use_self_consistency is True and prod.selection.use_self_consistency is True
    assert bench.config_hash() == "4a8bea3894232945"  # the archived cells' (benchmarks/decision/cells)
    picked = {}
    for name, cfg in (("default", RunConfig()), ("bench", bench)):
        row = QueryRow(0, "q", "Who?", "qa", consensus=[],
                       drafts=[d("long right answer", -2.0, -30.0, -0.2), d("x", -6.0, -4.0, -0.3)])
        Selection(cfg)([row])
        picked[name] = (row.selection.index, row.selection.score)
    # the default leaves log ρ_SR out too: log ρ = log ρ_draft alone
    assert RunConfig().selection.use_self_reflection is False and bench.selection.use_self_reflection is True
    assert picked["default"] == (0, pytest.approx(-2.0)) and picked["bench"] == (1, pytest.approx(-10.3))
