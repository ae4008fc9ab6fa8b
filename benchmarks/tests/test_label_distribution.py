"""benchmarks/label_distribution.py's analysis (issue 50 item 4) on records written here: the
chosen label arm is compared with the defaults and Standard RAG on the same rows, per-label
recall before and after the prior correction, the pooled figures count Climate-FEVER's rows
once when the n = 400 set holds them."""

import pytest

import label_distribution as ld


def _recs(answers, gold, p=None):
    return [{"answer": a, "gold": [g], "correct": a == g, "label_probability": None if p is None else p[i],
             "score": -float(i), "drafts": [], "fast_path": False} for i, (a, g) in enumerate(zip(answers, gold))]


def test_paired_comparison_auroc_and_recall():
    gold = ["S", "R", "R", "S"]
    cells = {"climate_fever": {
        "default": _recs(["S", "S", "S", "S"], gold), "standard": _recs(["S", "S", "R", "R"], gold),
        "label": _recs(["S", "S", "R", "S"], gold, [0.9, 0.4, 0.8, 0.7]),
        "label-batch": _recs(["S", "R", "R", "S"], gold, [0.9, 0.6, 0.8, 0.7])}}
    res = ld.analyse(cells, prior_on=True)
    fig = res["datasets"]["climate_fever"]
    assert res["chosen_arm"] == "label-batch" and fig["accuracy"]["label-batch"]["value"] == 1.0
    assert fig["label-batch_vs_default"]["diff"] == pytest.approx(0.5)
    assert fig["label-batch_vs_default"]["mcnemar"]["b"] == 2 and fig["label-batch_vs_default"]["mcnemar"]["c"] == 0
    assert fig["label-batch_vs_standard"]["diff"] == pytest.approx(0.5)
    assert fig["auroc"]["label_probability"] is None  # every row right: no AUROC
    assert fig["recall"]["before"]["R"] == {"recall": 0.5, "n": 2} and fig["recall"]["after"]["R"]["recall"] == 1.0
    assert "label-batch_vs_default: +50.0 points" in ld.tables(res)


def test_pooled_counts_the_claims_of_the_400_set_once():
    gold = ["S", "R"]
    arm = {"default": _recs(["S", "S"], gold)}
    cells = {"climate_fever": arm, "climate_fever_400": arm, "arc_challenge": arm}
    assert ld.analyse(cells, prior_on=False)["datasets"]["pooled"]["n"] == 4
