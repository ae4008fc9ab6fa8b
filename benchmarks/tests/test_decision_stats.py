"""The decision benchmark's statistics (benchmarks/decision_stats.py, issue 13) on small
hand-computed fixtures: McNemar's exact test, the paired bootstrap, the shard time ratio,
oracle accuracy and its recovery, draft parse shares and Table 3 re-selection."""

from __future__ import annotations

import pytest

import decision_stats as ds

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]


def pairs(b: int, c: int, both: int = 0, neither: int = 0) -> tuple[list[bool], list[bool]]:
    """Paired outcomes with b rows right only under a, c right only under b."""
    a = [True] * b + [False] * c + [True] * both + [False] * neither
    bb = [False] * b + [True] * c + [True] * both + [False] * neither
    return a, bb


def test_mcnemar_exact_on_hand_computed_counts():
    # two-sided binomial, 8 of 10 discordant pairs: 2 * (1 + 10 + 45) / 2**10 = 0.109375
    a, b = pairs(8, 2, both=30, neither=7)
    assert ds.mcnemar_exact(a, b) == {"n": 47, "b": 8, "c": 2, "p": pytest.approx(0.109375, abs=1e-12)}
    # the direction does not change a two-sided p
    assert ds.mcnemar_exact(b, a)["p"] == pytest.approx(0.109375, abs=1e-12)
    # 5 of 5: 2 / 2**5 = 0.0625; no discordant pair: p = 1
    assert ds.mcnemar_exact(*pairs(5, 0, both=3))["p"] == pytest.approx(0.0625, abs=1e-12)
    assert ds.mcnemar_exact(*pairs(0, 0, both=3, neither=2))["p"] == 1.0
    with pytest.raises(ValueError, match="differ in length"):
        ds.mcnemar_exact([True], [True, False])


def test_paired_bootstrap_resamples_pairs():
    # identical outcomes that vary across rows: the paired difference is exactly 0 in every
    # resample (an unpaired bootstrap of the two means would give a wide interval)
    a = [True, False] * 10
    assert ds.paired_bootstrap(a, a) == {"n": 20, "diff": 0.0, "ci95": [0.0, 0.0]}
    # differences d = [1, 0]: resampled means are 0, 0.5, 1 with P 1/4, 1/2, 1/4 -> [0, 1]
    r = ds.paired_bootstrap([True, True], [False, True])
    assert r["diff"] == 0.5 and r["ci95"] == [0.0, 1.0]
    # stratified: each dataset keeps its size, so d = [1, 1 | 0, 0] always means 0.5
    r = ds.paired_bootstrap([True, True, False, False], [False, False, False, False],
                            strata=["x", "x", "y", "y"])
    assert r["ci95"] == [0.5, 0.5]
    # b = 8, c = 2 of 47: difference 6/47, interval around it and inside [-1, 1]
    a, b = pairs(8, 2, both=30, neither=7)
    r = ds.paired_bootstrap(a, b)
    assert r["diff"] == pytest.approx(6 / 47)
    assert -1 <= r["ci95"][0] < 6 / 47 < r["ci95"][1] <= 1
    assert ds.paired_bootstrap(a, b) == r  # seeded


def test_bootstrap_ci_of_a_mean():
    assert ds.bootstrap_ci([1.0] * 5) == [1.0, 1.0]
    assert ds.bootstrap_ci([1.0, 0.0]) == [0.0, 1.0]
    assert ds.bootstrap_ci([1.0, 1.0, 0.0, 0.0], strata=["x", "x", "y", "y"]) == [0.5, 0.5]
    assert all(x != x for x in ds.bootstrap_ci([]))


def test_ratio_bootstrap_and_sign_test_over_shards():
    r = ds.ratio_bootstrap([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    # every shard takes half the time: ratio 0.5 in every resample; sign test 3 of 3: 2/8
    assert r["ratio"] == 0.5 and r["ci95"] == [0.5, 0.5]
    assert (r["faster_units"], r["slower_units"], r["p_sign"]) == (3, 0, 0.25)
    r = ds.ratio_bootstrap([3.0, 1.0], [1.0, 3.0])
    assert r["ratio"] == 1.0 and r["ci95"][0] < 1 < r["ci95"][1] and r["p_sign"] == 1.0
    # a tie is neither faster nor slower: 1 of 1 untied shards -> p = 1
    r1 = ds.ratio_bootstrap([1.0, 2.0], [1.0, 3.0])
    assert (r1["faster_units"], r1["slower_units"], r1["p_sign"]) == (1, 0, 1.0)
    assert ds.verdict_speed(ds.ratio_bootstrap([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])) == "yes"
    assert ds.verdict_speed(r) == "no difference shown"
    assert ds.verdict_speed(ds.ratio_bootstrap([2.0, 4.0], [1.0, 2.0])) == "no: slower"


def draft(answer, flags=(), **scores):
    return {"doc_ids": ["d"], "answer": answer, "written_answer": answer, "rationale": "because",
            "flags": list(flags), **{k: scores.get(k) for k in ("score", "score_draft",
                                                                  "score_self_consistency",
                                                                  "score_self_reflection")}}


def row(qid, task, gold, answer, correct, drafts, error=None, fast_path=False):
    return {"query_id": qid, "task": task, "gold": gold, "answer": answer, "correct": correct,
            "drafts": drafts, "error": error, "fast_path": fast_path}


# a tiny hand-made output table: which rows an oracle answers and which the selection did
TABLE = [
    row("q1", "qa", ["Paris"], "Paris", True, [draft("London"), draft("Paris")]),          # oracle, right
    row("q2", "qa", ["Rome"], "Milan", False, [draft("Rome"), draft("Milan")]),            # oracle, missed
    row("q3", "qa", ["Oslo"], "Bergen", False, [draft("Bergen", ["repetition"])]),          # no oracle
    row("q4", "claim", ["SUPPORTS"], "SUPPORTS", True,
        [draft("REFUTES"), draft("SUPPORTS"), draft("maybe", ["answer_not_a_label"])]),     # oracle, right
    row("q5", "qa", ["Lima"], None, None, None, error="row 4: field 'documents': no documents"),  # error: wrong
    row("q6", "choice", ["B"], "blue", True, [draft("red"), draft("blue", ["no_answer_field"])]),  # letter gold
    row("q7", "qa", None, "x", None, [draft("x")]),                                          # ungraded
    # answered right by a fallback pass (Standard RAG), none of its drafts right: not an
    # oracle row, so it does not count as recovered by the selection
    row("q8", "qa", ["Bern"], "Bern", True, [draft("Zurich")]),
]
CHOICES = {"q6": ["red", "blue", "green"]}


def test_oracle_and_recovery_on_a_hand_made_table():
    o = ds.oracle(TABLE, CHOICES, LABELS)
    # graded: q1..q6, q8 (q5 errored: wrong, no drafts; q7 has no gold); oracle rows q1 q2 q4
    # q6, of which the selection answered q1 q4 q6
    assert o == {"n": 7, "oracle": 4 / 7, "n_oracle": 4, "recovered": 3 / 4}
    assert [ds.row_correct(r, CHOICES.get(r["query_id"]), LABELS) for r in TABLE] == \
        [True, False, False, True, False, True, None, True]
    assert ds.draft_correct(TABLE[3], None, LABELS) == [False, True, False]


def test_draft_parse_and_valid_shares():
    s = ds.draft_shares(TABLE)
    # 12 drafts; parse flags on 3 (repetition, answer_not_a_label, no_answer_field);
    # only answer_not_a_label makes a draft invalid for selection
    assert s["n_drafts"] == 12
    assert s["parsed"] == pytest.approx(9 / 12) and s["valid"] == pytest.approx(11 / 12)
    assert s["by_flag"] == {"answer_not_a_label": 1, "no_answer_field": 1, "repetition": 1}


def test_reselection_ablations_follow_the_switches():
    # draft 0: higher drafter score, lower verifier likelihood; full log rho picks draft 1
    drafts = [draft("Rome", score_draft=-1.0, score_self_consistency=-9.0, score_self_reflection=-0.1),
              draft("Milan", score_draft=-3.0, score_self_consistency=-2.0, score_self_reflection=-0.1)]
    rows = [row("r", "qa", ["Rome"], "Milan", False, drafts),
            row("f", "qa", ["Oslo"], "Oslo", True, [draft("Oslo"), draft("Oslo")], fast_path=True)]
    assert ds.reselect_correct(rows, {}, LABELS, seed=0) == [False, True]  # the rows' own outcome
    assert ds.reselect_correct(rows, {}, LABELS, seed=0, use_sc=False) == [True, True]
    assert ds.reselect_correct(rows, {}, LABELS, seed=0, use_draft=False) == [False, True]


def test_summarise_pairs_rows_by_query_id_and_writes_verdicts():
    def cell(outcomes, seconds):
        rows = [row(f"q{i}", "qa", ["a"], "a" if ok else "b", ok, [draft("a" if ok else "b")])
                for i, ok in enumerate(outcomes)]
        shards = [{"name": f"part-{i}.parquet", "rows_out": 1, "seconds": s,
                   "engines": {"m": {"seconds": s, "prompt_tokens": 10, "generated_tokens": 2}}}
                  for i, s in enumerate(seconds)]
        return {"rows": rows, "shards": shards, "roles": {"m": "verifier"}}
    spec_ok, std_ok = pairs(8, 2, both=30, neither=7)
    cells = {"d": {"standard": cell(std_ok, [2.0] * 47), "speculative": cell(spec_ok, [1.0] * 47)}}
    cells["d"]["speculative"]["rows"].reverse()  # pairing is by query id, not position
    res = ds.summarise(cells, {"d": {}}, LABELS, reps=200)
    cmp = res["datasets"]["d"]["comparisons"]["speculative - standard"]
    assert cmp["mcnemar"] == {"n": 47, "b": 8, "c": 2, "p": pytest.approx(0.109375)}
    assert cmp["diff"] == pytest.approx(6 / 47)
    assert cmp["seconds"]["ratio"] == 0.5 and cmp["tokens"]["ratio"] == 1.0
    arms = res["datasets"]["d"]["arms"]
    assert arms["speculative"]["cost"]["s_per_row"] == 1.0
    assert arms["speculative"]["cost"]["models"]["m"]["tokens_per_row"] == 12
    assert set(arms) >= set(ds.SELECTION_ABLATIONS)  # re-selected from the speculative cell
    assert res["pooled"]["comparisons"]["speculative - standard"]["mcnemar"]["b"] == 8
    text = ds.verdicts(res)
    assert "**d**" in text and "p = 0.109" in text and "Faster? **yes**" in text
    assert "| d | 47 |" in ds.tables(res)


def test_other_arms_table_has_a_pooled_row_for_an_arm_run_on_several_datasets():
    """An ablation run on two datasets (as `adaptive` is, to choose its default) gets a pooled
    row beside the per-dataset ones: its paired difference over both datasets' rows, the
    datasets named; an arm run on one dataset gets none."""
    def cell(qids, outcomes):
        rows = [row(q, "qa", ["a"], "a" if ok else "b", ok, [draft("a" if ok else "b")])
                for q, ok in zip(qids, outcomes)]
        shards = [{"name": "part-0.parquet", "rows_out": len(rows), "seconds": 1.0,
                   "engines": {"m": {"seconds": 1.0, "prompt_tokens": 10, "generated_tokens": 2}}}]
        return {"rows": rows, "shards": shards, "roles": {"m": "drafter"}}
    ada1, spec1 = pairs(0, 3, both=5, neither=2)   # d1: adaptive loses 3 rows
    ada2, spec2 = pairs(1, 0, both=5, neither=4)   # d2: adaptive gains 1 row
    q1, q2 = [f"x{i}" for i in range(10)], [f"y{i}" for i in range(10)]
    cells = {"d1": {"speculative": cell(q1, spec1), "adaptive": cell(q1, ada1), "m3": cell(q1, spec1)},
             "d2": {"speculative": cell(q2, spec2), "adaptive": cell(q2, ada2)}}
    res = ds.summarise(cells, {"d1": {}, "d2": {}}, LABELS, reps=200)
    pooled = res["pooled"]["comparisons"]["adaptive - speculative"]
    assert pooled["n"] == 20 and pooled["diff"] == pytest.approx((1 - 3) / 20)
    assert pooled["mcnemar"]["b"] == 1 and pooled["mcnemar"]["c"] == 3
    lines = [ln for ln in ds.tables(res).splitlines() if "adaptive - speculative" in ln]
    assert [ln.split(" | ")[0] for ln in lines] == ["| d1", "| d2", "| pooled (d1, d2)"]
    assert "| 20 |" in lines[-1] and "-10.0" in lines[-1]
    assert not any(ln.startswith("| pooled") and "m3 - speculative" in ln for ln in ds.tables(res).splitlines())


def test_verdict_adaptive_applies_the_declared_rule():
    """sampling.adaptive under the default selection (decision_stats.verdict_adaptive, declared
    2026-12-04): one round when shown faster and not worse by more than 2 points; adaptive when
    it is shown faster and one round not better by 2 points or more; else the one shown more
    accurate, else adaptive (the default it was)."""
    from decision_stats import verdict_adaptive

    def cmp(diff_ci, sec_ci, n=200):
        return {"n": n, "diff": sum(diff_ci) / 2, "ci95": list(diff_ci),
                "seconds": {"n": 20, "ratio": sum(sec_ci) / 2, "ci95": list(sec_ci)}}

    assert verdict_adaptive(cmp((-0.015, 0.03), (0.7, 0.9))) == "one round"
    assert verdict_adaptive(cmp((-0.03, 0.03), (0.7, 0.9))) == "adaptive"  # faster, maybe 3 points worse
    assert verdict_adaptive(cmp((-0.03, 0.015), (1.1, 1.3))) == "adaptive"
    assert verdict_adaptive(cmp((-0.01, 0.05), (1.1, 1.3))) == "one round"  # adaptive faster, maybe 5 worse
    assert verdict_adaptive(cmp((0.01, 0.05), (0.9, 1.1))) == "one round"  # no speed shown: more accurate
    assert verdict_adaptive(cmp((-0.05, -0.01), (0.9, 1.1))) == "adaptive"
    assert verdict_adaptive(cmp((-0.05, 0.05), (0.9, 1.1))) == "adaptive"  # nothing shown: stays
    assert verdict_adaptive(None) == verdict_adaptive(cmp((0, 0), (0.7, 0.9), n=0)) == "not measured"
    assert verdict_adaptive({**cmp((0, 0.1), (0.7, 0.9)), "seconds": {"withheld": "n/a (different machines)"}}) \
        == "not measured"
