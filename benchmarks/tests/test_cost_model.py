"""The cost projection (benchmarks/cost_model.py, issue 13 item 5) on a small runs tree in the
product's own marker format (benchmarks/tests/product_runs.py): token counts per row read back
through decision.load_cell / decision_stats.cell_cost, and projected seconds hand-computed."""

from __future__ import annotations

import json

import pytest

import cost_model
import decision

from .conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs

CONFIG = ROOT / "configs" / "bench.yaml"
DRAFTER, VERIFIER = "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"
RATES = {"drafter_prefill_tps": 1000.0, "drafter_decode_tps": 20.0,
         "verifier_prefill_tps": 500.0, "verifier_decode_tps": 10.0}


@pytest.fixture
def runs(tmp_path):
    """popqa: 4 rows in 2 shards; standard and speculative cells (5 drafts per row) of
    configs/bench.yaml, written as the product writes them."""
    from specrag_batch.config import load_config

    base = load_config(CONFIG)
    r = tmp_path / "runs"
    write_inputs(r / "popqa" / "input", input_rows(4), shard_rows=2)
    # per shard (2 rows): standard verifier 6000 prompt / 40 generated tokens
    write_cell(r / "popqa" / "input", r / "popqa" / "standard", decision.arm_config(base, "standard"),
               [{VERIFIER: (6000, 40, 1)}] * 2)
    # speculative: drafter 2000 / 400 (10 drafts), verifier 1000 / 10 (one token per draft)
    write_cell(r / "popqa" / "input", r / "popqa" / "speculative", decision.arm_config(base, "speculative"),
               [{DRAFTER: (2000, 400, 1), VERIFIER: (1000, 10, 1)}] * 2, drafts=5)
    return r


def test_tokens_per_row_and_projection_hand_computed(runs):
    cells = cost_model.load_cells(runs, CONFIG, None, ["standard", "speculative"])
    res = cost_model.project(cells, RATES, replicas=None)
    assert res["label"].startswith("PROJECTION")
    std, spec = res["datasets"]["popqa"]["arms"]["standard"], res["datasets"]["popqa"]["arms"]["speculative"]
    assert std["mode"] == "standard" and spec["mode"] == "speculative"
    assert std["rows"] == spec["rows"] == 4
    assert std["tokens_per_row"] == {"verifier_prompt": 3000, "verifier_generated": 20}
    assert spec["tokens_per_row"] == {"drafter_prompt": 1000, "drafter_generated": 200,
                                      "verifier_prompt": 500, "verifier_generated": 5}
    assert spec["per_draft_tokens"] == {"prompt_tokens": 200, "generated_tokens": 40}
    # standard: 3000 / 500 + 20 / 10 = 8 s
    assert std["projected_s_per_row"]["total_s"] == pytest.approx(8.0)
    # speculative, one replica per draft: one wave of 200 / 1000 + 40 / 20 = 2.2 s; the
    # verifier only prefills: 500 / 500 = 1 s (its 5 generated tokens cost nothing more)
    p = spec["projected_s_per_row"]
    assert p["drafting_waves_per_row"] == 1
    assert p["drafting_s"] == pytest.approx(2.2) and p["verification_s"] == pytest.approx(1.0)
    assert p["total_s"] == pytest.approx(3.2)
    assert res["datasets"]["popqa"]["ratios"] == {"speculative": pytest.approx(0.4)}
    # every draft as long as the mean: the slowest draft changes nothing
    assert spec["slowest_draft_factor"] == 1.0 and p["total_s_slowest_draft"] == pytest.approx(3.2)
    # 2 replicas for 5 drafts: ceil(5 / 2) = 3 waves of 2.2 s
    p2 = cost_model.project(cells, RATES, replicas=2)["datasets"]["popqa"]["arms"]["speculative"]
    assert p2["projected_s_per_row"]["drafting_s"] == pytest.approx(6.6)


def test_waves_follow_adaptive_rounds_and_rows_without_drafts():
    # 5 drafts in 2 rounds on unlimited replicas: 2 waves; on 2 replicas 2 * ceil(2.5 / 2) = 4;
    # a row without drafts (an error) waits none
    assert cost_model.drafting_waves([5], [2], None) == 2
    assert cost_model.drafting_waves([5], [2], 2) == 4
    assert cost_model.drafting_waves([5, 0], [None, None], None) == 0.5
    assert cost_model.drafting_waves([], [], 3) == 0.0
    with pytest.raises(ValueError, match="at least 1"):
        cost_model.drafting_waves([5], [1], 0)
    with pytest.raises(ValueError, match="positive"):
        cost_model.stage_seconds(10, 1, 0.0, 1.0)


def test_one_model_in_both_roles_is_not_split(tmp_path):
    """A run where one model drafts and verifies has one usage entry: the projection names the
    cell and leaves it out instead of guessing a split."""
    from specrag_batch.config import load_config

    base = load_config(CONFIG, {"drafter.model": VERIFIER})
    r = tmp_path / "runs"
    write_inputs(r / "popqa" / "input", input_rows(2), shard_rows=2)
    cell = decision.Cell("popqa", "speculative", base, r / "popqa" / "input", r / "popqa" / "speculative")
    write_cell(cell.input_dir, cell.output_dir, base, [{VERIFIER: (3000, 410, 2)}], drafts=5)
    res = cost_model.project({"popqa": {"speculative": decision.load_cell(cell)}}, RATES, None)
    assert res["datasets"]["popqa"]["arms"] == {}
    assert "popqa/speculative" in res["notes"][0] and "cannot be split" in res["notes"][0]


def test_markers_of_another_config_are_not_read(runs, tmp_path):
    from specrag_batch.config import load_config

    stale = tmp_path / "runs" / "hotpotqa"
    write_inputs(stale / "input", input_rows(2, "h"), shard_rows=2)
    base = load_config(CONFIG)
    write_cell(stale / "input", stale / "standard", decision.arm_config(base, "standard"),
               [{VERIFIER: (100, 1, 1)}], config_hash="0000000000000000")
    cells = cost_model.load_cells(runs, CONFIG, None, ["standard", "speculative"])
    assert set(cells) == {"popqa"}


def test_cli_writes_labelled_projection_with_sources(runs, tmp_path, capsys):
    out = tmp_path / "proj"
    # every rate has a published default, each recorded with its source
    assert cost_model.main(["--runs", str(runs), "--config", str(CONFIG), "--out", str(out)]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["rates"] == {k: v["value"] for k, v in cost_model.PUBLISHED.items()}
    assert all(res["sources"][k]["url"].startswith("https://") for k in res["rates"])
    # a rate given on the command line is recorded as such
    assert cost_model.main(["--runs", str(runs), "--config", str(CONFIG), "--out", str(out),
                            "--verifier-prefill-tps", "500", "--verifier-decode-tps", "10"]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["label"].startswith("PROJECTION")
    assert res["rates"]["drafter_prefill_tps"] == cost_model.PUBLISHED["drafter_prefill_tps"]["value"]
    assert res["sources"]["drafter_decode_tps"]["url"].startswith("https://github.com/NVIDIA/TensorRT-LLM/")
    assert res["sources"]["verifier_prefill_tps"] == "given on the command line"
    # std 3000 / 500 + 20 / 10 = 8 s; spec 200 / 15398.5 + 40 / 111 + 500 / 500 s
    spec = 200 / cost_model.PUBLISHED["drafter_prefill_tps"]["value"] + 40 / 111 + 1.0
    assert res["datasets"]["popqa"]["ratios"]["speculative"] == pytest.approx(spec / 8.0)
    md = out.with_suffix(".md").read_text()
    assert "PROJECTION" in md and "| popqa | speculative | speculative | 4 |" in md


def test_the_slowest_draft_scales_generation(tmp_path):
    """Drafts of 10, 10, 10, 10, 60 tokens: the longest is 60 against a mean of 20, so a wave
    of parallel drafts generates 3x the mean draft's tokens."""
    from specrag_batch.config import load_config

    base = load_config(CONFIG)
    r = tmp_path / "runs"
    write_inputs(r / "popqa" / "input", input_rows(2), shard_rows=2)
    cfg = decision.arm_config(base, "speculative")
    write_cell(r / "popqa" / "input", r / "popqa" / "speculative", cfg,
               [{DRAFTER: (2000, 400, 1), VERIFIER: (1000, 10, 1)}], drafts=5, draft_tokens=[10, 10, 10, 10, 60])
    cells = cost_model.load_cells(r, CONFIG, None, ["speculative"])
    spec = cost_model.project(cells, RATES, None)["datasets"]["popqa"]["arms"]["speculative"]
    assert spec["slowest_draft_factor"] == pytest.approx(3.0)
    # per draft: 2000 / 10 = 200 prompt, 400 / 10 = 40 generated tokens; verifier 500 / 500 = 1 s
    p = spec["projected_s_per_row"]
    assert p["total_s"] == pytest.approx(200 / 1000 + 40 / 20 + 1.0)
    assert p["total_s_slowest_draft"] == pytest.approx(200 / 1000 + 3 * 40 / 20 + 1.0)


def test_a_missing_runs_directory_is_a_usage_error(tmp_path, capsys):
    out = tmp_path / "cp"
    with pytest.raises(SystemExit) as e:
        cost_model.main(["--runs", str(tmp_path / "nowhere"), "--out", str(out)])
    assert e.value.code == 2 and "no such directory" in capsys.readouterr().err
    assert not out.with_suffix(".json").exists()
