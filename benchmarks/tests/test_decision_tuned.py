"""Tuned vs untuned drafters in the decision benchmark (issue 12), no engine: the arm plan
(``--tuned-drafter`` as one dir or ``label=dir`` pairs, ``speculative-smol``, their configs and
distinct cells) and the "Tuned vs untuned drafter" table on a run tree written with the
product's own writers (benchmarks/tests/product_runs.py), each tuned arm paired with the untuned arm
of its base model from its training manifest; composed arms ``<base arm>+<ablation>`` (names,
refusals, config = base arm's + overrides, plan, '+' in run and archive paths) and their table
"Ablations on other drafters" against the base arm."""

from __future__ import annotations

import json

import pytest

import decision

from .conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs


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
    assert every[:8] == ["standard", "speculative", "speculative-default", "speculative-default-one-round",
                         "speculative-default-large-drafter",
                         "speculative-smol", "speculative-tuned-smol", "speculative-tuned-qwen"]
    assert "speculative-tuned" not in every
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
    from .conftest import small_config

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


# --- composed arms: <base arm>+<ablation> (an ablation on a tuned drafter) --------------------------------------

COMPOSED_QWEN = "speculative-tuned-qwen+answer_on_truncation"


def test_composed_arm_names_and_refusals():
    tuned = list(decision.parse_tuned_drafters("smol=/a,qwen=/b"))
    assert decision.composed_arm(COMPOSED_QWEN, tuned) == ("speculative-tuned-qwen", "answer_on_truncation")
    assert decision.composed_arm("speculative-smol+block32", tuned) == ("speculative-smol", "block32")
    assert decision.composed_arm("speculative-tuned-qwen", tuned) is None
    assert not decision.is_tuned_arm(COMPOSED_QWEN) and decision.is_tuned_arm("speculative-tuned-qwen")
    spec = f"{COMPOSED_QWEN},speculative-tuned-smol+answer_on_truncation"
    # each brings its base arm (the baseline of its comparison) unless named before it
    assert decision.expand_arms(spec, tuned) == ["speculative-tuned-qwen", COMPOSED_QWEN, "speculative-tuned-smol",
                                                 "speculative-tuned-smol+answer_on_truncation"]
    assert decision.expand_arms(f"tuned,{COMPOSED_QWEN}", tuned) == [
        "speculative-smol", "speculative-tuned-smol", "speculative-tuned-qwen", COMPOSED_QWEN]
    assert not any("+" in a for a in decision.expand_arms("all", tuned))  # named one by one only
    # one dir: the arm speculative-tuned is a base too
    assert decision.expand_arms("speculative-tuned+draft48", ["speculative-tuned"]) == [
        "speculative-tuned", "speculative-tuned+draft48"]
    bad = {"speculative-tuned-qwen+fallback_standard": "fallback_standard cannot be composed: its selection.tau_min",
           "speculative-tuned-qwen+without_draft_score": "without_draft_score cannot be composed: it is re-selected",
           "speculative-tuned-qwen+speculative-smol": "speculative-smol cannot be composed: it is a base arm",
           "speculative-tuned-qwen+answer_on_trunc": "unknown ablation 'answer_on_trunc' .*; did you mean "
                                                     "answer_on_truncation",
           "standard+draft48": "base arm 'standard' cannot be composed",
           "speculativ+draft48": "base arm 'speculativ' .*; did you mean speculative",
           "speculative-tuned-gemma+draft48": "base arm speculative-tuned-gemma needs --tuned-drafter gemma=<model dir>",
           "speculative-tuned-qwen+draft48+m3": "one '\\+<ablation>' suffix only"}
    for arm, msg in bad.items():
        with pytest.raises(ValueError, match=f"arm '{arm.replace('+', '[+]')}': {msg}"):
            decision.expand_arms(f"speculative,{arm}", tuned)
    with pytest.raises(ValueError, match="base arm speculative-tuned-qwen needs --tuned-drafter qwen="):
        decision.expand_arms(COMPOSED_QWEN)  # no tuned drafters given
    with pytest.raises(ValueError, match="a group .* or <base arm>[+]<ablation>\\); did you mean answer_on_truncation"):
        decision.expand_arms("answer_on_truncaton", tuned)


def test_composed_arm_config_is_its_base_arm_with_the_ablation_on_top(bench, tmp_path):
    drafters = decision.parse_tuned_drafters("smol=/m/smol-tuned,qwen=/m/qwen-tuned")
    tuned = decision.arm_config(bench, "speculative-tuned-qwen", drafters)
    cfg = decision.arm_config(bench, COMPOSED_QWEN, drafters)
    assert not tuned.drafter.answer_on_truncation
    assert cfg == tuned.model_copy(update={"drafter": tuned.drafter.model_copy(update={"answer_on_truncation": True})})
    assert cfg.drafter.model == "/m/qwen-tuned"
    assert cfg.config_hash() != tuned.config_hash()
    assert cfg.config_hash() != decision.arm_config(bench, "answer_on_truncation").config_hash()  # not its drafter
    # a mapping override merges into the base arm's mapping, as the plain ablation does
    blk = decision.arm_config(bench, "speculative-smol+block32", drafters)
    assert blk.drafter.model == decision.SMOL_DRAFTER
    assert blk.drafter.engine_kwargs == {**bench.drafter.engine_kwargs, "block_size": 32}
    # refused: the base arm's config already has the ablation's setting (the same cells as the base arm)
    on = bench.model_copy(update={"drafter": bench.drafter.model_copy(update={"answer_on_truncation": True})})
    with pytest.raises(ValueError, match=r"arm speculative-tuned-qwen\+answer_on_truncation: the config of "
                       r"speculative-tuned-qwen already sets drafter.answer_on_truncation true \(the same cells as "
                       r"speculative-tuned-qwen\)"):
        decision.arm_config(on, COMPOSED_QWEN, drafters)
    long = bench.model_copy(update={"drafter": bench.drafter.model_copy(update={"max_tokens": 160})})
    with pytest.raises(ValueError, match=r"arm speculative-smol\+draft160: draft160's overrides .* leave the config "
                       r"of speculative-smol unchanged"):
        decision.arm_config(long, "speculative-smol+draft160")
    with pytest.raises(ValueError, match=r"arm speculative-tuned-qwen\+draft48: arm speculative-tuned-qwen needs "
                       r"--tuned-drafter qwen=<model dir>"):
        decision.arm_config(bench, "speculative-tuned-qwen+draft48", {"speculative-tuned-smol": "/m/smol-tuned"})
    # plan: composed cells after the ablations, on every dataset's reported rows (not --ablation-rows), each its
    # own run directory; a refused one is a note, as the plain arms' are
    arms = decision.expand_arms(f"speculative,speculative-tuned-qwen,{COMPOSED_QWEN},answer_on_truncation",
                                list(drafters))
    first = tmp_path / "popqa" / "input-first5"
    cells, notes = decision.plan_cells(["climate_fever", "popqa"], arms, bench, tmp_path, tuned_drafter=drafters,
                                       ablation_datasets=["popqa"], ablation_input={"popqa": first})
    assert notes == []
    assert [c.name for c in cells][-3:] == ["popqa/answer_on_truncation", f"climate_fever/{COMPOSED_QWEN}",
                                            f"popqa/{COMPOSED_QWEN}"]
    by = {c.name: c for c in cells}
    assert by["popqa/answer_on_truncation"].input_dir == first
    for ds in ("climate_fever", "popqa"):
        c = by[f"{ds}/{COMPOSED_QWEN}"]
        assert (c.input_dir, c.output_dir) == (tmp_path / ds / "input", tmp_path / ds / COMPOSED_QWEN)
        assert c.input_dir == by[f"{ds}/speculative-tuned-qwen"].input_dir and c.config == cfg
    _, notes = decision.plan_cells(["popqa"], arms, on, tmp_path, tuned_drafter=drafters, ablation_datasets=["popqa"],
                                   ablation_input={"popqa": first})
    assert notes == ["arm answer_on_truncation: the config already sets drafter.answer_on_truncation true "
                     "(the same cells as speculative)",
                     f"arm {COMPOSED_QWEN}: the config of speculative-tuned-qwen already sets "
                     "drafter.answer_on_truncation true (the same cells as speculative-tuned-qwen)"]


def test_composed_arm_vs_its_base_table(bench, tmp_path):
    import cell_archive

    qwen = tuned_dir(tmp_path / "m" / "qwen", "qwen2.5-coder-0.5b-instruct")
    drafters = {"speculative-tuned-qwen": qwen}
    runs = tmp_path / "runs"
    arms = decision.expand_arms(f"main,speculative-tuned-qwen,{COMPOSED_QWEN}", list(drafters))
    cells, _ = decision.plan_cells(["popqa"], arms, bench, runs, tuned_drafter=drafters, ablation_datasets=[],
                                   ablation_input={})
    by = {c.arm: c for c in cells}
    write_inputs(runs / "popqa" / "input", input_rows(4), 2)
    ver = bench.verifier.model
    cut = ["truncated_at_max_tokens", "no_answer_field", "empty_answer"]  # cut before its answer: unusable
    forced = ["truncated_at_max_tokens", "answer_forced"]  # cut, answer written after a forced "Answer:": valid

    def fields(right, flags):
        """Row i right when right[i]; 2 drafts per row, the first with ``flags``."""
        return lambda i, r: {"correct": right[i], "drafts": [
            {"doc_ids": [], "answer": "a", "rationale": "r", "tokens_draft": 7, "flags": fl} for fl in (flags, [])]}
    # cell -> (drafter, drafter generated tokens per shard of 2 rows, seconds per shard, rows right, first draft's flags)
    plan = {"speculative": (bench.drafter.model, 120, 8.0, [1, 1, 0, 0], []),
            "speculative-tuned-qwen": (qwen, 100, 6.0, [1, 0, 0, 0], cut),
            COMPOSED_QWEN: (qwen, 110, 7.5, [1, 1, 1, 0], forced)}
    write_cell(by["standard"].input_dir, by["standard"].output_dir, by["standard"].config, [{ver: (100, 10, 1)}] * 2,
               seconds=4.0, fields=lambda i, r: {"correct": i == 0})
    for arm, (model, gen, sec, right, flags) in plan.items():
        c = by[arm]
        write_cell(c.input_dir, c.output_dir, c.config, [{model: (500, gen, 5), ver: (300, 5, 5)}] * 2,
                   seconds=sec, fields=fields([bool(x) for x in right], flags))
    # the '+' in the run directory and archive path: the product's resume API finds the done shards, the archive
    # keeps and restores them
    composed = by[COMPOSED_QWEN]
    assert composed.output_dir.name == COMPOSED_QWEN
    assert all(d is not None for _, _, d in decision.cell_shards(composed))
    archive = tmp_path / "archive"
    assert cell_archive.archive_cell(composed, archive) == {"added": 2, "present": 0, "failed": []}
    assert {n.split("/")[1] for n in cell_archive.entries(archive)} == {COMPOSED_QWEN}
    moved = decision.Cell("popqa", COMPOSED_QWEN, composed.config, composed.input_dir, tmp_path / "runs2" / COMPOSED_QWEN)
    assert cell_archive.restore_cell(moved, archive)["restored"] == 2
    assert [r["query_id"] for r in decision.load_cell(moved)["rows"]] == ["q0", "q1", "q2", "q3"]

    res = decision.analyse(cells, {"popqa": input_rows(4)}, bench, tmp_path / "out",
                           {"config_path": "bench.yaml", "rows_per_dataset": {"popqa": 4}}, 200)
    cmps = res["datasets"]["popqa"]["comparisons"]
    # compared with its base arm only (not with standard or speculative), per dataset and pooled
    assert {k for k in cmps if k.startswith(COMPOSED_QWEN)} == {f"{COMPOSED_QWEN} - speculative-tuned-qwen"}
    cmp = cmps[f"{COMPOSED_QWEN} - speculative-tuned-qwen"]
    assert (cmp["n"], cmp["diff"], cmp["mcnemar"]["b"], cmp["mcnemar"]["c"]) == (4, 0.5, 2, 0)
    assert cmp["seconds"]["ratio"] == pytest.approx(1.25)
    assert f"{COMPOSED_QWEN} - speculative-tuned-qwen" in res["pooled"]["comparisons"]
    assert res["composed_arms"] == {COMPOSED_QWEN: {"base": "speculative-tuned-qwen", "ablation": "answer_on_truncation"}}
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["composed_arms"] == res["composed_arms"]
    assert saved["datasets"]["popqa"]["comparisons"][f"{COMPOSED_QWEN} - speculative-tuned-qwen"]["n"] == 4
    text = (tmp_path / "out" / "tables.md").read_text()
    assert "Ablations on other drafters" in text
    # 4 paired rows: 3 vs 1 right, +50 points, McNemar p = 0.5 (2/0); 2 drafts per row, one of them cut: parsed
    # 50% both, forced 50% vs 0%, valid 100% vs 50%; drafter tokens per row 110/2 vs 100/2; 7.5 s vs 6 s per shard
    assert (f"| popqa | {COMPOSED_QWEN} | speculative-tuned-qwen | 4 | 75.0 | 25.0 | +50.0 [+0.0, +100.0], "
            "p = 0.5 (2/0) | 50.0 / 50.0 | 50.0 / 0.0 | 100.0 / 50.0 | 55 / 50 | 3.75 / 3.00 | "
            "1.25 [1.25, 1.25] (n = 2 shards) |") in text
    assert (f"| pooled | {COMPOSED_QWEN} | speculative-tuned-qwen | 4 | 75.0 | 25.0 | +50.0 [+0.0, +100.0], "
            "p = 0.5 (2/0) | | | | | | 1.25 [1.25, 1.25] (n = 2 shards) |") in text
    # not in the tuned table, the other-arms table or the verdicts (its base arm is its only baseline)
    tuned_part = text.split("Tuned vs untuned drafter")[1].split("Ablations on other drafters")[0]
    assert "| popqa | speculative-tuned-qwen | speculative |" in tuned_part and COMPOSED_QWEN not in tuned_part
    assert f"| popqa | {COMPOSED_QWEN} - " not in text
    assert COMPOSED_QWEN not in text.split("## Tables")[0]


def lora_dir(path, base_model: str):
    """A directory as ``drafter train`` writes it with LoRA: training manifest and ``adapter/``."""
    tuned_dir(path, base_model)
    (path / "adapter").mkdir()
    (path / "adapter" / "adapter_config.json").write_text("{}")
    return str(path)


def test_a_lora_tuned_drafter_is_served_unmerged_as_its_base_plus_adapter(bench, tmp_path):
    # issue 40: the merged weights round the update away in a bf16 engine; the arm serves the adapter
    qwen = lora_dir(tmp_path / "qwen", "qwen2.5-coder-0.5b-instruct")
    cfg = decision.arm_config(bench, "speculative-tuned-qwen", {"speculative-tuned-qwen": qwen})
    assert (cfg.drafter.model, cfg.drafter.adapter) == ("qwen2.5-coder-0.5b-instruct", str(tmp_path / "qwen" / "adapter"))
    assert cfg.config_hash() != decision.arm_config(bench, "speculative").config_hash()
    # named as <base>::<adapter dir>: the same config without the directory (re-analysing archived cells)
    named = decision.arm_config(bench, "speculative-tuned-qwen",
                                {"speculative-tuned-qwen": f"qwen2.5-coder-0.5b-instruct::{tmp_path / 'qwen' / 'adapter'}"})
    assert named.config_hash() == cfg.config_hash()
    assert decision.untuned_arm(cfg.drafter.model, bench, cfg.drafter.adapter) == "speculative"
    smol = lora_dir(tmp_path / "smol", "smollm2-135m-instruct")
    d = decision.arm_config(bench, "speculative-tuned-smol", {"speculative-tuned-smol": smol}).drafter
    assert d.model == "smollm2-135m-instruct" and decision.untuned_arm(d.model, bench, d.adapter) == "speculative-smol"
    # a directory without adapter/ (a full fine-tune, or an archived arm's path not on this machine): the model itself
    full = tuned_dir(tmp_path / "full", "qwen2.5-coder-0.5b-instruct")
    for d in (full, "/not/here"):
        c = decision.arm_config(bench, "speculative-tuned", d)
        assert (c.drafter.model, c.drafter.adapter) == (d, None)


def test_a_drafter_arm_under_the_defaults(bench, tmp_path):
    # <drafter arm>+defaults: the product's defaults (the one-round arm's overrides) with that arm's drafter
    qwen = lora_dir(tmp_path / "qwen", "qwen2.5-coder-0.5b-instruct")
    drafters = {"speculative-tuned-qwen": qwen}
    arm = "speculative-tuned-qwen+defaults"
    assert decision.composed_arm(arm, list(drafters)) == ("speculative-tuned-qwen", "defaults")
    cfg, one_round = decision.arm_config(bench, arm, drafters), decision.arm_config(bench, decision.ONE_ROUND_ARM)
    tuned = decision.arm_config(bench, "speculative-tuned-qwen", drafters)
    assert cfg.drafter == tuned.drafter and cfg.drafter.adapter is not None
    assert (cfg.selection, cfg.sampling) == (one_round.selection, one_round.sampling)
    assert cfg.model_copy(update={"drafter": one_round.drafter}) == one_round
    smol = decision.arm_config(bench, "speculative-smol+defaults")
    assert smol.drafter.model == decision.SMOL_DRAFTER and smol.selection == one_round.selection
    # refused: the config's own drafter under the defaults is the one-round arm; "defaults" alone is no arm
    with pytest.raises(ValueError, match=r"arm speculative\+defaults: speculative under the defaults is "
                       r"speculative-default-one-round \(the same cells\)"):
        decision.arm_config(bench, "speculative+defaults")
    with pytest.raises(ValueError, match=r"arm 'defaults': a suffix only \(<drafter arm>\+defaults"):
        decision.arm_config(bench, "defaults")
    assert "defaults" not in decision.GROUPS["ablations"]
    # it brings its baseline, the untuned drafter under the defaults (not the base arm's verifier pass)
    assert decision.expand_arms(f"standard,{arm}", list(drafters)) == ["standard", decision.ONE_ROUND_ARM, arm]
    # compared with the untuned drafter under the defaults, with Standard RAG, then with its base arm
    import decision_stats

    assert decision_stats.baselines_of(arm) == [(arm, decision.ONE_ROUND_ARM), (arm, "standard"),
                                                (arm, "speculative-tuned-qwen")]


def test_a_tuned_drafter_under_the_defaults_is_tabled_against_the_untuned_one(bench, tmp_path):
    qwen = lora_dir(tmp_path / "m" / "qwen", "qwen2.5-coder-0.5b-instruct")
    drafters = {"speculative-tuned-qwen": qwen}
    arm = "speculative-tuned-qwen+defaults"
    runs = tmp_path / "runs"
    cells, _ = decision.plan_cells(["popqa"], decision.expand_arms(f"standard,{arm}", list(drafters)), bench, runs,
                                   tuned_drafter=drafters, ablation_datasets=[], ablation_input={})
    by = {c.arm: c for c in cells}
    assert list(by) == ["standard", decision.ONE_ROUND_ARM, arm]
    write_inputs(runs / "popqa" / "input", input_rows(4), 2)
    base_model = bench.drafter.model  # the tuned arm's engine is the same base, with the adapter

    def fields(right):
        return lambda i, r: {"correct": right[i], "drafts": [
            {"doc_ids": [], "answer": "a", "rationale": "r", "tokens_draft": 7, "flags": []}] * 2}
    write_cell(by["standard"].input_dir, by["standard"].output_dir, by["standard"].config,
               [{bench.verifier.model: (100, 10, 1)}] * 2, seconds=4.0, fields=lambda i, r: {"correct": i == 0})
    for a, sec, right in ((decision.ONE_ROUND_ARM, 3.0, [1, 0, 0, 0]), (arm, 6.0, [1, 1, 0, 0])):
        c = by[a]
        write_cell(c.input_dir, c.output_dir, c.config, [{base_model: (500, 100, 5)}] * 2, seconds=sec,
                   fields=fields([bool(x) for x in right]))
    res = decision.analyse(cells, {"popqa": input_rows(4)}, bench, tmp_path / "out",
                           {"config_path": "bench.yaml", "rows_per_dataset": {"popqa": 4}}, 200)
    cmps = res["datasets"]["popqa"]["comparisons"]
    assert {k for k in cmps if k.startswith(arm)} == {f"{arm} - {decision.ONE_ROUND_ARM}", f"{arm} - standard"}
    cmp = cmps[f"{arm} - {decision.ONE_ROUND_ARM}"]
    assert (cmp["n"], cmp["diff"], cmp["seconds"]["ratio"]) == (4, 0.25, pytest.approx(2.0))
    text = (tmp_path / "out" / "tables.md").read_text()
    assert f"| popqa | {arm} | {decision.ONE_ROUND_ARM} | 4 | 50.0 | 25.0 | +25.0 " in text
