"""The throughput benchmark's planning and aggregation (benchmarks/throughput.py, issue 13
item 6), no engine: which variants run in which order, their configs and rows, and the figures
read back from a runs tree in the product's own marker format (benchmarks/tests/product_runs.py)."""

from __future__ import annotations

import json

import pytest

import decision
import throughput

from .conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs

CONFIG = ROOT / "configs" / "bench.yaml"
SHARED = ROOT.parent / "shared" / "data"
DRAFTER, VERIFIER = "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"


def test_plan_grows_rows_then_documents_and_runs_shared_variants_once():
    V = throughput.Variant
    plan = throughput.plan_variants(4, (1, 4, 16), (10, 20, 40))
    # rows 4, 16, 64 at N = 10 and N = 10, 20, 40 at 16 rows: (16, 10) is in both series, once
    assert plan == [V(m, r, n) for r, n in [(4, 10), (16, 10), (16, 20), (16, 40), (64, 10)]
                    for m in throughput.MODES]
    assert throughput.plan_variants(2, (1,), (10, 40), docs_rows=3, modes=("speculative",)) == [
        V("speculative", 2, 10), V("speculative", 3, 10), V("speculative", 3, 40)]
    with pytest.raises(ValueError, match="mode"):
        throughput.plan_variants(modes=("fast",))
    with pytest.raises(ValueError, match=">= 1"):
        throughput.plan_variants(0)


def test_variant_config_keeps_n_documents_in_the_mode():
    from specrag_batch.config import load_config

    base = load_config(CONFIG)
    std = throughput.variant_config(base, throughput.Variant("standard", 4, 40))
    spec = throughput.variant_config(base, throughput.Variant("speculative", 4, 40))
    assert (std.mode, std.retrieval.top_n) == ("standard", 40)
    assert (spec.mode, spec.retrieval.top_n) == ("speculative", 40)
    # the product's defaults: no verifier pass (its engine is not loaded), one drafting round
    dflt = throughput.variant_config(base, throughput.Variant(decision.ONE_ROUND_ARM, 4, 40))
    assert (dflt.mode, dflt.retrieval.top_n, dflt.sampling.adaptive) == ("speculative", 40, False)
    assert spec.uses_verifier and not dflt.uses_verifier
    # N = 10 is the decision benchmark's own config: the same runs could serve both
    assert throughput.variant_config(base, throughput.Variant("speculative", 4, 10)).config_hash() == \
        decision.arm_config(base, "speculative").config_hash()


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_nq_rows_have_n_documents_nested_across_n():
    rows = {n: throughput.variant_rows(SHARED, 3, n) for n in (10, 20, 40)}
    # N = 10 rows are the decision benchmark's reported NQ-open rows
    assert rows[10] == decision.reported_rows("nq_open", SHARED, 3)
    for n, rs in rows.items():
        assert all(len(r["documents"]) == n == len({d["doc_id"] for d in r["documents"]}) for r in rs)
    for a, b in ((10, 20), (20, 40)):  # more distractors add passages, never swap them
        for ra, rb in zip(rows[a], rows[b]):
            assert {d["doc_id"] for d in ra["documents"]} < {d["doc_id"] for d in rb["documents"]}
    with pytest.raises(ValueError, match="reserved"):
        throughput.variant_rows(SHARED, 290, 10)


def test_figures_and_tables_from_product_markers(tmp_path):
    from specrag_batch.config import load_config

    base = load_config(CONFIG)
    runs = tmp_path / "runs"
    v_std, v_spec, v_todo = (throughput.Variant("standard", 4, 20), throughput.Variant("speculative", 4, 20),
                             throughput.Variant("speculative", 16, 20))
    cells = {v: throughput.cell_for(runs, v, throughput.variant_config(base, v)) for v in (v_std, v_spec, v_todo)}
    write_inputs(cells[v_std].input_dir, input_rows(4, docs=20), shard_rows=2)
    # 2 shards of 2 rows, 9 s each: 4 rows in 18 s = 800 rows/hour
    write_cell(cells[v_std].input_dir, cells[v_std].output_dir, cells[v_std].config,
               [{VERIFIER: (4000, 30, 1)}] * 2, seconds=9.0)
    write_cell(cells[v_spec].input_dir, cells[v_spec].output_dir, cells[v_spec].config,
               [{DRAFTER: (3000, 500, 1), VERIFIER: (800, 10, 1)}] * 2, drafts=5, seconds=12.0)
    std = throughput.figures(v_std, decision.load_cell(cells[v_std]), {"seconds": 24.0, "load_1min": 1.5})
    assert std["complete"] and std["rows"] == 4 and std["compute_s"] == 18.0
    assert std["rows_per_hour"] == pytest.approx(800.0) and std["s_per_row"] == pytest.approx(4.5)
    assert std["wall_rows_per_hour"] == pytest.approx(600.0)
    assert std["models"] == {VERIFIER: {"role": "verifier", "prompt_tokens_per_row": 2000,
                                        "generated_tokens_per_row": 15}}
    spec = throughput.figures(v_spec, decision.load_cell(cells[v_spec]))
    assert spec["rows_per_hour"] == pytest.approx(600.0) and spec["tokens_per_row"] == pytest.approx(2155.0)
    assert spec["models"][DRAFTER]["role"] == "drafter" and "wall" not in spec
    todo = throughput.figures(v_todo, None)
    assert todo == {"mode": "speculative", "rows_planned": 16, "docs": 20, "complete": False, "rows": 0}
    md = throughput.markdown([std, spec, todo], {"machine": {"cpus": 2, "platform": "x"}, "config_path": "c",
                                                 "shard_rows": 2})
    assert "| standard | 4 of 4 | 20 | 800 | 600 | 4.50 | - | 2000 / 15 | 1.5 |" in md
    assert "| speculative | 4 of 4 | 20 | 600 | n/a | 6.00 | 1500 / 250 | 400 / 5 | n/a |" in md
    assert "Incomplete variants: speculative/rows16-n20." in md


def test_analyse_only_tabulates_a_runs_tree(tmp_path):
    from specrag_batch.config import load_config

    base = load_config(CONFIG)
    runs, out = tmp_path / "runs", tmp_path / "tp"
    v = throughput.Variant("standard", 2, 10)
    cell = throughput.cell_for(runs, v, throughput.variant_config(base, v))
    write_inputs(cell.input_dir, input_rows(2), shard_rows=10)
    write_cell(cell.input_dir, cell.output_dir, cell.config, [{VERIFIER: (2000, 20, 1)}], seconds=6.0)
    assert throughput.main(["--analyse-only", "--runs", str(runs), "--out", str(out), "--base-rows", "2",
                            "--row-factors", "1", "--docs", "10", "--docs-rows", "2", "--modes", "standard"]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert [(r["mode"], r["rows"], r["docs"], r["rows_per_hour"]) for r in res["variants"]] == [
        ("standard", 2, 10, pytest.approx(1200.0))]
    assert "| standard | 2 of 2 | 10 | 1200 |" in out.with_suffix(".md").read_text()
    # a subset run (another mode) keeps the figures of variants finished before, and a variant
    # directory holding only another config's markers is not reported
    assert throughput.main(["--analyse-only", "--runs", str(runs), "--out", str(out), "--base-rows", "2",
                            "--row-factors", "1", "--docs", "10", "--docs-rows", "2",
                            "--modes", decision.ONE_ROUND_ARM]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert [(r["mode"], r["rows_planned"], r["complete"]) for r in res["variants"]] == [
        (decision.ONE_ROUND_ARM, 2, False), ("standard", 2, True)]
    other = throughput.Variant("standard", 2, 20)
    stale = throughput.cell_for(runs, other, throughput.variant_config(base, other))
    write_inputs(stale.input_dir, input_rows(2, docs=20), shard_rows=10)
    write_cell(stale.input_dir, stale.output_dir, stale.config, [{VERIFIER: (1, 1, 1)}], seconds=1.0,
               config_hash="0" * 16)
    assert throughput.variants_on_disk(runs) == [v, other]
    assert throughput.main(["--analyse-only", "--runs", str(runs), "--out", str(out), "--base-rows", "2",
                            "--row-factors", "1", "--docs", "10", "--docs-rows", "2",
                            "--modes", decision.ONE_ROUND_ARM]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert [(r["mode"], r["docs"]) for r in res["variants"]] == [(decision.ONE_ROUND_ARM, 10), ("standard", 10)]


def test_analyse_only_with_nothing_finished_keeps_the_tables(tmp_path, capsys):
    out = tmp_path / "tp"
    out.with_suffix(".md").write_text("committed figures\n")
    assert throughput.main(["--analyse-only", "--runs", str(tmp_path / "empty"), "--out", str(out)]) == 2
    assert "no finished variant" in capsys.readouterr().err
    assert out.with_suffix(".md").read_text() == "committed figures\n" and not out.with_suffix(".json").exists()
