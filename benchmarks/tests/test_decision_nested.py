"""Fewer drafts computed after the run (benchmarks/decision_stats.py, issue 13 item 1: the
m sweep and adaptive drafting from the stored drafts of an m = 5 run): the derivation's
premise (a shorter subset draw is a prefix of a longer one) and its selection on hand-made
rows."""

from __future__ import annotations

import numpy as np
import pytest

from specrag_batch.stages.sampling import row_seed, sample_subsets

import decision_stats as ds

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]


@pytest.mark.parametrize("strategy", ["cluster", "cluster_cover", "random", "single_cluster"])
def test_a_shorter_subset_draw_is_a_prefix_of_a_longer_one(strategy):
    rng = np.random.default_rng(7)
    for trial in range(200):
        n, k = int(rng.integers(2, 12)), int(rng.integers(1, 5))
        labels = rng.integers(0, k, n)
        labels = np.unique(labels, return_inverse=True)[1]  # clusters 0..k'-1, none empty
        seed = row_seed(trial, f"q{trial}")
        full = sample_subsets(labels, 7, seed, strategy, k=k)
        for m in range(1, 7):
            assert sample_subsets(labels, m, seed, strategy, k=k) == full[:m], (trial, m)


def draft(answer, sd, sc=None, sr=None, flags=(), tokens=10):
    return {"answer": answer, "written_answer": answer, "rationale": f"r {answer}", "flags": list(flags),
            "score_draft": sd, "score_self_consistency": sc, "score_self_reflection": sr,
            "tokens_draft": tokens}


def row(qid, gold, drafts, correct, fast_path=False, error=None):
    return {"query_id": qid, "task": "qa", "gold": [gold], "drafts": drafts, "correct": correct,
            "fast_path": fast_path, "error": error}


# Verified row: the verifier prefers draft 2 ("Rome", right); the first draft ("Milan") has the
# best drafter score, the first two disagree.
VERIFIED = row("v", "Rome", [draft("Milan", -1.0, -9.0, -1.0), draft("Oslo", -2.0, -9.0, -1.0),
                             draft("Rome", -3.0, -1.0, -0.5), draft("Milan", -1.5, -9.0, -1.0),
                             draft("Oslo", -2.5, -9.0, -1.0)], True)
# Consensus in the first round only: drafts 1-2 agree on the wrong answer, the verifier picks
# the right one among all five.
EARLY = row("e", "Bern", [draft("Zurich", -1.0, -8.0, -1.0), draft("Zurich", -1.2, -8.0, -1.0),
                          draft("Bern", -2.0, -1.0, -0.2), draft("Geneva", -2.0, -9.0, -1.0),
                          draft("Bern", -2.2, -1.1, -0.2)], True)
# Fast path of the run (every valid draft agrees; the verifier never scored them); draft 1
# does not parse.
FAST = row("f", "Lima", [draft("x", -5.0, flags=["empty_answer"]), draft("Lima", -1.0), draft("Lima", -1.1),
                         draft("Lima", -1.3), draft("Lima", -1.2)], True, fast_path=True)


def test_nested_pick_on_hand_made_rows():
    # the run's own pick; 3 verifier passes: one per distinct (answer, rationale)
    assert ds.nested_pick(VERIFIED, num_drafts=5) == (2, 5, 3)
    assert ds.nested_pick(VERIFIED, num_drafts=2) == (0, 2, 2)  # equal verifier terms: the drafter decides
    assert ds.nested_pick(VERIFIED, num_drafts=1) == (0, 1, 1)  # one draft: no consensus, no choice
    assert ds.nested_pick(VERIFIED, num_drafts=5, first_round=2) == (2, 5, 3)  # no first-round consensus
    assert ds.nested_pick(EARLY, num_drafts=5) == (2, 5, 3)
    assert ds.nested_pick(EARLY, num_drafts=5, first_round=2) == (0, 2, 0)  # stopped on the first round
    assert ds.nested_pick(EARLY, num_drafts=2) == (0, 2, 0)
    assert ds.nested_pick(FAST, num_drafts=5) == (1, 5, 0)
    assert ds.nested_pick(FAST, num_drafts=2) == (1, 2, 1)  # one valid draft: selected without scores
    assert ds.nested_pick(FAST, num_drafts=1) == (0, 1, 0)  # no valid draft: the best invalid one


def test_nested_pick_refuses_rows_the_verifier_never_scored():
    # a run with consensus_min 2 took the fast path on 2 of 3; two disagreeing drafts remain
    bad = row("b", "A", [draft("A", -1.0), draft("B", -1.0), draft("A", -1.0)], True, fast_path=True)
    with pytest.raises(ds.NotReselectable, match="row .b.*verifier scores"):
        ds.nested_pick(bad, num_drafts=2)


def test_nested_rows_and_figures():
    error = row("err", "Quito", None, None, error="row 3: field 'query': empty")
    units = ds.nested_rows([VERIFIED, EARLY, FAST, error], {}, LABELS, seed=0)
    by = {u["query_id"]: u for u in units}
    assert [by["v"][v] for v in ds.NUM_DRAFTS_VARIANTS] == [True, True, True, False, False, True]
    assert [by["e"][v] for v in ds.NUM_DRAFTS_VARIANTS] == [True, True, True, False, False, False]
    assert [by["f"][v] for v in ds.NUM_DRAFTS_VARIANTS] == [True, True, True, True, False, True]
    assert all(by["err"][v] is False for v in ds.NUM_DRAFTS_VARIANTS)  # the row's own outcome: wrong
    assert by["e"]["cost"]["adaptive"] == (2, 20, 0) and by["e"]["cost"]["m5"] == (5, 50, 3)
    f = ds.nested_figures(units, reps=200)
    assert f["n"] == 4 and f["n_mismatch"] == 0
    assert f["accuracy"]["m5"] == 3 / 4 and f["accuracy"]["m1"] == 0 and f["accuracy"]["adaptive"] == 2 / 4
    assert f["cost"]["m5"] == {"drafts": 15 / 4, "tokens": 150 / 4, "verifier": 6 / 4}
    assert f["cost"]["adaptive"]["drafts"] == (5 + 2 + 5) / 4
    assert f["vs_baseline"]["adaptive"]["mcnemar"]["c"] == 1  # EARLY: right only with m5
    # a row whose own outcome the derivation does not reproduce is counted
    wrong_run = {**VERIFIED, "query_id": "w", "correct": False}
    assert ds.nested_figures(ds.nested_rows([wrong_run], {}, LABELS, seed=0), reps=50)["n_mismatch"] == 1


def test_nested_rows_skip_an_adaptive_cell():
    adaptive = {**EARLY, "draft_rounds": 1}
    assert ds.nested_rows([VERIFIED, adaptive], {}, LABELS, seed=0) == []


def test_nested_agreement_against_a_cell_that_ran_the_variant():
    # the adaptive run stopped EARLY after 2 drafts (Zurich) and drafted all of VERIFIED, but
    # one of VERIFIED's drafts came out otherwise (a batch of other size)
    ran_early = {**EARLY, "answer": "Zurich", "drafts": EARLY["drafts"][:2]}
    ran_verified = {**VERIFIED, "answer": "Rome",
                    "drafts": VERIFIED["drafts"][:4] + [draft("Lima", -2.5, -9.0, -1.0)]}
    failed = {**FAST, "error": "row 2: field 'drafts': verifier input failed"}
    got = ds.nested_agreement([VERIFIED, EARLY, FAST], [ran_early, ran_verified, failed], "adaptive")
    assert got == {"n": 2, "same_answer": 2, "same_drafts": 1}
    assert ds.nested_agreement([VERIFIED], [{**ran_verified, "answer": "Oslo"}], "adaptive")["same_answer"] == 0


def _figures(diffs: dict, drafts: dict) -> dict:
    return {"n": 100, "baseline": "m5", "vs_baseline": {v: {"ci95": list(ci)} for v, ci in diffs.items()},
            "cost": {v: {"drafts": d, "verifier": d / 2} for v, d in drafts.items()}}


def test_verdict_cheaper_takes_the_cheapest_variant_inside_the_margin():
    drafts = {"m5": 5.0, "m4": 4.0, "m3": 3.0, "m1": 1.0, "adaptive": 4.2}
    f = _figures({"m4": (-0.01, 0.02), "m3": (-0.019, 0.05), "m1": (-0.08, 0.0), "adaptive": (-0.01, 0.01)}, drafts)
    assert ds.verdict_cheaper(f) == "m3"  # m1 is cheaper but its interval reaches -8 points
    f = _figures({"m4": (-0.021, 0.02), "m3": (-0.03, 0.05), "m1": (-0.08, 0.0), "adaptive": (-0.05, 0.01)}, drafts)
    assert ds.verdict_cheaper(f) == "m5"  # none inside the margin: the baseline stays
    assert ds.verdict_cheaper({**f, "n": 0}) == "not measured"
    assert ds.verdict_cheaper(f, margin=0.04) == "m3"


def test_nested_rows_leave_out_a_cell_they_cannot_select_again():
    # the verifier off (or another consensus rule): valid, disagreeing drafts without scores
    unscored = row("u", "A", [draft("A", -1.0), draft("B", -1.0)], True)
    assert ds.nested_rows([VERIFIED, unscored], {}, LABELS, seed=0) == []
