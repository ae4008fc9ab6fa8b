"""The decision benchmark's fallback arm (benchmarks/decision.py, issue 14 item 3): the
per-dataset tuning cell, τ_min calibrated on it alone with the product's calibration, the
``fallback_standard`` cell planned once it is known, and the flagged-row statistics
(decision_stats.fallback_figures) on run trees written with the product's own writers."""

from __future__ import annotations

import pytest

import decision
import decision_stats as ds

from .conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]


@pytest.fixture
def base():
    from specrag_batch.config import load_config

    return load_config(ROOT / "configs" / "test-smollm2.yaml")


def plan(base, runs, tau_min=None, datasets=("popqa",)):
    return decision.plan_cells(list(datasets), decision.expand_arms("main,fallback"), base, runs,
                               tuned_drafter=None, ablation_datasets=[], ablation_input={}, tau_min=tau_min)


def by_name(cells):
    return {c.name: c for c in cells}


def test_fallback_arm_waits_for_its_datasets_tuning_cell(base, tmp_path):
    assert decision.expand_arms("fallback") == ["fallback_standard"]
    assert "fallback_standard" in decision.expand_arms("all")
    assert "fallback_standard" not in decision.GROUPS["main"]
    with pytest.raises(ValueError, match="tau_min"):
        decision.arm_config(base, "fallback_standard")
    cells, notes = plan(base, tmp_path, datasets=("popqa", "nq_open"))
    # no τ_min yet: each dataset's tuning cell, after the headline cells; the arm is noted
    assert [c.name for c in cells] == ["popqa/standard", "popqa/speculative", "nq_open/standard",
                                       "nq_open/speculative", "popqa/tuning", "nq_open/tuning"]
    tune = by_name(cells)["popqa/tuning"]
    assert tune.input_dir == tmp_path / "popqa" / "input-tuning" and tune.output_dir == tmp_path / "popqa" / "tuning"
    assert tune.config.config_hash() == decision.arm_config(base, "speculative").config_hash()
    assert any(n.startswith("popqa: arm fallback_standard needs selection.tau_min") for n in notes)
    cells, notes = plan(base, tmp_path, {"popqa": {"qa": -4.5}, "nq_open": None}, datasets=("popqa", "nq_open"))
    assert [c.name for c in cells][4:] == ["popqa/tuning", "popqa/fallback_standard", "nq_open/tuning"]
    fb = by_name(cells)["popqa/fallback_standard"]
    assert fb.input_dir == tmp_path / "popqa" / "input"  # the reported rows, like speculative
    assert fb.config.selection.fallback == "standard" and fb.config.selection.tau_for("qa") == -4.5
    # otherwise the speculative arm's config: the first pass is the speculative cell's
    spec = decision.arm_config(base, "speculative").model_dump()
    got = fb.config.model_dump()
    got["selection"].update(fallback=spec["selection"]["fallback"], tau_min=spec["selection"]["tau_min"])
    assert got == spec
    assert any(n.startswith("nq_open: arm fallback_standard") for n in notes)


TUNING_CORRECT = {0, 1, 2, 4, 7}


def tuning_fields(scale):
    """Tuning rows: score -scale*(i+1), right when i in TUNING_CORRECT."""
    return lambda i, r: {"score": -scale * (i + 1.0), "correct": i in TUNING_CORRECT, "fast_path": False,
                         "low_confidence": False, "flags": []}


def test_tau_min_comes_from_the_tuning_cell_only(base, tmp_path):
    write_inputs(tmp_path / "popqa" / "input-tuning", input_rows(10, prefix="t"), 5)
    write_inputs(tmp_path / "popqa" / "input", input_rows(6, prefix="r"), 5)
    cells = by_name(plan(base, tmp_path)[0])
    tune = cells["popqa/tuning"]
    assert decision.calibrate_all(list(cells.values()))["popqa"]["tau_min"] is None  # not run yet
    write_cell(tune.input_dir, tune.output_dir, tune.config, [{"m": (10, 2, 1)}] * 2, drafts=1,
               fields=tuning_fields(1.0))
    spec = cells["popqa/speculative"]
    write_cell(spec.input_dir, spec.output_dir, spec.config, [{"m": (10, 2, 1)}] * 2, drafts=1,
               fields=lambda i, r: {"score": -50.0 - i, "correct": i % 2 == 0, "fast_path": False,
                                    "low_confidence": False, "flags": []})
    c = decision.calibrate_tuning(tune)
    # scores -1 .. -10, none fast path: coverage of τ = -k is k/10; the highest τ keeping >= 50%
    # is -5, whose kept rows 0-4 hold 4 right ones (0, 1, 2, 4)
    assert c["tau_min"] == {"qa": -5.0} and c["complete"] and c["n_rows"] == 10
    assert c["measure"] == "score" and c["target_coverage"] == 0.5
    assert (c["tasks"][0]["coverage"], c["tasks"][0]["accuracy"], c["tasks"][0]["n"]) == (0.5, 0.8, 10)
    fb = by_name(plan(base, tmp_path, {"popqa": c["tau_min"]})[0])["popqa/fallback_standard"]
    fb_hash = fb.config.config_hash()

    # other reported rows and another speculative cell on them: τ_min and the arm do not move
    write_inputs(tmp_path / "popqa" / "input", input_rows(8, prefix="other"), 5)
    write_cell(spec.input_dir, spec.output_dir, spec.config, [{"m": (10, 2, 1)}] * 2, drafts=1,
               fields=lambda i, r: {"score": -0.5 * i, "correct": i < 2, "fast_path": False,
                                    "low_confidence": False, "flags": []})
    again = decision.calibrate_all(list(by_name(plan(base, tmp_path)[0]).values()))["popqa"]
    assert again["tau_min"] == {"qa": -5.0}
    assert by_name(plan(base, tmp_path, {"popqa": again["tau_min"]})[0])["popqa/fallback_standard"] \
        .config.config_hash() == fb_hash

    # the tuning cell's scores do move it: the calibration reads that cell
    write_cell(tune.input_dir, tune.output_dir, tune.config, [{"m": (10, 2, 1)}] * 2, drafts=1,
               fields=tuning_fields(2.0))
    assert decision.calibrate_tuning(tune)["tau_min"] == {"qa": -10.0}


def test_partial_tuning_cell_gives_no_tau(base, tmp_path):
    write_inputs(tmp_path / "popqa" / "input-tuning", input_rows(10, prefix="t"), 5)
    tune = by_name(plan(base, tmp_path)[0])["popqa/tuning"]
    write_cell(tune.input_dir, tune.output_dir, tune.config, [{"m": (10, 2, 1)}] * 2, drafts=1,
               fields=tuning_fields(1.0))
    first = sorted((tmp_path / "popqa" / "tuning" / "_shards").glob("*.json"))[0]
    first.unlink()  # one shard without its done marker: the split is not finished
    c = decision.calibrate_tuning(tune)
    assert c["tau_min"] is None and "1 of 2 shards done" in c["note"]


# fallback cell rows 0-5 are flagged: (first answer right, answer given right, how answered)
FLAGGED = [(False, True, "fallback_standard"), (False, True, "fallback_standard"),
           (True, False, "fallback_standard"), (False, True, "fallback_standard"),
           (False, False, "first"),  # fallback_failed: the first answer is kept
           (True, True, "fallback_standard")]


def fallback_fields(i, r):
    if i >= len(FLAGGED):  # not flagged, right; row 9's first answer differs from speculative's
        return {"low_confidence": False, "answer_source": "first", "correct": True,
                "answer": "other" if i == 9 else f"s{i}"}
    before, after, source = FLAGGED[i]
    if source == "first":
        return {"low_confidence": True, "answer_source": "first", "correct": before, "answer": f"s{i}",
                "fallback_error": "fallback_standard selected no draft", "flags": ["fallback_failed"]}
    return {"low_confidence": True, "answer_source": source, "answer": f"f{i}", "correct": after,
            "first_answer": f"s{i}", "first_correct": before, "first_score": -9.0}


def speculative_fields(i, r):
    return {"low_confidence": None, "answer": f"s{i}",
            "correct": FLAGGED[i][0] if i < len(FLAGGED) else True}


def test_fallback_statistics_on_a_run_tree_with_known_flagged_rows(base, tmp_path):
    write_inputs(tmp_path / "popqa" / "input", input_rows(10), 5)
    cells = by_name(plan(base, tmp_path, {"popqa": {"qa": -5.0}})[0])
    spec, fb, std = cells["popqa/speculative"], cells["popqa/fallback_standard"], cells["popqa/standard"]
    write_cell(spec.input_dir, spec.output_dir, spec.config, [{"m": (1000, 100, 5)}] * 2, drafts=2,
               seconds=10.0, fields=speculative_fields)
    # Standard RAG alone: wrong on rows 0, 1 and 6 (the fallback's answers are right there)
    write_cell(std.input_dir, std.output_dir, std.config, [{"m": (1200, 30, 5)}] * 2, seconds=12.0,
               fields=lambda i, r: {"correct": i not in (0, 1, 6)})
    write_cell(fb.input_dir, fb.output_dir, fb.config, [{"m": (1600, 120, 7)}] * 2, drafts=2, seconds=14.0,
               stage_seconds={"drafting": 5.0, "verification": 5.0, "fallback": 4.0}, fields=fallback_fields)
    loaded = {"popqa": {c.arm: decision.load_cell(c) for c in (spec, fb, std)}}
    calib = {"popqa": {"tasks": [{"task": "qa", "tau": -5.0, "n": 20, "coverage": 0.5}]}}
    res = ds.summarise(loaded, {"popqa": {}}, LABELS, reps=300)
    f = res["datasets"]["popqa"]["fallback"]["fallback_standard"]
    # flagged rows 0-5: before [F F T F F T] = 2/6, after [T T F T F T] = 4/6; fixed 0 1 3,
    # broken 2: McNemar b = 3, c = 1, p = 2 * (1 + 4) / 2**4 = 0.625
    assert (f["n_rows"], f["n_flagged"], f["n"]) == (10, 6, 6)
    assert (f["answered_again"], f["fallback_failed"]) == (5, 1)
    assert f["accuracy_before"] == pytest.approx(2 / 6) and f["accuracy_after"] == pytest.approx(4 / 6)
    assert f["diff"] == pytest.approx(2 / 6) and f["ci95"][0] <= 2 / 6 <= f["ci95"][1]
    assert f["mcnemar"] == {"n": 6, "b": 3, "c": 1, "p": pytest.approx(0.625)}
    # first answers equal the speculative cell's on 9 of 10 rows (row 9 differs)
    assert f["first_pass_same_answer"] == {"n": 10, "share": 0.9}
    # cost: 28 s vs 20 s over 10 rows; tokens 2 * 1720 vs 2 * 1100; fallback stage 2 * 4 s
    cost = f["cost"]
    assert cost["added_s_per_row"] == pytest.approx(0.8) and cost["fallback_stage_s_per_row"] == pytest.approx(0.8)
    assert cost["added_tokens_per_row"] == pytest.approx(124.0) and cost["paired_rows"] == 10
    assert cost["added_tokens_per_flagged_row"] == pytest.approx(1240 / 6)
    # whole dataset, paired with speculative: 8/10 vs 6/10, the same discordant rows
    whole = res["datasets"]["popqa"]["comparisons"]["fallback_standard - speculative"]
    assert whole["diff"] == pytest.approx(0.2) and whole["mcnemar"]["b"] == 3 and whole["mcnemar"]["c"] == 1
    assert whole["seconds"]["ratio"] == pytest.approx(1.4) and whole["tokens"]["ratio"] == pytest.approx(1720 / 1100)
    # and with Standard RAG alone, what a user would run instead: 8/10 vs 7/10; right only with
    # the fallback on rows 0, 1, 6, only with Standard RAG on rows 2, 4
    vs_std = res["datasets"]["popqa"]["comparisons"]["fallback_standard - standard"]
    assert vs_std["diff"] == pytest.approx(0.1) and (vs_std["mcnemar"]["b"], vs_std["mcnemar"]["c"]) == (3, 2)
    assert vs_std["seconds"]["ratio"] == pytest.approx(28 / 24)
    pooled = res["pooled"]["fallback"]["fallback_standard"]
    assert (pooled["n_flagged"], pooled["mcnemar"]["b"], pooled["mcnemar"]["c"]) == (6, 3, 1)
    assert pooled["accuracy_after"] == pytest.approx(4 / 6)
    text = ds.tables({**res, "calibration": calib})
    assert "| popqa | fallback_standard | qa: -5 (n = 20, 50.0%) | 10 | 6 (60.0) | 5 / 1 | 33.3 -> 66.7 (n = 6) |" in text
    assert "+0.80 (0.80) | +124 (+207) |" in text
    row = next(line for line in text.splitlines() if line.startswith("| popqa | fallback_standard | qa: -5"))
    assert row.split(" | ")[9].startswith("+10.0 [") and row.split(" | ")[9].endswith("p = 1 (3/2)")


def test_tuning_arm_alone_plans_only_the_tuning_cells(base, tmp_path):
    # the tuning cells feed τ_min and the post-hoc selection variants; they can run before the
    # second speculative pass that fallback_standard costs
    arms = decision.expand_arms("tuning")
    assert arms == ["tuning"]
    # main() writes the tuning split's input shards exactly when the plan has tuning cells
    assert decision.needs_tuning(arms) and decision.needs_tuning(decision.expand_arms("fallback"))
    assert not decision.needs_tuning(decision.expand_arms("main,ablations"))
    cells, notes = decision.plan_cells(["popqa", "nq_open"], arms, base, tmp_path, tuned_drafter=None,
                                       ablation_datasets=[], ablation_input={})
    assert [c.name for c in cells] == ["popqa/tuning", "nq_open/tuning"] and notes == []
    assert cells[0].input_dir == tmp_path / "popqa" / "input-tuning"
    with pytest.raises(ValueError, match="unknown"):
        decision.expand_arms("tunning")
