"""Repeated drafts in the decision benchmark, no engine: the post-hoc count of verified drafts
that repeat another draft of their row (``decision_stats.verifier_duplicates``) on hand-made
rows, and the ``dedupe_verifier`` arm (``verifier.deduplicate_drafts``) with its table beside
``speculative`` on a run tree written with the product's own writers (tests/unit/product_runs.py)."""

from __future__ import annotations

import sys

from ..conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs

sys.path.insert(0, str(ROOT / "benchmarks"))
import decision  # noqa: E402
import decision_stats as ds  # noqa: E402


def draft(answer: str, rationale: str, *, written: str | None = None, tokens: tuple | None = (1, 9),
          verified: bool = True) -> dict:
    """A stored output draft; ``verified``: the verifier's fields are set."""
    a, b = tokens if tokens else (None, None)
    return {"doc_ids": [], "answer": answer, "written_answer": written or answer, "rationale": rationale,
            "flags": [], "score_self_consistency": -3.0 if verified else None,
            "logprob_yes": -0.1 if verified else None,
            "tokens_answer": a if verified else None, "tokens_rationale": b if verified else None}


def test_repeated_verified_drafts_are_counted_within_their_row():
    same = [draft("Paris", "The text says Paris.")] * 3
    rows = [
        # 5 verified: 3 identical, one with another rationale, one with α written as "B" -> 2 repeats
        {"drafts": same + [draft("Paris", "Another reason."), draft("Paris", "The text says Paris.", written="B")]},
        # the same drafts in a second row: repeats count within their row only -> 1
        {"drafts": same[:2]},
        # not verified: fast path, an error, a draft the verifier did not score
        {"fast_path": True, "drafts": same},
        {"error": "row 3: field 'drafts': ...", "drafts": same},
        {"drafts": [draft("Lyon", "x", tokens=(2, 8)), draft("Lyon", "x", verified=False)]},
    ]
    got = ds.verifier_duplicates(rows)
    assert got == {"rows": 3, "verified": 8, "duplicates": 3, "share": 3 / 8, "ab_tokens_share": 30 / 80}
    older = [{"drafts": [draft("Paris", "r", tokens=None), draft("Paris", "r", tokens=None)]}]
    assert ds.verifier_duplicates(older) == {"rows": 1, "verified": 2, "duplicates": 1, "share": 0.5,
                                             "ab_tokens_share": None}  # no token counts stored
    assert ds.verifier_duplicates([])["share"] is None


def test_dedupe_verifier_arm_and_its_table(tmp_path):
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    assert "dedupe_verifier" in decision.expand_arms("ablations")
    arm = decision.arm_config(base, "dedupe_verifier")
    assert arm.verifier.deduplicate_drafts and not decision.arm_config(base, "speculative").verifier.deduplicate_drafts
    assert arm.model_copy(update={"verifier": base.verifier}) == base  # nothing else changes

    write_inputs(tmp_path / "popqa" / "input", input_rows(4), 4)
    cells = {c.arm: c for c in decision.plan_cells(["popqa"], ["speculative", "dedupe_verifier"], base, tmp_path,
                                                   tuned_drafter=None, ablation_datasets=["popqa"],
                                                   ablation_input={"popqa": tmp_path / "popqa" / "input"})[0]}
    spec, dedupe = cells["speculative"], cells["dedupe_verifier"]
    model = base.verifier.model

    def rows(saved):  # each row: 3 verified drafts, two the same -> one repeat per row
        def fields(i, r):
            return {"drafts": [draft("a", "r"), draft("a", "r"), draft("b", "s")], "correct": True,
                    "verifier_drafts_deduplicated": saved}
        return fields
    write_cell(spec.input_dir, spec.output_dir, spec.config, [{model: (800, 100, 2)}], seconds=8.0, fields=rows(None))
    write_cell(dedupe.input_dir, dedupe.output_dir, dedupe.config, [{model: (600, 100, 2)}], seconds=6.0,
               fields=rows(1))
    loaded = {"popqa": {c.arm: decision.load_cell(c) for c in (spec, dedupe)}}
    res = ds.summarise(loaded, {"popqa": {}}, ["SUPPORTS", "REFUTES"], reps=200)
    arms = res["datasets"]["popqa"]["arms"]
    assert arms["dedupe_verifier"]["verifier_passes_saved"] == 4 and arms["speculative"]["verifier_passes_saved"] == 0
    assert arms["speculative"]["verifier_duplicates"] == {"rows": 4, "verified": 12, "duplicates": 4,
                                                          "share": 4 / 12, "ab_tokens_share": 4 / 12}
    text = ds.tables(res)
    # 8 s / 4 rows; 800 prompt tokens / 4 rows; 12 verified drafts, 4 repeats; no passes saved
    assert ("| popqa | speculative | 4 | 100.0 [100.0, 100.0] | 2.00 | 200 (drafter+verifier) | 12 | "
            "4 (33.3%, α+β tokens 33.3%) | 0 |  |  |  |") in text
    assert ("| popqa | dedupe_verifier | 4 | 100.0 [100.0, 100.0] | 1.50 | 150 (drafter+verifier) | 12 | "
            "4 (33.3%, α+β tokens 33.3%) | 4 | +0.0 [+0.0, +0.0], p = 1 (0/0) | 0.75 [0.75, 0.75] (n = 1 shards) | "
            "0.78 [0.78, 0.78] (n = 1 shards) |") in text
