"""The decision benchmark's rows (benchmarks/decision.py, issue 13): reported rows stay inside
the reserve drafter training never reads, never overlap the tuning split or the training rows
(by query id), and input shards are rewritten only when their rows change (their file version
is part of the product's resume key)."""

from __future__ import annotations

import pytest

import decision
import decision_stats

from .conftest import ROOT

SHARED = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_reported_rows_are_reserved_and_disjoint_from_tuning_and_training():
    from specrag_batch.core.datasets import benchmark_rows, training_rows

    reserve = {name: [r["query_id"] for r in rows] for name, rows in benchmark_rows(SHARED).items()}
    train = {r["query_id"] for rows in training_rows(SHARED).values() for r in rows}
    sizes, verifier_sizes = {}, {}
    for name in decision.DATASETS:
        rep = [r["query_id"] for r in decision.reported_rows(name, SHARED, 100)]
        tune = {r["query_id"] for r in decision.tuning_rows(name, SHARED)}
        sizes[name] = len(rep)
        assert len(set(rep)) == len(rep)
        assert set(rep) <= set(reserve[name]), f"{name}: reported rows outside the benchmark reserve"
        assert not set(rep) & train, f"{name}: reported rows in the training split"
        assert not set(rep) & tune, f"{name}: reported rows in the tuning split"
        assert len(tune) == decision.TUNING_ROWS
        sel = [r["query_id"] for r in decision.selection_tuning_rows(name, SHARED)]
        assert len(sel) == (decision.SELECTION_TUNING_ROWS if name in decision.SELECTION_TUNING_START else 0)
        assert set(sel) <= set(reserve[name]) and not set(sel) & train, f"{name}: selection tuning outside the reserve"
        assert not set(sel) & (set(rep) | tune), f"{name}: selection-tuning rows reported or in the tuning split"
        ver = [r["query_id"] for r in decision.extra_tuning_rows(decision.VERIFIER_TUNING_ARM, name, SHARED)]
        verifier_sizes[name] = len(ver)
        assert set(ver) <= set(reserve[name]) and not set(ver) & train, f"{name}: verifier tuning outside the reserve"
        assert not set(ver) & (set(rep) | tune | set(sel)), f"{name}: verifier-tuning rows read by another split"
    # >= 100 where the data has them, every row after the tuning split where it has fewer
    assert sizes == {"climate_fever": 100, "hotpotqa": 100, "nq_open": 100, "popqa": 74 - 20,
                     "arc_challenge": 71 - 20}
    # the verifier-tuning split: every reserved row after the selection-tuning split
    assert verifier_sizes == {"climate_fever": 300 - 240, "hotpotqa": 300 - 240, "nq_open": 300 - 220,
                              "popqa": 0, "arc_challenge": 0}
    with pytest.raises(ValueError, match="reserved"):
        decision.reported_rows("climate_fever", SHARED, 261)
    with pytest.raises(ValueError, match="would reach its selection-tuning rows"):
        decision.reported_rows("nq_open", SHARED, 101)


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_claims_decision_rows_are_the_reported_ones_then_rows_past_the_reserve_and_no_tuning_row():
    claims = [r["query_id"] for r in decision.reported_rows(decision.CLAIMS_DECISION, SHARED, 400)]
    every = [r["query_id"] for r in decision.CONVERTERS["climate_fever"](SHARED)]
    assert len(set(claims)) == 400
    assert claims[:100] == [r["query_id"] for r in decision.reported_rows("climate_fever", SHARED, 100)]
    assert claims[100:] == every[decision.BENCHMARK_RESERVE:decision.BENCHMARK_RESERVE + 300]
    tuning = {r["query_id"] for r in decision.tuning_rows("climate_fever", SHARED)}
    tuning |= {r["query_id"] for r in decision.selection_tuning_rows("climate_fever", SHARED)}
    tuning |= {r["query_id"] for r in decision.extra_tuning_rows(decision.VERIFIER_TUNING_ARM, "climate_fever", SHARED)}
    assert not set(claims) & tuning
    with pytest.raises(ValueError, match="has 400 rows"):
        decision.reported_rows(decision.CLAIMS_DECISION, SHARED, 401)


def test_claims_decision_refuses_a_tuned_drafter_arm(tmp_path, capsys):
    with pytest.raises(SystemExit):
        decision.main(["--datasets", decision.CLAIMS_DECISION, "--arms", "speculative-tuned",
                       "--tuned-drafter", str(tmp_path), "--runs", str(tmp_path / "runs")])
    assert "drafter training may read" in capsys.readouterr().err


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_nq_open_rows_have_ten_passages_from_reserved_questions_only():
    nq = decision.reported_rows("nq_open", SHARED, 100)
    reserved = {r["query_id"] for r in decision.CONVERTERS["nq_open"](SHARED)}
    positions = set()
    for r in nq:
        ids = [d["doc_id"] for d in r["documents"]]
        assert len(ids) == 10 == len(set(ids)) and f"{r['query_id']}:gold" in ids
        assert {i.rsplit(":", 1)[0] for i in ids} <= reserved  # no passage of a training question
        positions.add(ids.index(f"{r['query_id']}:gold"))
    assert len(positions) > 5  # the gold passage is not always first


def test_input_shards_are_rewritten_only_when_their_rows_change(tmp_path):
    rows = [{"query_id": f"q{i}", "query": "q", "task": "qa", "documents": [], "choices": None,
             "gold": ["a"]} for i in range(25)]
    paths = decision.write_shards(rows, tmp_path, 10)
    assert [p.name for p in paths] == ["part-0000.parquet", "part-0001.parquet", "part-0002.parquet"]
    stamps = {p.name: p.stat().st_mtime_ns for p in paths}
    rows[12]["query"] = "changed"
    paths = decision.write_shards(rows[:20], tmp_path, 10)
    assert sorted(p.name for p in tmp_path.glob("part-*.parquet")) == ["part-0000.parquet", "part-0001.parquet"]
    assert paths[0].stat().st_mtime_ns == stamps["part-0000.parquet"]  # unchanged: same file version
    assert paths[1].stat().st_mtime_ns != stamps["part-0001.parquet"]


def test_arms_groups_and_configs():
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    assert decision.expand_arms("main,speculative,m3") == ["standard", "speculative", "m3"]
    assert decision.arm_config(base, "standard").mode == "standard"
    assert decision.arm_config(base, "k3").sampling.num_clusters == 3
    default = decision.arm_config(base, decision.DEFAULT_ARM)  # no verifier pass, adaptive drafting
    assert default.sampling.adaptive and not default.selection.use_self_consistency
    assert not default.selection.use_self_reflection
    assert decision.arm_config(base, "speculative-tuned", "/models/x").drafter.model == "/models/x"
    # the large drafter: the defaults in one round, drafting with the verifier's model; a config
    # whose drafter already is its verifier model has no such arm (the same cells as one round)
    bench = load_config(ROOT / "configs" / "bench.yaml")
    large = decision.arm_config(bench, decision.LARGE_DRAFTER_ARM)
    assert large.drafter.model == bench.verifier.model != bench.drafter.model
    assert not large.uses_verifier and not large.sampling.adaptive
    assert large.model_dump(exclude={"drafter"}) == \
        decision.arm_config(bench, decision.ONE_ROUND_ARM).model_dump(exclude={"drafter"})
    with pytest.raises(ValueError, match="already is its verifier model"):
        decision.arm_config(base, decision.LARGE_DRAFTER_ARM)
    assert decision_stats.baselines_of(decision.LARGE_DRAFTER_ARM) == [
        (decision.LARGE_DRAFTER_ARM, "standard"), (decision.LARGE_DRAFTER_ARM, decision.ONE_ROUND_ARM)]
    with pytest.raises(ValueError, match="--tuned-drafter"):
        decision.arm_config(base, "speculative-tuned")
    with pytest.raises(ValueError, match="unknown"):
        decision.expand_arms("standard,fast")
    cells, notes = decision.plan_cells(["popqa", "nq_open"], decision.expand_arms("all"), base, tmp := ROOT / "x",
                                       tuned_drafter=None, ablation_datasets=["popqa"],
                                       ablation_input={"popqa": tmp / "popqa" / "input-first50"})
    names = [c.name for c in cells]
    # main arms of every dataset first, then the product's defaults on every dataset, then (no
    # tuned drafter: noted) the ablations, then the fallback arm's tuning cells
    # (fallback_standard itself waits for their τ_min: noted)
    assert names[:8] == ["popqa/standard", "popqa/speculative", "nq_open/standard", "nq_open/speculative",
                         "popqa/speculative-default", "popqa/speculative-default-one-round",
                         "nq_open/speculative-default", "nq_open/speculative-default-one-round"]
    assert cells[4].input_dir == cells[5].input_dir == tmp / "popqa" / "input"  # every reported row, as main
    assert all(n.startswith("popqa/") for n in names[8:-2]) and "popqa/m7" in names
    assert names[-2:] == ["popqa/tuning", "nq_open/tuning"]
    assert any("--tuned-drafter" in n for n in notes) and any("fallback_standard" in n for n in notes)
    assert any("already is its verifier model" in n for n in notes)  # SmolLM2 drafts and verifies here
    assert cells[-3].input_dir == tmp / "popqa" / "input-first50"


def test_selection_tuning_cells_run_last_only_when_named_and_only_where_there_are_rows():
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    kw = dict(tuned_drafter=None, ablation_datasets=[], ablation_input={})
    tmp = ROOT / "x"
    cells, _ = decision.plan_cells(["popqa", "nq_open"], decision.expand_arms("all"), base, tmp, **kw)
    assert not any(c.arm == decision.SELECTION_TUNING_ARM for c in cells)  # in no group
    arms = decision.expand_arms(f"main,fallback,{decision.SELECTION_TUNING_ARM}")
    cells, _ = decision.plan_cells(["popqa", "nq_open"], arms, base, tmp, **kw)
    last = cells[-1]
    assert [c.name for c in cells if c.arm == decision.SELECTION_TUNING_ARM] == ["nq_open/tuning-selection"]
    assert last.name == "nq_open/tuning-selection" and last.input_dir == tmp / "nq_open" / "input-tuning-selection"
    assert last.config.config_hash() == decision.arm_config(base, "speculative").config_hash()
    with pytest.raises(ValueError, match="not an ablation"):
        decision.expand_arms(f"speculative+{decision.SELECTION_TUNING_ARM}")
    # the verifier-tuning cells come after the selection-tuning ones, on their own input
    arms = decision.expand_arms(f"{decision.VERIFIER_TUNING_ARM},main,{decision.SELECTION_TUNING_ARM}")
    cells, _ = decision.plan_cells(["popqa", "nq_open"], arms, base, tmp, **kw)
    assert [c.name for c in cells[-2:]] == ["nq_open/tuning-selection", "nq_open/tuning-verifier"]
    assert cells[-1].input_dir == tmp / "nq_open" / "input-tuning-verifier"
    assert cells[-1].config.config_hash() == decision.arm_config(base, "speculative").config_hash()
    with pytest.raises(ValueError, match="not an ablation"):
        decision.expand_arms(f"speculative+{decision.VERIFIER_TUNING_ARM}")


def test_selection_tuning_rows_join_the_tuning_rows_for_the_variant_choice_only(tmp_path):
    """analyse(): a tuning cell and a selection-tuning cell of one dataset count as one tuning
    split of 12 + 8 rows for the post-hoc variants; τ_min (calibrate_all) reads the tuning cell
    alone; neither is reported as an arm."""
    import json

    from specrag_batch.config import load_config

    from .product_runs import input_rows, write_cell, write_inputs
    from .test_decision_archive import rich_fields

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    runs = tmp_path / "runs"
    write_inputs(runs / "nq_open" / "input", input_rows(10, prefix="r"), 5)
    write_inputs(runs / "nq_open" / "input-tuning", input_rows(12, prefix="t"), 4)
    write_inputs(runs / "nq_open" / "input-tuning-selection", input_rows(8, prefix="s"), 4)
    arms = decision.expand_arms(f"main,tuning,{decision.SELECTION_TUNING_ARM}")
    cells, _ = decision.plan_cells(["nq_open"], arms, base, runs, tuned_drafter=None, ablation_datasets=[],
                                   ablation_input={})
    use = {"m": (900, 120, 3)}
    for seed, c in enumerate(cells):
        n = len(list(c.input_dir.glob("*.parquet")))
        write_cell(c.input_dir, c.output_dir, c.config, [use] * n, seconds=10.0, fields=rich_fields(seed))
    res = decision.analyse(cells, {"nq_open": input_rows(10, prefix="r")}, base, tmp_path / "out",
                           {"config_path": "c.yaml", "rows_per_dataset": {"nq_open": 10}}, 50,
                           decision.calibrate_all(cells), {"nq_open": input_rows(12, prefix="t") + input_rows(8, prefix="s")})
    figures = res["score_terms"]["tuning"]["datasets"]["nq_open"]
    assert figures["n"] == 12 + 8  # every tuning row of both cells
    assert set(res["cells_loaded"]["nq_open"]) == {"standard", "speculative"}
    tuning_only = [c for c in cells if c.arm == decision.TUNING_ARM]
    assert decision.calibrate_all(cells) == decision.calibrate_all(tuning_only)
    assert json.loads((tmp_path / "out" / "results.json").read_text())["score_terms"]["tuning"]["pooled"]["n"] == 20
    alone = decision.analyse(tuning_only + cells[:2], {"nq_open": input_rows(10, prefix="r")}, base, tmp_path / "o2",
                             {"config_path": "c.yaml", "rows_per_dataset": {"nq_open": 10}}, 50,
                             decision.calibrate_all(cells), {"nq_open": input_rows(12, prefix="t")})
    assert alone["score_terms"]["tuning"]["datasets"]["nq_open"]["n"] == 12


def test_verifier_tuning_cells_alone_decide_the_verifier_rule(tmp_path):
    """``--arms tuning-verifier`` alone: the verifier-tuning cell's rows, and only they, are the
    tuning rows on which the draft_score_only rule (decision_stats.VERIFIER_VARIANTS) is decided;
    the cell is not reported as an arm."""
    from specrag_batch.config import load_config

    from .product_runs import input_rows, write_cell, write_inputs
    from .test_decision_archive import rich_fields

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    runs = tmp_path / "runs"
    write_inputs(runs / "nq_open" / "input", input_rows(10, prefix="r"), 5)
    write_inputs(runs / "nq_open" / "input-tuning-verifier", input_rows(6, prefix="v"), 3)
    cells, _ = decision.plan_cells(["nq_open"], decision.expand_arms(decision.VERIFIER_TUNING_ARM), base, runs,
                                   tuned_drafter=None, ablation_datasets=[], ablation_input={})
    assert [c.name for c in cells] == ["nq_open/tuning-verifier"]
    for seed, c in enumerate(cells):
        n = len(list(c.input_dir.glob("*.parquet")))
        write_cell(c.input_dir, c.output_dir, c.config, [{"m": (900, 120, 3)}] * n, seconds=10.0,
                   fields=rich_fields(seed))
    res = decision.analyse(cells, {"nq_open": input_rows(10, prefix="r")}, base, tmp_path / "out",
                           {"config_path": "c.yaml", "rows_per_dataset": {"nq_open": 10}}, 50, None,
                           {"nq_open": input_rows(6, prefix="v")})
    assert res["verifier_terms"]["tuning"]["pooled"]["n"] == 6
    assert not res["cells_loaded"]  # never reported


def test_adaptive_tuning_pair_runs_last_per_dataset_on_the_verifier_tuning_rows():
    """Group ``tuning-adaptive``: per dataset with verifier-tuning rows, the product's defaults
    adaptively and then in one round, on those rows (their own input directories), after every
    other cell; in no other group; the reported-row arm of one round is in group ``default``."""
    from specrag_batch.config import load_config

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    kw = dict(tuned_drafter=None, ablation_datasets=[], ablation_input={})
    tmp = ROOT / "x"
    cells, _ = decision.plan_cells(["popqa", "nq_open"], decision.expand_arms("all"), base, tmp, **kw)
    assert not any(c.arm in decision.ADAPTIVE_TUNING_ARMS for c in cells)
    assert [c.name for c in cells if c.arm == decision.ONE_ROUND_ARM] == ["popqa/speculative-default-one-round",
                                                                         "nq_open/speculative-default-one-round"]
    cells, _ = decision.plan_cells(["climate_fever", "popqa", "nq_open"],
                                   decision.expand_arms(f"tuning-adaptive,main,{decision.VERIFIER_TUNING_ARM}"),
                                   base, tmp, **kw)
    assert [c.name for c in cells[-5:]] == ["nq_open/tuning-verifier", "climate_fever/tuning-adaptive-on",
                                            "climate_fever/tuning-adaptive-off", "nq_open/tuning-adaptive-on",
                                            "nq_open/tuning-adaptive-off"]
    on, off = cells[-2:]
    assert on.input_dir == tmp / "nq_open" / "input-tuning-adaptive-on"
    assert on.config.config_hash() == decision.arm_config(base, decision.DEFAULT_ARM).config_hash()
    assert off.config.config_hash() == decision.arm_config(base, decision.ONE_ROUND_ARM).config_hash()
    assert on.config.sampling.adaptive and not off.config.sampling.adaptive
    assert not on.config.uses_verifier and not off.config.uses_verifier
    assert off.config.model_dump(exclude={"sampling"}) == on.config.model_dump(exclude={"sampling"})
    with pytest.raises(ValueError, match="not an ablation"):
        decision.expand_arms("speculative+tuning-adaptive-off")


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_adaptive_tuning_cells_read_the_verifier_tuning_rows():
    for name in ("climate_fever", "hotpotqa", "nq_open", "popqa"):
        ver = [r["query_id"] for r in decision.extra_tuning_rows(decision.VERIFIER_TUNING_ARM, name, SHARED)]
        for cell in decision.ADAPTIVE_TUNING_ARMS:
            assert [r["query_id"] for r in decision.extra_tuning_rows(cell, name, SHARED)] == ver


def test_adaptive_tuning_cells_decide_adaptive_drafting_alone(tmp_path):
    """analyse(): the adaptive-tuning pair is compared one round - adaptive on its own rows
    (results key ``adaptive``), never reported as an arm and never added to the tuning rows of
    the selection variants; the choice follows decision_stats.verdict_adaptive."""
    from specrag_batch.config import load_config

    from .product_runs import input_rows, write_cell, write_inputs

    base = load_config(ROOT / "configs" / "test-smollm2.yaml")
    runs = tmp_path / "runs"
    write_inputs(runs / "nq_open" / "input", input_rows(10, prefix="r"), 5)
    for cell in decision.ADAPTIVE_TUNING_ARMS:
        write_inputs(runs / "nq_open" / f"input-{cell}", input_rows(40, prefix="v"), 4)
    cells, _ = decision.plan_cells(["nq_open"], decision.expand_arms("tuning-adaptive"), base, runs,
                                   tuned_drafter=None, ablation_datasets=[], ablation_input={})
    assert [c.name for c in cells] == ["nq_open/tuning-adaptive-on", "nq_open/tuning-adaptive-off"]
    # adaptive: right on rows 0-19; one round: right on every row, in 60% of the seconds
    right = {"tuning-adaptive-on": lambda i: i < 20, "tuning-adaptive-off": lambda i: True}
    for c in cells:
        ok = right[c.arm]
        write_cell(c.input_dir, c.output_dir, c.config, [{"m": (900, 120, 3)}] * 10,
                   seconds=10.0 if c.arm == "tuning-adaptive-on" else 6.0,
                   fields=lambda i, r, ok=ok: {"answer": "a" if ok(i) else "z", "correct": ok(i),
                                               "exact_match": ok(i)})
    res = decision.analyse(cells, {"nq_open": input_rows(10, prefix="r")}, base, tmp_path / "out",
                           {"config_path": "c.yaml", "rows_per_dataset": {"nq_open": 10}}, 200, None,
                           {"nq_open": input_rows(40, prefix="v")})
    assert not res["cells_loaded"] and res["score_terms"]["tuning"]["pooled"]["n"] == 0
    pooled = res["adaptive"]["pooled"]
    assert pooled["n"] == 40 and pooled["diff"] == pytest.approx(0.5)
    assert pooled["seconds"]["ratio"] == pytest.approx(0.6)
    assert res["adaptive"]["choice"] == "one round"
    assert res["adaptive"]["arms"]["nq_open"][decision.ONE_ROUND_ARM]["accuracy"] == 1.0
    assert "**one round** (`sampling.adaptive: false`)" in (tmp_path / "out" / "tables.md").read_text()


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_claims_decision_analysis_records_its_row_spans(tmp_path):
    # results.json names where the reported rows come from; the claims decision dataset has two
    # spans and no REPORT_START entry (its analysis once ended in a KeyError)
    import json

    decision.main(["--config", str(decision.ROOT / "configs" / "bench.yaml"), "--datasets", decision.CLAIMS_DECISION,
                   "--rows", "20", "--arms", "standard", "--analyse-only", "--no-archive",
                   "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"][decision.CLAIMS_DECISION]
    assert rows["spans"] == [[40, 140], [300, 600]] and rows["first_row"] == 40
    assert len(rows["query_ids"]) == 20
