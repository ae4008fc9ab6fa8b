"""Repeated drafts in the decision benchmark, no engine: the post-hoc count of verified drafts
that repeat another draft of their row (``decision_stats.verifier_duplicates``) on hand-made
rows, and the arms that flip ``verifier.deduplicate_drafts`` (``no_dedupe_verifier`` now that it is
on by default, ``dedupe_verifier`` for a config with it off) with their table beside
``speculative`` on a run tree written with the product's own writers (benchmarks/tests/product_runs.py),
and the same table from the results of the run that measured the switch (a copy of that
part of benchmarks/decision/results.json at 40a79f3, arm ``dedupe_verifier``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import decision
import decision_stats as ds

from .conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs


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


def test_the_dedupe_arms_flip_the_configs_setting_only():
    """``no_dedupe_verifier`` turns the switch off, ``dedupe_verifier`` on (both in the
    ablations group); each is skipped with a note when the config already has its setting."""
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    assert base.verifier.deduplicate_drafts is True  # the default
    off_base = load_config(ROOT / "configs" / "test-smollm2.yaml", {"verifier.deduplicate_drafts": False})
    assert {"no_dedupe_verifier", "dedupe_verifier"} <= set(decision.expand_arms("ablations"))
    for arm, value in decision.DEDUPE_ARMS.items():
        assert decision.ARM_OVERRIDES[arm] == {"verifier.deduplicate_drafts": value}
    for cfg, arm, other in ((base, "no_dedupe_verifier", "dedupe_verifier"),
                            (off_base, "dedupe_verifier", "no_dedupe_verifier")):
        got = decision.arm_config(cfg, arm)
        assert got.verifier.deduplicate_drafts is not cfg.verifier.deduplicate_drafts
        assert got.model_copy(update={"verifier": cfg.verifier}) == cfg  # nothing else changes
        assert decision.arm_config(cfg, "speculative") == cfg
        with pytest.raises(ValueError, match=f"arm {other}: the config already sets verifier.deduplicate_drafts "
                                             f"{str(cfg.verifier.deduplicate_drafts).lower()}"):
            decision.arm_config(cfg, other)
        cells, notes = decision.plan_cells(["popqa"], ["speculative", *decision.DEDUPE_ARMS], cfg, Path("/nonexistent"),
                                           tuned_drafter=None, ablation_datasets=["popqa"],
                                           ablation_input={"popqa": Path("/nonexistent/input")})
        assert [c.arm for c in cells] == ["speculative", arm] and len(notes) == 1 and other in notes[0]


def test_no_dedupe_arm_and_its_table(tmp_path):
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    write_inputs(tmp_path / "popqa" / "input", input_rows(4), 4)
    cells = {c.arm: c for c in decision.plan_cells(["popqa"], ["speculative", "no_dedupe_verifier"], base, tmp_path,
                                                   tuned_drafter=None, ablation_datasets=["popqa"],
                                                   ablation_input={"popqa": tmp_path / "popqa" / "input"})[0]}
    spec, off = cells["speculative"], cells["no_dedupe_verifier"]
    model = base.verifier.model

    def rows(saved):  # each row: 3 verified drafts, two the same -> one repeat per row
        def fields(i, r):
            return {"drafts": [draft("a", "r"), draft("a", "r"), draft("b", "s")], "correct": True,
                    "verifier_drafts_deduplicated": saved}
        return fields
    write_cell(spec.input_dir, spec.output_dir, spec.config, [{model: (600, 100, 2)}], seconds=6.0, fields=rows(1))
    write_cell(off.input_dir, off.output_dir, off.config, [{model: (800, 100, 2)}], seconds=8.0, fields=rows(None))
    loaded = {"popqa": {c.arm: decision.load_cell(c) for c in (spec, off)}}
    assert (loaded["popqa"]["speculative"]["deduplicate_drafts"], loaded["popqa"]["no_dedupe_verifier"]
            ["deduplicate_drafts"]) == (True, False)
    res = ds.summarise(loaded, {"popqa": {}}, ["SUPPORTS", "REFUTES"], reps=200)
    arms = res["datasets"]["popqa"]["arms"]
    assert arms["speculative"]["verifier_passes_saved"] == 4 and arms["no_dedupe_verifier"]["verifier_passes_saved"] == 0
    assert arms["no_dedupe_verifier"]["verifier_duplicates"] == {"rows": 4, "verified": 12, "duplicates": 4,
                                                                 "share": 4 / 12, "ab_tokens_share": 4 / 12}
    text = ds.tables(res)
    # 6 s / 4 rows; 600 prompt tokens / 4 rows; 12 verified drafts, 4 repeats, 4 passes saved
    assert ("| popqa | speculative | on | 4 | 100.0 [100.0, 100.0] | 1.50 | 150 (drafter+verifier) | 12 | "
            "4 (33.3%, α+β tokens 33.3%) | 4 |  |  |  |") in text
    # switch off: no pass saved, 8 s / 6 s and 900 / 700 tokens: ratios above 1
    assert ("| popqa | no_dedupe_verifier | off | 4 | 100.0 [100.0, 100.0] | 2.00 | 200 (drafter+verifier) | 12 | "
            "4 (33.3%, α+β tokens 33.3%) | 0 | +0.0 [+0.0, +0.0], p = 1 (0/0) | 1.33 [1.33, 1.33] (n = 1 shards) | "
            "1.29 [1.29, 1.29] (n = 1 shards) |") in text


def test_the_table_still_reads_the_results_that_measured_the_switch():
    """Results written before the flip: arm ``dedupe_verifier``, no per-cell setting, the
    benchmark config with the switch off. The table reads speculative as off, the arm as on,
    with the figures of benchmarks/decision/tables.md at 40a79f3."""
    res = json.loads((Path(__file__).parent / "decision_results_dedupe_40a79f3.json").read_text())
    assert "deduplicate_drafts" not in res["datasets"]["climate_fever"]["arms"]["dedupe_verifier"]
    text = "\n".join(ds.dedupe_table(res))
    assert ("| climate_fever | speculative | off | 100 | 37.0 [27.0, 46.0] | 15.89 | 267 (verifier) | 176 | "
            "41 (23.3%, α+β tokens 18.7%) | 0 |  |  |  |") in text
    assert ("| climate_fever | dedupe_verifier | on | 50 | 44.0 [30.0, 58.0] | 14.74 | 201 (verifier) | 88 | "
            "23 (26.1%, α+β tokens 20.6%) | 23 | +0.0 [+0.0, +0.0], p = 1 (0/0) | 0.90 [0.86, 0.94] (n = 5 shards) | "
            "0.95 [0.93, 0.97] (n = 5 shards) |") in text
    # a config written before the field existed ran without deduplication
    del res["config"]["verifier"]["deduplicate_drafts"]
    assert ds.dedupe_setting(res, "speculative", res["datasets"]["climate_fever"]["arms"]["speculative"]) is False
    assert ds.dedupe_setting({}, "speculative", {}) is None
