"""Tuned vs untuned drafters in the decision benchmark (issue 12), no engine: the arm plan
(``--tuned-drafter`` as one dir or ``label=dir`` pairs, ``speculative-smol``, their configs and
distinct cells) and the "Tuned vs untuned drafter" table on a run tree written with the
product's own writers (tests/unit/product_runs.py), each tuned arm paired with the untuned arm
of its base model from its training manifest."""

from __future__ import annotations

import json
import sys

import pytest

from ..conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs

sys.path.insert(0, str(ROOT / "benchmarks"))
import decision  # noqa: E402


@pytest.fixture
def bench():
    from specrag_batch.config import load_config

    return load_config(ROOT / "configs" / "bench.yaml")  # drafter Qwen2.5-Coder-0.5B, verifier 1.5B


def test_tuned_drafter_one_dir_or_label_dir_pairs():
    assert decision.parse_tuned_drafters(None) == {} and decision.parse_tuned_drafters(" ") == {}
    # one directory: the arm of earlier run directories
    assert decision.parse_tuned_drafters("/work/train/smol-tuned") == {"speculative-tuned": "/work/train/smol-tuned"}
    assert decision.parse_tuned_drafters("smol=/a/smol, qwen=/b/qwen-tuned") == {
        "speculative-tuned-smol": "/a/smol", "speculative-tuned-qwen": "/b/qwen-tuned"}
    assert decision.parse_tuned_drafters("smol=/a") == {"speculative-tuned-smol": "/a"}
    bad = {"smol=/a,/b/qwen": "item 2 '/b/qwen': expected label=<model dir>",
           "/a,/b": "item 1 '/a': expected label=",
           "smol=/a,qwen=": "item 2 'qwen=': expected label=",
           "=/a": "item 1 '=/a': label ''",
           "smol=/a,q wen=/b": "item 2 'q wen=/b': label 'q wen'",
           "smol=/a,smol=/b": "item 2 'smol=/b': label 'smol' given twice"}
    for spec, msg in bad.items():
        with pytest.raises(ValueError, match=msg.replace("[", r"\[")):
            decision.parse_tuned_drafters(spec)


def test_tuned_group_expands_to_the_labelled_arms():
    tuned = list(decision.parse_tuned_drafters("smol=/a,qwen=/b"))
    assert decision.expand_arms("tuned", tuned) == ["speculative-smol", "speculative-tuned-smol", "speculative-tuned-qwen"]
    assert decision.expand_arms("tuned") == ["speculative-smol", "speculative-tuned"]
    every = decision.expand_arms("all", tuned)
    assert every[:5] == ["standard", "speculative", "speculative-smol", "speculative-tuned-smol",
                         "speculative-tuned-qwen"] and "speculative-tuned" not in every
    assert decision.expand_arms("speculative-smol,speculative-tuned-smol", tuned) == [
        "speculative-smol", "speculative-tuned-smol"]
    with pytest.raises(ValueError, match="give --tuned-drafter gemma=<model dir>"):
        decision.expand_arms("speculative-tuned-gemma", tuned)
    with pytest.raises(ValueError, match="give --tuned-drafter smol=<model dir>"):
        decision.expand_arms("speculative-tuned-smol")


def test_tuned_arms_configs_and_distinct_cells(bench, tmp_path):
    drafters = decision.parse_tuned_drafters("smol=/m/smol-tuned,qwen=/m/qwen-tuned")
    arms = decision.expand_arms("main,tuned", list(drafters))
    cells, notes = decision.plan_cells(["climate_fever", "popqa"], arms, bench, tmp_path, tuned_drafter=drafters,
                                       ablation_datasets=[], ablation_input={})
    assert notes == []
    # main arms of every dataset first, then the tuned group
    assert [c.name for c in cells] == [
        "climate_fever/standard", "climate_fever/speculative", "popqa/standard", "popqa/speculative",
        "climate_fever/speculative-smol", "climate_fever/speculative-tuned-smol", "climate_fever/speculative-tuned-qwen",
        "popqa/speculative-smol", "popqa/speculative-tuned-smol", "popqa/speculative-tuned-qwen"]
    by = {c.arm: c for c in cells if c.dataset == "climate_fever"}
    assert {a: c.config.drafter.model for a, c in by.items() if a != "standard"} == {
        "speculative": "qwen2.5-coder-0.5b-instruct", "speculative-smol": "smollm2-135m-instruct",
        "speculative-tuned-smol": "/m/smol-tuned", "speculative-tuned-qwen": "/m/qwen-tuned"}
    for c in by.values():  # only the drafter differs from the config; the verifier is the same
        assert c.config.verifier == bench.verifier
        assert c.config.model_copy(update={"drafter": bench.drafter, "mode": bench.mode}) == bench
    # every cell its own run directory and config hash (the resume key of its done markers)
    assert len({c.output_dir for c in cells}) == len(cells)
    assert len({c.config.config_hash() for c in by.values()}) == len(by)
    assert by["speculative-tuned-smol"].output_dir == tmp_path / "climate_fever" / "speculative-tuned-smol"
    # one dir: the arm speculative-tuned, as before
    one = decision.plan_cells(["popqa"], decision.expand_arms("tuned"), bench, tmp_path, tuned_drafter="/m/x",
                              ablation_datasets=[], ablation_input={})[0]
    assert [(c.arm, c.config.drafter.model) for c in one] == [("speculative-smol", "smollm2-135m-instruct"),
                                                              ("speculative-tuned", "/m/x")]
    with pytest.raises(ValueError, match="speculative-tuned-qwen needs --tuned-drafter qwen=<model dir>"):
        decision.arm_config(bench, "speculative-tuned-qwen", {"speculative-tuned-smol": "/m/smol-tuned"})


def test_smol_arm_is_skipped_when_the_config_drafts_with_smollm2():
    from ..conftest import small_config

    base = small_config()
    assert base.drafter.model == decision.SMOL_DRAFTER
    cells, notes = decision.plan_cells(["popqa"], ["speculative", "speculative-smol"], base, ROOT / "x",
                                       tuned_drafter=None, ablation_datasets=[], ablation_input={})
    assert [c.arm for c in cells] == ["speculative"]
    assert notes == ["arm speculative-smol: the config's drafter already is smollm2-135m-instruct "
                     "(the same cells as speculative)"]


def tuned_dir(path, base_model: str | None):
    """A model directory with a training manifest naming ``base_model`` (None: no manifest)."""
    path.mkdir(parents=True)
    if base_model is not None:
        (path / "training_manifest.json").write_text(json.dumps({"kind": "drafter_training", "base_model": base_model}))
    return str(path)


def test_untuned_arm_of_a_tuned_drafter(bench, tmp_path):
    assert decision.untuned_arm(tuned_dir(tmp_path / "s", "smollm2-135m-instruct"), bench) == "speculative-smol"
    assert decision.untuned_arm(tuned_dir(tmp_path / "q", "qwen2.5-coder-0.5b-instruct"), bench) == "speculative"
    assert decision.untuned_arm(tuned_dir(tmp_path / "g", "gemma3-270m"), bench) is None
    assert decision.untuned_arm(tuned_dir(tmp_path / "n", None), bench) is None


def test_tuned_vs_untuned_table(bench, tmp_path):
    drafters = {"speculative-tuned-smol": tuned_dir(tmp_path / "m" / "smol", "smollm2-135m-instruct"),
                "speculative-tuned-qwen": tuned_dir(tmp_path / "m" / "qwen", "qwen2.5-coder-0.5b-instruct")}
    runs = tmp_path / "runs"
    cells, _ = decision.plan_cells(["popqa"], decision.expand_arms("main,tuned", list(drafters)), bench, runs,
                                   tuned_drafter=drafters, ablation_datasets=[], ablation_input={})
    by = {c.arm: c for c in cells}
    write_inputs(runs / "popqa" / "input", input_rows(4), 2)
    ver = bench.verifier.model

    def fields(right, broken=0):
        """Row i right when right[i]; 2 drafts per row, ``broken`` of them without an answer field."""
        def f(i, r):
            drafts = [{"doc_ids": [], "answer": "a", "rationale": "r", "tokens_draft": 7,
                       "flags": ["no_answer_field"] if j < broken else []} for j in range(2)]
            return {"correct": right[i], "drafts": drafts}
        return f
    # cell -> (drafter, generated drafter tokens per shard of 2 rows, seconds per shard, rows right, broken drafts)
    plan = {"speculative": (bench.drafter.model, 120, 8.0, [1, 1, 0, 0], 0),
            "speculative-smol": ("smollm2-135m-instruct", 200, 10.0, [1, 0, 0, 0], 1),
            "speculative-tuned-smol": (drafters["speculative-tuned-smol"], 100, 6.0, [1, 1, 1, 0], 0),
            "speculative-tuned-qwen": (drafters["speculative-tuned-qwen"], 90, 12.0, [1, 1, 1, 1], 0)}
    write_cell(by["standard"].input_dir, by["standard"].output_dir, by["standard"].config, [{ver: (100, 10, 1)}] * 2,
               seconds=4.0, fields=lambda i, r: {"correct": i == 0})
    for arm, (model, gen, sec, right, broken) in plan.items():
        c = by[arm]
        write_cell(c.input_dir, c.output_dir, c.config, [{model: (500, gen, 5), ver: (300, 5, 5)}] * 2,
                   seconds=sec, fields=fields([bool(x) for x in right], broken))
    res = decision.analyse(cells, {"popqa": input_rows(4)}, bench, tmp_path / "out",
                           {"config_path": "bench.yaml", "rows_per_dataset": {"popqa": 4}}, 200)
    cmps = res["datasets"]["popqa"]["comparisons"]
    # each tuned arm vs standard and vs speculative; the tuned SmolLM2 also vs the untuned SmolLM2
    assert {k for k in cmps if k.startswith("speculative-tuned")} == {
        "speculative-tuned-smol - standard", "speculative-tuned-smol - speculative",
        "speculative-tuned-smol - speculative-smol",
        "speculative-tuned-qwen - standard", "speculative-tuned-qwen - speculative"}
    same = cmps["speculative-tuned-smol - speculative-smol"]
    assert (same["n"], same["diff"], same["mcnemar"]["b"], same["mcnemar"]["c"]) == (4, 0.5, 2, 0)
    assert same["seconds"]["ratio"] == pytest.approx(0.6)
    text = (tmp_path / "out" / "tables.md").read_text()
    assert "Tuned vs untuned drafter (issue 12)" in text
    # 4 paired rows: 3 vs 1 right, +50 points, McNemar p = 0.5 (2/0); drafts 100% vs 50% parse;
    # drafter tokens per row 100/2 vs 200/2; 6 s vs 10 s per shard of 2 rows
    assert ("| popqa | speculative-tuned-smol | speculative-smol | 4 | 75.0 | 25.0 | +50.0 [+0.0, +100.0], "
            "p = 0.5 (2/0) | 100.0 / 50.0 | 50 / 100 | 3.00 / 5.00 | 0.60 [0.60, 0.60] (n = 2 shards) |") in text
    assert ("| popqa | speculative-tuned-qwen | speculative | 4 | 100.0 | 50.0 | +50.0 [+0.0, +100.0], "
            "p = 0.5 (2/0) | 100.0 / 100.0 | 45 / 60 | 6.00 / 4.00 | 1.50 [1.50, 1.50] (n = 2 shards) |") in text
    assert ("| popqa | speculative-tuned-qwen | standard | 4 | 100.0 | 25.0 | +75.0 [+25.0, +100.0], "
            "p = 0.25 (3/0) | 100.0 / n/a | 45 / n/a | 6.00 / 2.00 | 3.00 [3.00, 3.00] (n = 2 shards) |") in text
    assert "Speculative RAG, tuned drafter smol, vs Standard RAG" in text
    # pooled over the one dataset: the same paired figures, no per-cell columns
    assert ("| pooled | speculative-tuned-smol | speculative-smol | 4 | 75.0 | 25.0 | +50.0 [+0.0, +100.0], "
            "p = 0.5 (2/0) | | | | 0.60 [0.60, 0.60] (n = 2 shards) |") in text
