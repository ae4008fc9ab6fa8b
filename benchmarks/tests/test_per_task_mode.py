"""The mode per task from archived cells (benchmarks/per_task_mode.py, issue 49 item 3): the
declared rule, the per-task cell built from the two arms' cells, the split of a cell to rows
outside the reported ones, and the comparison against Standard RAG, on small synthetic cells."""

from __future__ import annotations

import math

import pytest

import per_task_mode as ptm

SPEC, STD = ptm.SPEC, ptm.STD
LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]


def cell(prefix: str, task: str, correct: list[bool], seconds: list[float], machine: str = "m1",
         shard_rows: int = 2) -> dict:
    """A cell of ``len(correct)`` graded rows in shards of ``shard_rows``, each shard with its seconds."""
    rows = [{"query_id": f"{prefix}:{i}", "task": task, "correct": c, "error": None, "gold": "x"}
            for i, c in enumerate(correct)]
    shards = [{"name": f"part-{k:04d}.parquet", "seconds": s, "rows_out": shard_rows, "machine": {"id": machine},
               "query_ids": [r["query_id"] for r in rows[k * shard_rows:(k + 1) * shard_rows]]}
              for k, s in enumerate(seconds)]
    return {"rows": rows, "shards": shards, "machines": [machine]}


def cmp(lo: float, ratio: float, n: int = 100, **seconds) -> dict:
    return {"n": n, "diff": 0.0, "ci95": [lo, lo + 0.1],
            "seconds": {"n": 10, "ratio": ratio, "ci95": [ratio - 0.1, ratio + 0.1], **seconds}}


def test_rule_needs_the_interval_above_minus_two_points_and_fewer_seconds():
    assert ptm.choose_mode(cmp(-0.019, 0.99))[0] == "speculative"
    assert ptm.choose_mode(cmp(0.05, 0.5))[0] == "speculative"
    # the lower end must lie above -2 points: at or below it, standard
    mode, why = ptm.choose_mode(cmp(-0.02, 0.5))
    assert mode == "standard" and "-2.0 points is not above -2" in why
    assert ptm.choose_mode(cmp(-0.10, 0.5))[0] == "standard"
    # not cheaper: standard, however accurate
    mode, why = ptm.choose_mode(cmp(0.10, 1.0))
    assert mode == "standard" and "not cheaper" in why
    # no evidence: standard
    assert ptm.choose_mode(None) == ("standard", "no rows outside the reported ones where both arms ran")
    assert ptm.choose_mode(cmp(0.1, 0.5, n=0))[0] == "standard"
    assert ptm.choose_mode(cmp(0.1, 0.5, withheld="n/a (different machines)"))[0] == "standard"
    assert ptm.choose_mode({"n": 5, "diff": 0.0, "ci95": [0.0, 0.1], "seconds": {"n": 0, "ratio": math.nan}})[0] \
        == "standard"


def test_per_task_cell_takes_each_shard_from_its_tasks_mode():
    spec = cell("c", "claim", [True, True, False, True], [1.0, 2.0])
    std = cell("c", "claim", [False, True, False, False], [4.0, 4.0])
    got = ptm.per_task_cell({SPEC: spec, STD: std}, {"claim": "speculative", "qa": "standard"}, "cf")
    assert [r["correct"] for r in got["rows"]] == [True, True, False, True]
    assert [s["seconds"] for s in got["shards"]] == [1.0, 2.0] and got["arms"] == [SPEC]
    got = ptm.per_task_cell({SPEC: spec, STD: std}, {"claim": "standard"}, "cf")
    assert [r["correct"] for r in got["rows"]] == [False, True, False, False] and got["arms"] == [STD]


def test_per_task_cell_mixes_arms_by_shard_on_a_mixed_input():
    # shard 0 holds claims, shard 1 questions: each from its task's arm
    spec, std = cell("m", "claim", [True, True, True, True], [1.0, 2.0]), cell("m", "claim", [False] * 4, [3.0, 5.0])
    for c in (spec, std):
        for r in c["rows"][2:]:
            r["task"] = "qa"
    got = ptm.per_task_cell({SPEC: spec, STD: std}, {"claim": "speculative", "qa": "standard"}, "mixed")
    assert [r["correct"] for r in got["rows"]] == [True, True, False, False]
    assert [s["seconds"] for s in got["shards"]] == [1.0, 5.0] and got["arms"] == [SPEC, STD]


def test_per_task_cell_refuses_what_it_cannot_split():
    spec, std = cell("m", "claim", [True] * 4, [1.0, 2.0]), cell("m", "claim", [False] * 4, [3.0, 5.0])
    for c in (spec, std):
        c["rows"][1]["task"] = "qa"  # shard 0 mixes claim and qa: its seconds cannot be split
    with pytest.raises(ValueError, match="shard part-0000.parquet: rows of 2 tasks"):
        ptm.per_task_cell({SPEC: spec, STD: std}, {"claim": "speculative", "qa": "standard"}, "mixed")
    spec, std = cell("m", "choice", [True] * 2, [1.0]), cell("m", "choice", [True] * 2, [1.0])
    with pytest.raises(ValueError, match="task 'choice' has no mode"):
        ptm.per_task_cell({SPEC: spec, STD: std}, {"claim": "speculative"}, "arc")
    with pytest.raises(ValueError, match="different shards"):
        ptm.per_task_cell({SPEC: cell("m", "qa", [True] * 4, [1.0, 1.0]), STD: cell("m", "qa", [True] * 2, [1.0])},
                          {"qa": "standard"}, "nq")


def test_split_cell_keeps_whole_shards_of_the_split():
    c = cell("c", "claim", [True, False, True, True, False, False], [1.0, 2.0, 3.0])
    got = ptm.split_cell(c, {"c:2", "c:3", "c:4", "c:5"}, "cf400")
    assert [r["query_id"] for r in got["rows"]] == ["c:2", "c:3", "c:4", "c:5"]
    assert [s["seconds"] for s in got["shards"]] == [2.0, 3.0] and got["machines"] == ["m1"]
    with pytest.raises(ValueError, match="cf400: shard part-0001.parquet holds rows both in and outside"):
        ptm.split_cell(c, {"c:3", "c:4", "c:5"}, "cf400")


def test_compare_against_standard_per_dataset_and_pooled():
    # claims: speculative right on 3 more rows of 4 (b = 3, c = 0) at half the seconds;
    # qa answered by standard: the same cell, so no difference and ratio 1
    claims = {SPEC: cell("c", "claim", [True, True, True, False], [1.0, 1.0]),
              STD: cell("c", "claim", [False, False, False, False], [2.0, 2.0])}
    qa = {SPEC: cell("q", "qa", [False] * 4, [1.0, 1.0]), STD: cell("q", "qa", [True, False, True, False], [3.0, 3.0])}
    modes = {"claim": "speculative", "qa": "standard"}
    pairs = {ds: (ptm.per_task_cell(c, modes, ds), c[STD]) for ds, c in (("cf", claims), ("nq", qa))}
    res = ptm.compare(pairs, {}, LABELS, reps=200)
    assert res["datasets"]["cf"]["diff"] == pytest.approx(0.75)
    assert res["datasets"]["cf"]["mcnemar"] == {"n": 4, "b": 3, "c": 0, "p": pytest.approx(0.25)}
    assert res["datasets"]["cf"]["seconds"]["ratio"] == pytest.approx(0.5)
    nq = res["datasets"]["nq"]
    assert (nq["diff"], nq["ci95"], nq["mcnemar"]["p"]) == (0.0, [0.0, 0.0], 1.0)
    assert nq["seconds"]["ratio"] == 1.0 and nq["seconds"]["ci95"] == [1.0, 1.0]
    pooled = res["pooled"]
    assert pooled["n"] == 8 and pooled["diff"] == pytest.approx(3 / 8)
    assert (pooled["accuracy_a"], pooled["accuracy_b"]) == (pytest.approx(5 / 8), pytest.approx(2 / 8))
    # seconds pooled over every shard pair: (1 + 1 + 3 + 3) / (2 + 2 + 3 + 3)
    assert pooled["seconds"]["ratio"] == pytest.approx(8 / 10) and pooled["seconds"]["n"] == 4
    assert ptm.choose_mode(pooled)[0] == "speculative"


def test_compare_leaves_out_seconds_of_two_machines():
    a, b = cell("c", "claim", [True] * 4, [1.0, 1.0], machine="m1"), cell("c", "claim", [False] * 4, [2.0, 2.0], "m2")
    res = ptm.compare({"cf": (a, b)}, {}, LABELS, reps=50)
    assert res["pooled"]["seconds"]["withheld"] and ptm.choose_mode(res["pooled"])[0] == "standard"


def test_issue_bar_says_by_how_much_a_dataset_misses():
    ok = {"n": 100, "diff": 0.0, "ci95": [0.0, 0.0], "mcnemar": {"b": 0, "c": 0}}
    miss = {"n": 100, "diff": 0.08, "ci95": [-0.03, 0.19], "mcnemar": {"b": 19, "c": 11}}
    rep = {"datasets": {"nq": ok, "cf": miss}, "pooled": {"seconds": {"n": 42, "ratio": 0.97, "ci95": [0.96, 0.98]}}}
    (line,) = ptm.issue_bar(rep)
    # n = 1.96^2 (0.30 - 0.0064) / 0.10^2 = 112.8
    assert line.startswith("cf: the interval's lower end -3.0 points misses -2 by 1.0 points at n = 100")
    assert "about 113 paired rows" in line
    rep["datasets"] = {"nq": ok}
    assert ptm.issue_bar(rep)[0].startswith("met:")
    rep["pooled"]["seconds"]["ci95"] = [0.9, 1.01]
    assert "not shown below 1" in ptm.issue_bar(rep)[0]
    assert ptm.rows_needed({"n": 10, "diff": -0.05, "mcnemar": {"b": 0, "c": 5}}) is None
