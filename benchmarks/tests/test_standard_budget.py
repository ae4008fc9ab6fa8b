"""benchmarks/standard_budget.py on small Parquet cells: only the rows cut at the budget are
replaced, every other row keeps its answer, and the comparisons are the paired ones."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import standard_budget as sb

CUT = sb.CUT


def _cell(path, rows):
    path.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), path / "part-0000.parquet")


def _row(q, correct, flags=()):
    return {"query_id": q, "correct": correct, "flags": list(flags)}


def test_cut_rows_are_replaced_and_compared_paired(tmp_path, capsys):
    # q0-q3 cut at the budget (wrong); q0, q1 right with room; q4-q7 not cut
    standard = [_row(f"q{i}", i in (4, 5), [CUT] if i < 4 else []) for i in range(8)]
    rerun = [_row("q0", True), _row("q1", True), _row("q2", False, [CUT]), _row("q3", False)]
    spec = [_row(f"q{i}", i in (0, 2, 4, 6)) for i in range(8)]
    _cell(tmp_path / "std", standard)
    _cell(tmp_path / "rerun", rerun)
    _cell(tmp_path / "spec", spec)
    assert sb.main(["--standard", str(tmp_path / "std"), "--rerun", str(tmp_path / "rerun"), "--speculative",
                    str(tmp_path / "spec"), "--budget", "256", "--out", str(tmp_path / "o" / "budget"),
                    "--reps", "200"]) == 0
    f = json.loads((tmp_path / "o" / "budget.json").read_text())
    assert (f["n"], f["cut_at_budget"], f["still_cut"]) == (8, 4, 1)
    assert f["accuracy"] == {"standard": 2 / 8, "standard_larger_budget": 4 / 8, "speculative": 4 / 8}
    # larger budget vs cell: q0, q1 right only with room; speculative vs larger budget: q2, q6 vs q1, q5
    assert f["larger_budget_vs_standard"]["mcnemar"]["b"] == 2 and f["larger_budget_vs_standard"]["mcnemar"]["c"] == 0
    m = f["speculative_vs_larger_budget"]["mcnemar"]
    assert (m["b"], m["c"]) == (2, 2)
    assert f["speculative_vs_larger_budget"]["diff"] == pytest.approx(0.0)
    assert "max_tokens 256" in capsys.readouterr().out


def test_merge_refuses_rows_that_do_not_match():
    standard = {"a": _row("a", False, [CUT]), "b": _row("b", True)}
    with pytest.raises(SystemExit, match="no rerun row"):
        sb.merge(standard, {})
    with pytest.raises(SystemExit, match="were not cut"):
        sb.merge(standard, {"a": _row("a", True), "b": _row("b", True)})
    assert sb.merge(standard, {"a": _row("a", True)})["a"]["correct"] is True
