"""The decision benchmark's selection diagnosis (benchmarks/decision_stats.py): which term of
log ρ separates a row's right drafts from its wrong ones (pooled and within-row AUROC), the
post-hoc selections of :data:`decision_stats.DIAGNOSIS_VARIANTS` (one term, two terms, per
token, majority vote, a lower consensus threshold), the expected accuracy of random
selection and the per-answer bias table, on hand-computed fixtures."""

from __future__ import annotations

import math

import numpy as np
import pytest

import decision_stats as ds

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]
K = len(ds.DIAGNOSIS_MEASURES)


def draft(answer, sd, sc, yes, no=-1.0, *, tokens=(10, 2, 8), flags=(), rationale="because"):
    """A verified output draft: log ρ_draft ``sd``, log ρ_SC ``sc``, log P(Yes) ``yes`` (= log
    ρ_SR, paper), log P(No) ``no`` (nats); ``tokens`` = (drafter tokens of β+α, verifier
    tokens of α, of β)."""
    return {"doc_ids": ["d"], "answer": answer, "written_answer": answer, "rationale": rationale,
            "flags": list(flags), "score": None, "score_draft": sd, "score_self_consistency": sc,
            "score_self_reflection": yes, "logprob_yes": yes, "logprob_no": no,
            "tokens_draft": tokens[0], "tokens_answer": tokens[1], "tokens_rationale": tokens[2]}


def row(qid, gold, drafts, *, correct=None, fast_path=False, task="claim"):
    return {"query_id": qid, "task": task, "query": CLAIM, "gold": gold, "answer": None, "correct": correct,
            "drafts": drafts, "error": None, "fast_path": fast_path}


CLAIM = "The IPCC no longer includes the hockey stick chart in its reports."


def test_draft_measures_are_the_terms_their_sums_and_per_token_values():
    m = dict(zip(ds.DIAGNOSIS_MEASURES, ds.draft_measures(draft("SUPPORTS", -4.0, -10.0, math.log(0.6),
                                                                  math.log(0.2), tokens=(8, 2, 3)),
                                                            "the sky is blue")))
    assert m["draft"] == -4.0 and m["self_consistency"] == -10.0
    assert m["self_reflection"] == pytest.approx(math.log(0.6))
    assert m["self_reflection_contrast"] == pytest.approx(math.log(0.6 / 0.8))
    assert m["draft_per_token"] == -0.5 and m["self_consistency_per_token"] == -2.0
    assert m["log_rho"] == pytest.approx(-14.0 + math.log(0.6))
    assert m["draft+self_consistency"] == -14.0
    assert m["mean_logprob"] == pytest.approx(-0.5 - 2.0 + math.log(0.6))
    assert m["shorter"] == -5.0
    # rationale "because" vs query "the sky is blue": no shared token; a restated query: 0
    assert m["rationale_not_query"] == 1.0
    assert dict(zip(ds.DIAGNOSIS_MEASURES, ds.draft_measures(draft("x", -1.0, -1.0, -0.1, rationale=CLAIM),
                                                             CLAIM)))["rationale_not_query"] == 0.0
    # not fully verified (no log P(No); no verifier tokens): no measures
    assert ds.draft_measures({**draft("x", -1.0, -1.0, -0.1), "logprob_no": None}, "q") is None
    assert ds.draft_measures(draft("x", -1.0, -1.0, -0.1, tokens=(3, 0, 0)), "q") is None


def unit(scores_right, qid="q"):
    """A diagnosis unit whose drafts have the same value in every measure."""
    return {"query_id": qid, "drafts": [((s,) * K, ok, "a", i) for i, (s, ok) in enumerate(scores_right)]}


def test_within_row_auroc_only_compares_drafts_of_the_same_row():
    # every row ranks its right draft first (within-row AUROC 1), but the rows differ in level:
    # the low-scored row A holds a right draft, row C only wrong drafts with high scores, so
    # across rows right drafts look worse: pooled AUROC = (1 + 2) / 8 = 0.375
    units = [unit([(-5.0, True), (-6.0, False)], "A"), unit([(0.0, True), (-1.0, False)], "B"),
             unit([(1.0, False), (2.0, False)], "C"), {"query_id": "fast", "drafts": []}]
    a = ds.selection_diagnosis_auroc(units, reps=200)
    assert (a["n_rows"], a["n_drafts"], a["n_right"], a["n_mixed_rows"], a["n_pairs"]) == (3, 6, 2, 2, 2)
    for name in ds.DIAGNOSIS_MEASURES:
        assert a[name]["pooled"]["auroc"] == pytest.approx(0.375)
        assert a[name]["within_row"]["auroc"] == 1.0
        assert a[name]["within_row"]["ci95"] == [1.0, 1.0]  # every resample with a pair: 1
    # a row that ranks wrong above right, with twice the pairs: (2 + 0) / (2 + 2); ties count 1/2
    units.append(unit([(-3.0, True), (-2.0, False), (-1.0, False)], "D"))
    assert ds.selection_diagnosis_auroc(units, reps=50)["log_rho"]["within_row"]["auroc"] == pytest.approx(2 / 4)
    tie = ds.selection_diagnosis_auroc([unit([(0.0, True), (0.0, False)])], reps=50)
    assert tie["draft"]["within_row"]["auroc"] == 0.5
    # no row with a right and a wrong draft: no within-row figure
    none = ds.selection_diagnosis_auroc([unit([(0.0, True)]), unit([(1.0, False)], "b")], reps=50)
    assert none["draft"]["within_row"]["auroc"] is None and none["draft"]["pooled"]["auroc"] == 0.0


# Claim rows built like the Climate-FEVER failure: a short SUPPORTS draft out-scores longer
# NOT_ENOUGH_INFO drafts in every term although NOT_ENOUGH_INFO is the gold and the majority.
ROWS = [
    row("nei", ["NOT_ENOUGH_INFO"], [draft("SUPPORTS", -5.0, -10.0, -0.5, tokens=(12, 2, 10), rationale=CLAIM),
                                     draft("NOT_ENOUGH_INFO", -9.0, -20.0, -0.9, tokens=(20, 4, 16)),
                                     draft("NOT_ENOUGH_INFO", -8.0, -30.0, -0.9, tokens=(20, 4, 16))],
        correct=False),
    # the verifier never ran: kept outcome, no drafts to diagnose
    row("fast", ["SUPPORTS"], [draft("SUPPORTS", -1.0, None, None, None)] * 3, correct=True, fast_path=True),
    # SUPPORTS is right and picked; an invalid draft neither counts nor is picked
    row("sup", ["SUPPORTS"], [draft("SUPPORTS", -4.0, -12.0, -0.6),
                              draft("NOT_ENOUGH_INFO", -7.0, -25.0, -0.9, tokens=(20, 4, 16)),
                              draft("maybe", -1.0, -1.0, -0.1, flags=["answer_not_a_label"])],
        correct=True),
]


def test_diagnosis_rows_reselect_every_variant_and_keep_fast_path_rows():
    units = ds.selection_diagnosis_rows(ROWS, {}, LABELS, seed=0)
    by = {u["query_id"]: u for u in units}
    # the paper's argmax and every single term pick the short SUPPORTS draft: wrong on "nei"
    for v in ("paper", "draft", "self_consistency", "self_reflection", "length_normalised", "answer_vote"):
        assert by["nei"]["picked"][v] == 0 and by["nei"][v] is False, v
    # the majority vote picks NOT_ENOUGH_INFO (2 of 3 valid drafts); so does consensus_min 3?
    # no: only 2 agree (c' = 3), so it falls back to the paper's argmax
    assert by["nei"]["picked"]["majority_vote"] == 1 and by["nei"]["majority_vote"] is True
    assert by["nei"]["picked"]["consensus_min_3"] == 0
    assert by["nei"]["random_expected"] == pytest.approx(2 / 3)
    assert [d[3] for d in by["nei"]["drafts"]] == [0, 1, 2]
    # fast-path row: no re-selection, no drafts, its own outcome everywhere
    assert by["fast"]["reselected"] is False and by["fast"]["drafts"] == []
    assert by["fast"]["random_expected"] == 1.0 and all(by["fast"][v] is True for v in ds.DIAGNOSIS_VARIANTS)
    # the invalid draft is left out of the diagnosis and of random selection
    assert [d[3] for d in by["sup"]["drafts"]] == [0, 1] and by["sup"]["random_expected"] == 0.5
    f = ds.selection_diagnosis(units, reps=200)
    assert f["accuracy"]["paper"] == pytest.approx(2 / 3) and f["accuracy"]["majority_vote"] == 1.0
    assert f["random_expected"]["accuracy"] == pytest.approx((2 / 3 + 1 + 0.5) / 3)
    assert f["vs_baseline"]["majority_vote"]["diff"] == pytest.approx(1 / 3)
    assert f["auroc"]["n_drafts"] == 5 and f["auroc"]["n_mixed_rows"] == 2
    # longer drafts have the lower log ρ_draft and log ρ_SC here
    assert f["length"]["draft_vs_drafter_tokens"]["n"] == 5
    assert f["length"]["draft_vs_drafter_tokens"]["spearman"] < 0
    assert f["length"]["self_consistency_vs_verifier_tokens"]["spearman"] < 0


def test_answer_bias_counts_drafts_and_selections_per_answer():
    units = ds.selection_diagnosis_rows(ROWS, {}, LABELS, seed=0)
    b = ds.answer_bias(units)
    assert list(b) == ["NOT_ENOUGH_INFO", "SUPPORTS"]  # 3 drafts, then 2
    assert {k: (v["drafts"], v["right"], v["selected"], v["selected_right"]) for k, v in b.items()} == {
        "NOT_ENOUGH_INFO": (3, 2, 0, 0), "SUPPORTS": (2, 1, 2, 1)}
    assert b["SUPPORTS"]["mean"] == pytest.approx({"draft": -4.5, "self_consistency": -11.0,
                                                   "self_reflection": -0.55, "verifier_tokens": 11.0})
    assert b["NOT_ENOUGH_INFO"]["mean"]["self_reflection"] == pytest.approx(-0.9)
    assert ds.answer_bias(units, "majority_vote")["NOT_ENOUGH_INFO"]["selected"] == 1


def test_reselect_with_a_lower_consensus_threshold_takes_the_fast_path():
    drafts = [draft("Paris", -3.0, -1.0, -0.1), draft("Lyon", -1.0, -1.0, -0.1),
              draft("Paris", -2.0, -9.0, -0.1), draft("paris.", -2.5, -9.0, -0.1)]
    r = row("q", ["Paris"], drafts, correct=False, task="qa")
    assert ds.reselect_index(r, seed=0) == 1                      # argmax of log ρ: Lyon
    assert ds.reselect_index(r, seed=0, consensus_min=3) == 2     # 3 agree: best ρ_draft of them
    assert ds.reselect_index(r, seed=0, consensus_min=4) == 1     # only 3 agree: argmax again
    assert np.isclose(ds.reselect_correct([r], {}, LABELS, seed=0, consensus_min=3), [1.0]).all()


def test_restated_query_splits_drafts_by_rationale_overlap_with_the_query():
    units = ds.selection_diagnosis_rows(ROWS, {}, LABELS, seed=0)
    got = ds.restated_query(units)
    # one verified draft restates the claim (the wrong SUPPORTS draft the paper picks on "nei")
    assert {k: (v["drafts"], v["right"], v["selected"], v["selected_right"]) for k, v in got.items()} == {
        "restates": (1, 0, 1, 0), "other": (4, 3, 1, 1)}
    assert got["restates"]["self_consistency_per_token"] == pytest.approx(-10.0 / 12)
    assert got["other"]["self_consistency_per_token"] == pytest.approx((-1 - 30 / 20 - 12 / 10 - 25 / 20) / 4)
