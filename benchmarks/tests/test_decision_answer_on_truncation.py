"""The decision benchmark's ablation arm ``answer_on_truncation`` (benchmarks/decision.py) and
its row of the "Shorter drafts" table (benchmarks/decision_stats.py), on a run tree written with
the product's own writers. The switch itself (``drafter.answer_on_truncation``) is the
product's and is tested with it."""

from __future__ import annotations

import pytest

import decision
import decision_stats as ds

from .conftest import ROOT, small_config
from .product_runs import input_rows, write_cell, write_inputs

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO"]


def test_decision_arm_answer_on_truncation_and_its_table(tmp_path):
    """The ablation arm turns the switch on and nothing else; a config that already has it on
    skips the arm with a note (the same cells as speculative); the "Shorter drafts" table shows
    the arm with its shares of cut, forced and valid drafts."""
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    assert "answer_on_truncation" in decision.expand_arms("ablations")
    arm = decision.arm_config(base, "answer_on_truncation")
    assert arm.drafter.answer_on_truncation is True
    assert arm.model_copy(update={"drafter": base.drafter}) == base  # nothing else changes
    on = small_config(**{"drafter.answer_on_truncation": True})
    with pytest.raises(ValueError, match="already sets drafter.answer_on_truncation"):
        decision.arm_config(on, "answer_on_truncation")
    write_inputs(tmp_path / "popqa" / "input", input_rows(4), 4)
    kw = dict(tuned_drafter=None, ablation_datasets=["popqa"], ablation_input={"popqa": tmp_path / "popqa" / "input"})
    cells, notes = decision.plan_cells(["popqa"], ["speculative", "answer_on_truncation"], on, tmp_path, **kw)
    assert [c.arm for c in cells] == ["speculative"] and any("answer_on_truncation" in n for n in notes)
    cells = {c.arm: c for c in decision.plan_cells(["popqa"], ["speculative", "answer_on_truncation"], base,
                                                   tmp_path, **kw)[0]}
    spec, forced = cells["speculative"], cells["answer_on_truncation"]

    def guessed(i, r):  # each row's first draft was cut before its answer: the guess is invalid
        return {"drafts": [{"doc_ids": [], "answer": "", "rationale": "r", "tokens_draft": 12,
                            "flags": ["truncated_at_max_tokens", "no_answer_field", "empty_answer"]},
                           {"doc_ids": [], "answer": "a", "rationale": "r", "flags": [], "tokens_draft": 8}],
                "correct": i != 0}

    def recovered(i, r):  # the same draft with a forced answer line: valid
        return {"drafts": [{"doc_ids": [], "answer": "a", "rationale": "r", "tokens_draft": 14,
                            "flags": ["truncated_at_max_tokens", "answer_forced"]},
                           {"doc_ids": [], "answer": "a", "rationale": "r", "flags": [], "tokens_draft": 8}],
                "correct": True}
    write_cell(spec.input_dir, spec.output_dir, spec.config, [{"m": (400, 80, 4)}], seconds=8.0, fields=guessed)
    write_cell(forced.input_dir, forced.output_dir, forced.config, [{"m": (480, 88, 6)}], seconds=10.0,
               fields=recovered)
    loaded = {"popqa": {c.arm: decision.load_cell(c) for c in (spec, forced)}}
    res = ds.summarise(loaded, {"popqa": {}}, LABELS, reps=200)
    f = res["datasets"]["popqa"]["arms"]["answer_on_truncation"]["drafts"]
    assert f["by_flag"]["answer_forced"] == 4 and f["valid"] == 1.0 and f["parsed"] == 0.5
    text = ds.tables(res)
    # 10 s / 4 rows; 88 generated tokens / 4 rows; drafts 14 and 8 -> 11; half cut, half forced
    assert "| popqa | answer_on_truncation | 4 | 100.0 [100.0, 100.0] | 2.50 | 22 | 11.0 | 50.0 | 50.0 | 100.0 | " \
        "+25.0 [" in text
    assert "| popqa | speculative | 4 | 75.0 [" in text and "| 2.00 | 20 | 10.0 | 50.0 | 0.0 | 50.0 |" in text
