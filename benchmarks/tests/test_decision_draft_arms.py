"""The decision benchmark's shorter-draft arms ``draft48``/``draft160``/``one_sentence``
(benchmarks/decision.py, issue 13 item 4) and their table (benchmarks/decision_stats.py) on a run
tree written with the product's own writers. The drafter options themselves
(``drafter.max_tokens``, ``drafter.rationale_style``) are the product's and are tested with it."""

from __future__ import annotations

import decision
import decision_stats as ds

from .conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs

LABELS = ("SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO")


def test_decision_draft_arms_and_their_table(tmp_path):
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    assert {"draft48", "draft160", "one_sentence"} <= set(decision.expand_arms("ablations"))
    assert decision.arm_config(base, "draft48").drafter.max_tokens == 48
    assert decision.arm_config(base, "draft160").drafter.max_tokens == 160
    one = decision.arm_config(base, "one_sentence")
    assert one.drafter.rationale_style == "one_sentence" and one.drafter.max_tokens == base.drafter.max_tokens

    write_inputs(tmp_path / "popqa" / "input", input_rows(4), 4)
    cells = {c.arm: c for c in decision.plan_cells(["popqa"], ["speculative", "draft48"], base, tmp_path,
                                                   tuned_drafter=None, ablation_datasets=["popqa"],
                                                   ablation_input={"popqa": tmp_path / "popqa" / "input"})[0]}
    spec, short = cells["speculative"], cells["draft48"]
    write_cell(spec.input_dir, spec.output_dir, spec.config, [{"m": (400, 200, 4)}], drafts=2, seconds=8.0,
               draft_tokens=[30, 50])

    def cut(i, r):  # row 0 wrong; each row's first draft stops at the 48-token budget
        d = [{"doc_ids": [], "answer": "a", "rationale": "r", "flags": ["truncated_at_max_tokens"], "tokens_draft": 48},
             {"doc_ids": [], "answer": "a", "rationale": "r", "flags": [], "tokens_draft": 24}]
        return {"drafts": d, "correct": i != 0}
    write_cell(short.input_dir, short.output_dir, short.config, [{"m": (400, 120, 4)}], seconds=6.0, fields=cut)
    loaded = {"popqa": {c.arm: decision.load_cell(c) for c in (spec, short)}}
    res = ds.summarise(loaded, {"popqa": {}}, list(LABELS), reps=200)
    f = res["datasets"]["popqa"]["arms"]["draft48"]
    assert f["tokens_per_draft"] == 36.0 and res["datasets"]["popqa"]["arms"]["speculative"]["tokens_per_draft"] == 40.0
    text = ds.tables(res)
    # 6 s / 4 rows; 120 generated tokens / 4 rows; drafts 48 and 24 -> 36; 4 of 8 drafts cut,
    # none given a forced answer, all valid
    assert "| popqa | draft48 | 4 | 75.0 [" in text and "| 1.50 | 30 | 36.0 | 50.0 | 0.0 | 100.0 | -25.0 [" in text
    assert "| popqa | speculative | 4 | 100.0 [100.0, 100.0] | 2.00 | 50 | 40.0 | 0.0 | 0.0 | 100.0 |" in text
    assert "0.75 [0.75, 0.75] (n = 1 shards)" in text
