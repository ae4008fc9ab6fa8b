"""The decision benchmark's self-reflection variants (benchmarks/decision_stats.py, issue 10):
stored drafts re-selected with ``paper`` and ``contrast`` log ρ_SR recomputed from their
log P(Yes), log P(No), the AUROC of log ρ_SR, the paired comparison and the verdict chosen on
the tuning cells only, on hand-computed fixtures; and the post-hoc selection against the
product's verification and selection stages run with ``selection.self_reflection: contrast``
(FakeEngine verifier, real tokenizer, real Parquet)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import decision
import decision_stats as ds

from .conftest import small_config
from .product_runs import input_rows, verify_and_select, write_cell, write_inputs

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]
L = math.log


def draft(answer, *, sd=-1.0, sc=-2.0, yes=None, no=None, flags=()):
    """An output draft; ``yes``/``no`` are P(Yes), P(No) (probabilities; stored as log-probs);
    score_self_reflection holds the paper variant, as a run with the default stores it."""
    ly, ln = (None if yes is None else L(yes)), (None if no is None else L(no))
    return {"doc_ids": ["d"], "answer": answer, "written_answer": answer, "rationale": "because",
            "flags": list(flags), "score": None, "score_draft": sd, "score_self_consistency": sc,
            "score_self_reflection": ly, "logprob_yes": ly, "logprob_no": ln}


def row(qid, gold, drafts, *, correct=None, error=None, fast_path=False):
    return {"query_id": qid, "task": "qa", "gold": gold, "answer": None, "correct": correct,
            "drafts": drafts, "error": error, "fast_path": fast_path}


def rome_milan():
    # both drafts: log ρ_draft + log ρ_SC = -3. Rome: P(Yes) .3, P(No) .1; Milan: .5, .5.
    # paper:    Rome -3 + log .3 = -4.20 < Milan -3 + log .5 = -3.69  -> Milan
    # contrast: Rome -3 + log .75 = -3.29 > Milan -3 + log .5 = -3.69  -> Rome
    return [draft("Rome", yes=0.3, no=0.1), draft("Milan", yes=0.5, no=0.5)]


ROWS = [
    row("r1", ["Rome"], rome_milan(), correct=False),  # paper wrong, contrast right
    row("r2", ["Rome"], rome_milan(), correct=False),  # paper wrong, contrast right
    row("r3", ["Milan"], rome_milan(), correct=True),  # paper right, contrast wrong
    row("r4", ["Oslo"], [draft("Oslo", sc=None), draft("Oslo", sc=None)], correct=True, fast_path=True),  # kept
    # Oslo has ρ_SC but no log P(Yes)/P(No) (the verifier's next-token log-probs were
    # unavailable): no ρ_SR, so it ranks after Bergen under both variants although its other
    # terms are far higher; Bergen P(Yes) .2, P(No) .2
    row("r5", ["Oslo"], [draft("Oslo", sd=-0.1, sc=-0.1, flags=["self_reflection_unavailable"]),
                         draft("Bergen", sd=-5.0, sc=-5.0, yes=0.2, no=0.2)], correct=False),
    row("r6", None, rome_milan()),                        # ungraded: left out
    row("r7", ["Lima"], None, error="row 6: field 'documents': no documents"),  # error: wrong, kept
]


def test_paper_and_contrast_reselect_different_drafts():
    assert [ds.reselect_index(r, seed=0, self_reflection="paper") for r in ROWS] == [1, 1, 1, None, 1, 1, None]
    assert [ds.reselect_index(r, seed=0, self_reflection="contrast") for r in ROWS] == [0, 0, 0, None, 1, 0, None]
    # the stored scores are the paper variant's: no recomputation selects as paper does
    assert [ds.reselect_index(r, seed=0) for r in ROWS[:3]] == [1, 1, 1]
    units = ds.self_reflection_rows(ROWS, {}, LABELS, seed=0)
    assert [u["query_id"] for u in units] == ["r1", "r2", "r3", "r4", "r5", "r7"]
    assert [u["paper"] for u in units] == [False, False, True, True, False, False]
    assert [u["contrast"] for u in units] == [True, True, False, True, False, False]
    assert [u["different"] for u in units] == [True, True, True, False, False, False]
    # verified valid drafts: 2 + 2 + 2 + Bergen (Oslo of r5 has no log-probs, r4 took the fast path)
    assert [len(u["drafts"]) for u in units] == [2, 2, 2, 0, 1, 0]
    assert units[4]["drafts"][0] == ((pytest.approx(L(0.2)), pytest.approx(L(0.5))), False)
    with pytest.raises(ValueError, match="self_reflection"):
        ds.reselect_index(ROWS[0], seed=0, self_reflection="other")


def test_self_reflection_figures_hand_computed():
    f = ds.self_reflection_figures(ds.self_reflection_rows(ROWS, {}, LABELS, seed=0), reps=300)
    # paper right on r3 r4 (2/6), contrast on r1 r2 r4 (3/6); b = 2 (contrast only), c = 1:
    # McNemar two-sided binomial 2 of 3 = 2 * 4/8 = 1
    assert (f["n"], f["n_reselected"], f["n_different"]) == (6, 4, 3)
    assert f["accuracy"] == {"paper": pytest.approx(2 / 6), "contrast": pytest.approx(3 / 6)}
    c = f["vs_baseline"]["contrast"]
    assert c["diff"] == pytest.approx(1 / 6) and c["ci95"][0] <= 1 / 6 <= c["ci95"][1]
    assert c["mcnemar"] == {"n": 6, "b": 2, "c": 1, "p": pytest.approx(1.0)}
    a = f["auroc"]
    # right drafts: Rome r1, Rome r2, Milan r3; wrong: Milan r1, Milan r2, Rome r3, Bergen r5.
    # paper (P(Yes)): right .3 .3 .5 vs wrong .5 .5 .3 .2 -> (1.5 + 1.5 + 3) / 12 = 0.5
    # contrast: right .75 .75 .5 vs wrong .5 .5 .75 .5 -> (3.5 + 3.5 + 1.5) / 12 = 8.5 / 12
    assert (a["n_rows"], a["n_drafts"], a["n_right"]) == (4, 7, 3)
    assert a["paper"]["auroc"] == pytest.approx(0.5)
    assert a["contrast"]["auroc"] == pytest.approx(8.5 / 12)
    assert a["contrast - paper"]["diff"] == pytest.approx(8.5 / 12 - 0.5)
    for m in ("paper", "contrast"):
        lo, hi = a[m]["ci95"]
        assert 0 <= lo <= a[m]["auroc"] <= hi <= 1
    assert ds.self_reflection_figures(ds.self_reflection_rows(ROWS, {}, LABELS, seed=0), reps=300) == f  # seeded


def test_auroc_resamples_rows_not_drafts():
    # two rows, each one right draft scored above one wrong draft: every resample of rows
    # separates perfectly, so the interval is [1, 1]; a third row with a reversed pair
    # lowers the AUROC, and resamples holding it more or less often spread the interval
    good = {"drafts": [((L(0.9), L(0.9)), True), ((L(0.1), L(0.1)), False)]}
    assert ds.self_reflection_auroc([good, good], reps=200)["paper"] == {"auroc": 1.0, "ci95": [1.0, 1.0]}
    bad = {"drafts": [((L(0.1), L(0.1)), True), ((L(0.9), L(0.9)), False)]}
    a = ds.self_reflection_auroc([good, good, bad], reps=200)
    # right .9 .9 .1 vs wrong .1 .1 .9 (a tie counts 1/2): (2.5 + 2.5 + 1) / 9
    assert a["paper"]["auroc"] == pytest.approx(6 / 9) and a["n_rows"] == 3
    assert a["paper"]["ci95"][0] < 6 / 9 < a["paper"]["ci95"][1]
    # the bootstrap's weighted form is scikit-learn's AUROC of the resample written out
    # (drafts repeated as often as drawn), ties included
    from specrag_batch.confidence.calibration import auroc
    rng = np.random.default_rng(1)
    s, y, w = rng.integers(0, 5, 30).astype(float), rng.random(30) < 0.4, rng.integers(0, 3, (25, 30))
    w[0, y] = 0  # a resample without a right draft: no AUROC
    got = ds.auroc_resamples(s, y, w)
    want = [auroc(s[np.repeat(np.arange(30), w[r])], y[np.repeat(np.arange(30), w[r])]) for r in range(25)]
    assert math.isnan(got[0]) and want[0] is None
    assert got[1:].tolist() == pytest.approx(want[1:])
    # one class only: no AUROC
    assert ds.self_reflection_auroc([{"drafts": [((-1.0, -1.0), True)]}])["paper"]["auroc"] is None


def test_verdict_comes_from_the_tuning_cells_only():
    def cell(rows):
        return {"rows": rows, "shards": [], "roles": {}}
    # tuning: r1, r2 (contrast right, paper wrong) ten times over: interval [+x, +x] above 0
    tune = [{**r, "query_id": f"{r['query_id']}-{i}"} for i in range(10) for r in ROWS[:2]]
    # reported: r3 ten times (paper right): the opposite direction, which must not decide
    rep = [{**ROWS[2], "query_id": f"r3-{i}"} for i in range(10)]
    res = ds.summarise({"d": {"speculative": cell(rep)}}, {"d": {}}, LABELS, reps=200,
                       tuning={"d": cell(tune), "e": cell(tune)})
    sr = res["self_reflection"]
    tuned = sr["tuning"]["pooled"]["vs_baseline"]["contrast"]
    assert tuned["diff"] == 1.0 and tuned["ci95"] == [1.0, 1.0]
    assert sr["tuning"]["pooled"]["n"] == 40 and sr["tuning"]["pooled"]["datasets"] == ["d", "e"]
    assert sr["reported"]["pooled"]["vs_baseline"]["contrast"]["diff"] == -1.0
    assert ds.verdict_variant(sr["reported"]["pooled"]) == "paper"  # shown, not the verdict
    assert "tuning" not in res["datasets"]["d"]["arms"]  # never reported as an arm
    text = ds.verdicts(res)
    assert "the tuning cells favour **contrast**" in text and "n = 40 rows" in text
    assert "+100.0 points [+100.0, +100.0]" in text
    table = ds.tables(res)
    assert "| tuning (chooses the default) | pooled | 40 (40; 40) | 0.0 | 100.0 |" in table
    assert "| reported (not used for choosing) | d | 10 (10; 10) | 100.0 | 0.0 |" in table
    # tuning rows that disagree both ways: the interval covers 0
    mixed = ds.summarise({}, {"d": {}}, LABELS, reps=200, tuning={"d": cell(ROWS)})
    assert "**undecided**: the tuning cells favour neither" in ds.verdicts(mixed)
    assert ds.verdict_variant(mixed["self_reflection"]["tuning"]["pooled"]) == "undecided"
    assert "**not measured**" in ds.verdicts(ds.summarise({}, {}, LABELS, reps=50))


def test_post_hoc_contrast_equals_a_contrast_run():
    """A run with ``selection.self_reflection: paper``, written to Parquet, re-selected with
    ``contrast`` after the fact, picks the draft the product's verification and selection
    stages pick when run with ``contrast`` on the same drafts (same verifier log-probs)."""
    from specrag_batch.core.records import Draft, QueryRow

    from .fakes import FakeEngine

    engine = FakeEngine()

    def rows():
        rng = np.random.default_rng(3)
        out = []
        for i in range(40):
            drafts = [Draft([f"d{j}"], f"answer {i} {j}", f"rationale {j} of row {i}.", score_draft=float(-rng.random()))
                      for j in range(3)]
            out.append(QueryRow(i, f"q{i}", f"Question {i}?", "qa", gold=[f"answer {i} 0"], drafts=drafts))
        return out

    # the paper's three terms (configs/bench.yaml's cells), then ρ_SR alone
    for over in ({"selection.use_self_consistency": True},
                 {"selection.use_draft_score": False, "selection.use_self_consistency": False}):
        switches = {"use_draft": over.get("selection.use_draft_score", True),
                    "use_sc": over.get("selection.use_self_consistency", True)}
        picked = {}
        for mode in ("paper", "contrast"):
            picked[mode], out = verify_and_select(rows(), small_config(**{**over, "selection.self_reflection": mode}),
                                                  engine)
            if mode == "paper":
                stored = out
        post = [ds.reselect_index(r, seed=0, self_reflection="contrast", **switches) for r in stored]
        assert post == picked["contrast"]
        assert [ds.reselect_index(r, seed=0, self_reflection="paper", **switches) for r in stored] == picked["paper"]
        if not switches["use_draft"]:  # ρ_SR alone: the variants disagree on some rows, so the check above has teeth
            assert sum(p != c for p, c in zip(picked["paper"], picked["contrast"])) >= 3


def test_analyse_reads_the_tuning_cell_for_the_choice_only(tmp_path):
    base = small_config()
    cells, _ = decision.plan_cells(["popqa"], decision.expand_arms("main,fallback"), base, tmp_path,
                                   tuned_drafter=None, ablation_datasets=[], ablation_input={})
    by = {c.arm: c for c in cells}
    write_inputs(tmp_path / "popqa" / "input-tuning", input_rows(4, prefix="t"), 2)
    write_inputs(tmp_path / "popqa" / "input", input_rows(4, prefix="r"), 2)
    gold_rome = lambda i, r: {"gold": ["Rome"], "fast_path": False, "correct": False, "drafts": rome_milan()}  # noqa: E731
    write_cell(by["tuning"].input_dir, by["tuning"].output_dir, by["tuning"].config, [{"m": (10, 2, 1)}] * 2,
               fields=gold_rome)
    write_cell(by["speculative"].input_dir, by["speculative"].output_dir, by["speculative"].config,
               [{"m": (10, 2, 1)}] * 2, fields=lambda i, r: {**gold_rome(i, r), "gold": ["Milan"], "correct": True})
    res = decision.analyse(cells, {"popqa": input_rows(4, prefix="r")}, base, tmp_path / "out",
                           {"config_path": "c.yaml", "rows_per_dataset": {"popqa": 4}}, 100,
                           tuning_data={"popqa": input_rows(4, prefix="t")})
    tune = res["self_reflection"]["tuning"]["datasets"]["popqa"]
    assert (tune["n"], tune["accuracy"]["paper"], tune["accuracy"]["contrast"]) == (4, 0.0, 1.0)
    assert res["self_reflection"]["reported"]["datasets"]["popqa"]["accuracy"]["paper"] == 1.0
    assert set(res["datasets"]["popqa"]["arms"]) >= {"speculative"} and "tuning" not in res["datasets"]["popqa"]["arms"]
    assert "the tuning cells favour **contrast**" in (tmp_path / "out" / "tables.md").read_text()
    # the selection rules are chosen on the same tuning cell (test_decision_selection_rule.py)
    assert res["selection_rule"]["tuning"]["datasets"]["popqa"]["n"] == 4
    assert "- **Selection rule** (`selection.rule`" in (tmp_path / "out" / "tables.md").read_text()
