"""The decision benchmark's rows (benchmarks/decision.py, issue 13): reported rows stay inside
the reserve drafter training never reads, never overlap the tuning split or the training rows
(by query id), and input shards are rewritten only when their rows change (their file version
is part of the product's resume key)."""

from __future__ import annotations

import sys

import pytest

from ..conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import decision  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_reported_rows_are_reserved_and_disjoint_from_tuning_and_training():
    from specrag_batch.drafter_training.sources import benchmark_rows, training_rows

    reserve = {name: [r["query_id"] for r in rows] for name, rows in benchmark_rows(SHARED).items()}
    train = {r["query_id"] for rows in training_rows(SHARED).values() for r in rows}
    sizes = {}
    for name in decision.DATASETS:
        rep = [r["query_id"] for r in decision.reported_rows(name, SHARED, 100)]
        tune = {r["query_id"] for r in decision.tuning_rows(name, SHARED)}
        sizes[name] = len(rep)
        assert len(set(rep)) == len(rep)
        assert set(rep) <= set(reserve[name]), f"{name}: reported rows outside the benchmark reserve"
        assert not set(rep) & train, f"{name}: reported rows in the training split"
        assert not set(rep) & tune, f"{name}: reported rows in the tuning split"
        assert len(tune) == decision.TUNING_ROWS
    # >= 100 where the data has them, every row after the tuning split where it has fewer
    assert sizes == {"climate_fever": 100, "hotpotqa": 100, "nq_open": 100, "popqa": 74 - 20,
                     "arc_challenge": 71 - 20}
    with pytest.raises(ValueError, match="reserved"):
        decision.reported_rows("climate_fever", SHARED, 261)


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_nq_open_rows_have_ten_passages_from_reserved_questions_only():
    nq = decision.reported_rows("nq_open", SHARED, 100)
    reserved = {r["query_id"] for r in decision.benchmark_converters()["nq_open"](SHARED)}
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
    assert decision.arm_config(base, "speculative-tuned", "/models/x").drafter.model == "/models/x"
    with pytest.raises(ValueError, match="--tuned-drafter"):
        decision.arm_config(base, "speculative-tuned")
    with pytest.raises(ValueError, match="unknown"):
        decision.expand_arms("standard,fast")
    cells, notes = decision.plan_cells(["popqa", "nq_open"], decision.expand_arms("all"), base, tmp := ROOT / "x",
                                       tuned_drafter=None, ablation_datasets=["popqa"],
                                       ablation_input={"popqa": tmp / "popqa" / "input-first50"})
    names = [c.name for c in cells]
    # main arms of every dataset first, then (no tuned drafter: noted) the ablations, then
    # the fallback arm's tuning cells (fallback_standard itself waits for their τ_min: noted)
    assert names[:4] == ["popqa/standard", "popqa/speculative", "nq_open/standard", "nq_open/speculative"]
    assert all(n.startswith("popqa/") for n in names[4:-2]) and "popqa/m7" in names
    assert names[-2:] == ["popqa/tuning", "nq_open/tuning"]
    assert any("--tuned-drafter" in n for n in notes) and any("fallback_standard" in n for n in notes)
    assert cells[-3].input_dir == tmp / "popqa" / "input-first50"
