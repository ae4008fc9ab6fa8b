"""benchmarks/cascade_check.py: the cascade frontier's prediction (specrag_batch.confidence.cascade) against
a real ``fallback_standard`` cell, on cells written with the product's own writers
(``product_runs``): which rows each re-answered, the paired outcome, why rows differ, seconds."""

from __future__ import annotations

import pytest

import cascade_check

from .conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs

CONFIG = ROOT / "configs" / "test-smollm2.yaml"
USAGE = [{"m": (10, 2, 1)}] * 2  # two shards of five rows
SPEC_RIGHT, STD_RIGHT = {0, 1, 2, 3, 5}, {0, 1, 4, 5, 6, 7}
REAL_FLAGGED = {4, 5, 6, 7}  # row 4's first-pass score fell below τ_min, row 8's rose above it


def spec(i, r):  # scores -1 .. -10; row 9 on the consensus fast path (never re-answered)
    return {"score": -(i + 1.0), "answer": f"s{i}", "correct": i in SPEC_RIGHT, "fast_path": i == 9,
            "low_confidence": False, "flags": []}


def std(i, r):
    return {"score": -0.5, "answer": f"t{i}", "correct": i in STD_RIGHT, "fast_path": False,
            "low_confidence": False, "flags": []}


def real(i, r):
    if i in REAL_FLAGGED:  # re-answered; row 6's Standard RAG answer not reproduced (and wrong)
        return {"score": -0.5, "answer": "x6" if i == 6 else f"t{i}", "correct": i in STD_RIGHT - {6},
                "fast_path": False, "low_confidence": True, "flags": [], "answer_source": "fallback_standard",
                "first_answer": f"s{i}", "first_correct": i in SPEC_RIGHT}
    # kept; row 2's first answer not reproduced (and wrong), row 8's first-pass score -4.5 >= τ_min
    return {"score": -4.5 if i == 8 else -(i + 1.0), "answer": "y2" if i == 2 else f"s{i}",
            "correct": i in SPEC_RIGHT - {2}, "fast_path": i == 9, "low_confidence": False, "flags": [],
            "answer_source": "first"}


@pytest.fixture
def cells(tmp_path):
    ds = tmp_path / "hotpotqa"
    write_inputs(ds / "input-tuning", input_rows(10, prefix="t"), 5)
    write_inputs(ds / "input", input_rows(10, prefix="r"), 5)
    tune = cascade_check.decision.plan_cells(["hotpotqa"], list(cascade_check.ARMS), cascade_check.decision.load_config(
        CONFIG), tmp_path, tuned_drafter=None, ablation_datasets=[], ablation_input={})[0]
    tune = next(c for c in tune if c.arm == "tuning")
    # tuning scores -1 .. -10, right 0, 1, 2, 4, 7: coverage 0.5 gives τ_min = -5 (test_decision_fallback)
    write_cell(tune.input_dir, tune.output_dir, tune.config, USAGE, drafts=1, fields=lambda i, r: {
        "score": -(i + 1.0), "correct": i in {0, 1, 2, 4, 7}, "fast_path": False, "low_confidence": False,
        "flags": []})
    planned = cascade_check.plan(tmp_path, CONFIG, ["hotpotqa"])["hotpotqa"]
    assert planned["fallback_standard"].config.selection.tau_for("qa") == -5.0
    for arm, fields, secs, stages in (("speculative", spec, 10.0, None), ("standard", std, 15.0, None),
                                      ("fallback_standard", real, 17.0,
                                       {"drafting": 5.0, "verification": 5.0, "fallback": 7.0})):
        c = planned[arm]
        write_cell(c.input_dir, c.output_dir, c.config, USAGE, drafts=1, fields=fields, seconds=secs,
                   stage_seconds=stages)
    return planned


def test_prediction_against_the_real_run(cells):
    d = cascade_check.compare(cells, reps=200)
    assert d["fallback_answers_as_standard_cell"] and d["tau_min"] == -5.0 and d["n"] == 10
    # predicted: rows below -5 but not the fast-path row 9 -> 5, 6, 7, 8 by Standard RAG
    p, r = d["predicted"], d["real"]
    assert (p["reanswered"], p["tau"], p["share"]) == (4, -5.0, 0.4)
    assert p["accuracy"] == pytest.approx(0.7) and p["frontier_accuracy"] == pytest.approx(0.7)
    assert d["at_tau_min"]["same_as_at_share"] and d["at_tau_min"]["reanswered"] == 4
    assert (r["reanswered"], r["flagged"], r["share"]) == (4, 4, 0.4) and r["accuracy"] == pytest.approx(0.6)
    assert d["rows_reanswered"] == {"both": 3, "predicted_only": ["r8"], "real_only": ["r4"], "neither": 5}
    # real - predicted: row 4 right only in the real run, rows 2 and 6 only in the prediction
    assert d["paired"]["diff"] == pytest.approx(-0.1) and d["paired"]["n"] == 10
    assert (d["paired"]["mcnemar"]["b"], d["paired"]["mcnemar"]["c"]) == (1, 2)
    why = {x["query_id"]: x["reason"] for x in d["differing_rows"]}
    assert sorted(why) == ["r2", "r4", "r6"]
    assert {x["query_id"]: (x["predicted"], x["real"]) for x in d["differing_rows"]} == {
        "r2": (True, False), "r4": (False, True), "r6": (True, False)}
    assert why["r2"].startswith("Speculative RAG answer not reproduced") and "'y2'" in why["r2"]
    assert why["r4"].startswith("re-answered by the real run only")
    assert why["r6"].startswith("Standard RAG answer not reproduced") and "'x6'" in why["r6"]
    q = d["reproduced"]
    assert (q["first_answer"], q["of"], q["score_not_reanswered"], q["of_not_reanswered"]) == (9, 10, 5, 6)
    assert (q["standard_answer"], q["of_reanswered"]) == (3, 4)
    assert [x["query_id"] for x in q["standard_answer_differs"]] == ["r6"]
    # seconds per row: 10 s, 15 s and 17 s (7 s fallback stage) per 5-row shard
    assert (p["spec_s_per_row"], p["std_s_per_row"]) == (2.0, 3.0)
    assert p["s_per_row"] == pytest.approx(3.2) and p["ratio_to_standard"] == pytest.approx(3.2 / 3)
    assert r["s_per_row"] == pytest.approx(3.4) and r["ratio_to_standard"] == pytest.approx(3.4 / 3)
    assert r["ratio_shards"]["ratio"] == pytest.approx(34 / 30) and r["ratio_shards"]["n"] == 2
    assert r["fallback_stage_s_per_row"] == pytest.approx(1.4) and r["first_pass_s_per_row"] == pytest.approx(2.0)
    assert r["fallback_stage_s_per_reanswered_row"] == pytest.approx(3.5)
    text = cascade_check.markdown({"datasets": {"hotpotqa": d}, "machines": d["machines"]})
    assert "| hotpotqa | 10 | -5.00 | 4 (4) | no | 70.0 | 60.0 | -10.0 [" in text


def test_the_fallback_cell_is_refused_as_the_run_to_calibrate(cells):
    from specrag_batch.confidence.fit import CalibrationInputError

    with pytest.raises(CalibrationInputError, match="already the cascade's"):
        cascade_check.compare({**cells, "speculative": cells["fallback_standard"]}, reps=10)
