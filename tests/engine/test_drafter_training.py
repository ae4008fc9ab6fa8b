"""Specialist drafter (paper §3.1, issue 12): the data step with SmolLM2 as teacher on real
rows, and SFT of SmolLM2-135M on a tiny fixture (loss, label mask, merged model in vLLM and in
a pipeline run, resume after a kill; issue 40: the manifest of a resumed run, the rows not
trained on, the LoRA update kept in what the engine serves)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ..conftest import ROOT, sample_rows, small_config, subprocess_env
from ..fakes import FakeEngine

pytestmark = pytest.mark.slow
SHARED = ROOT.parent / "shared" / "data"


def tiny_training_data(dest: Path, n: int = 12) -> Path:
    """A tiny data prefix in the data step's schema, from the bundled PopQA demo rows: the
    completion names the first document's title and the gold (a fixed, learnable pattern)."""
    from specrag_batch.drafter_training.data import DATA_SCHEMA, completion_text

    recs = []
    for r in sample_rows("popqa", n).to_pylist():
        docs = r["documents"][:1]
        rationale = f"Document [1] ({docs[0]['title']}) gives the answer {r['gold'][0]}."
        recs.append({"query_id": r["query_id"], "task": "qa", "query": r["query"], "choices": None,
                     "gold": r["gold"], "subset_index": 0, "doc_ids": [d["doc_id"] for d in docs],
                     "documents": docs, "prompt": None, "prompt_tokens": None,
                     "completion": completion_text(rationale, r["gold"][0]), "rationale": rationale,
                     "answer": r["gold"][0], "teacher_text": rationale, "drop_reason": None,
                     "teacher_model": "fixture", "drafter_model": "smollm2-135m-instruct",
                     "source_file": "samples/demo/popqa.parquet", "source_row": 0})
    dest.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(recs, schema=DATA_SCHEMA), dest / "tiny.parquet")
    return dest


@dataclass
class PromptRecorder(FakeEngine):
    """Records the prompt ids the inference drafting stage hands to its engine. Only the
    prompts are under test here, so the replies come from the fake (tests/fakes.py, real
    SmolLM2 tokenizer) instead of a second slow vLLM generation."""

    prompts: list = field(default_factory=list)

    def generate(self, prompts, **kw):
        self.prompts += [list(p) for p in prompts]
        return super().generate(prompts, **kw)


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_data_step_prompts_equal_inference_and_filters_are_counted(tmp_path):
    from specrag_batch.drafter_training.data import answer_text, build_training_data
    from specrag_batch.drafter_training.filters import complete_sentences, strip_restatement
    from specrag_batch.drafter_training.teacher import teacher_prompt_hash
    from specrag_batch.core.datasets import INPUT_SCHEMA, training_rows
    from specrag_batch.engines.engine import get_engine
    from specrag_batch.core.parsing import parse_draft
    from specrag_batch.run.pipeline import StageTimer, draft_rows
    from specrag_batch.core.schema import validate_table

    cfg = small_config(**{"sampling.num_drafts": 2})
    rows = [r for rs in training_rows(SHARED, ("climate_fever", "nq_open"), limit=3).values() for r in rs]
    rows.append({**rows[0], "query_id": "no-gold-row", "gold": None})  # cannot give an example
    inp = tmp_path / "in"
    inp.mkdir()
    table = pa.Table.from_pylist(rows, schema=INPUT_SCHEMA)
    pq.write_table(table, inp / "rows.parquet")
    m = build_training_data(str(inp), str(tmp_path / "data"), cfg)
    out = pq.read_table(tmp_path / "data" / "rows.parquet").to_pylist()

    # every input row comes out; reasons counted in the manifest equal those in the data
    assert {r["query_id"] for r in out} == {r["query_id"] for r in rows}
    reasons = [r["drop_reason"] for r in out if r["drop_reason"]]
    assert m["dropped"] == {k: reasons.count(k) for k in set(reasons)}
    assert m["dropped"].get("no_gold") == 1
    assert m["kept"] == sum(r["drop_reason"] is None for r in out) and m["kept"] + len(reasons) == len(out)
    # a rationale cut by the token budget is kept only as complete sentences, and counted
    trimmed = [r for r in out if r["rationale_trimmed"] and r["drop_reason"] is None]
    assert m["trimmed"] == len(trimmed)
    assert all(complete_sentences(r["rationale"]) == r["rationale"] for r in trimmed)
    # a leading clause restating the answer is removed from kept rationales, and counted
    kept = [r for r in out if r["drop_reason"] is None]
    assert m["restated"] == sum(bool(r["rationale_restated"]) for r in kept)
    assert all(strip_restatement(r["rationale"], r["task"], r["answer"], r["choices"]) == r["rationale"] for r in kept)
    assert m["teacher_prompt_hash"] == teacher_prompt_hash()

    # the prompt is exactly what the inference drafter is given for that subset
    rec = PromptRecorder(tokenizer=get_engine(cfg.drafter, cfg.seed).tokenizer)
    vrows = validate_table(table, "rows.parquet")
    draft_rows([r for r in vrows if r.gold], cfg, rec, StageTimer())
    tok = rec.tokenizer
    sent = {tok.decode(p): len(p) for p in rec.prompts}  # prompt text -> its token count
    with_prompt = [r for r in out if r["prompt"] is not None]
    assert with_prompt
    for r in with_prompt:
        assert sent.get(r["prompt"]) == r["prompt_tokens"]
        assert r["prompt"].endswith("Rationale:")
        ans, _ = answer_text(r["task"], r["gold"], r["choices"], cfg.claim_labels)
        if r["drop_reason"] is None:  # completions end with the gold in the answer format
            assert r["completion"].endswith(f"\nAnswer: {ans}") and r["completion"].startswith(" ")
            assert parse_draft(r["completion"], r["task"], labels=cfg.claim_labels).answer == ans
        else:
            assert r["completion"] is None

    # re-running resumes: finished shards are not recomputed
    again = build_training_data(str(inp), str(tmp_path / "data"), cfg)
    assert all(s.get("resumed") for s in again["shards"]) and again["kept"] == m["kept"]


OPTS = dict(batch_size=2, grad_accum=1, learning_rate=2e-3, max_length=256, max_doc_tokens=64,
            eval_fraction=0.0)


def test_only_completion_tokens_carry_loss(tmp_path):
    """The labels TRL's collator builds are -100 exactly on the prompt (and padding): the
    loss is -log P(A, E | Q, D) on the completion, never on the prompt (paper §3.1)."""
    from specrag_batch.drafter_training.data import read_training_data
    from specrag_batch.drafter_training.train import TrainOptions, build_datasets, make_trainer
    from specrag_batch.engines.models import resolve_model
    from transformers import AutoTokenizer

    data = tiny_training_data(tmp_path / "data", n=4)
    opts = TrainOptions(max_steps=1, **OPTS)
    base = resolve_model("smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(base)
    rows = read_training_data(str(data))
    train_ds, _, counts = build_datasets(rows, tok, opts)
    assert counts["train"] == 4
    trainer = make_trainer(base, train_ds, None, tmp_path / "probe", opts, tok)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    for i in range(2):
        ids = train_ds[i]["input_ids"]
        labels = batch["labels"][i].tolist()
        assert all(lab == -100 for lab in labels[len(ids):])  # padding
        kept = [t for t, lab in zip(ids, labels) if lab != -100]
        # the trained tokens are exactly the completion and the end-of-turn token
        assert tok.decode(kept) == rows[i]["completion"] + tok.eos_token
        assert kept[-1] == tok.eos_token_id
        n_prompt = len(ids) - len(kept)
        assert tok.decode(ids[:n_prompt]).endswith("assistant\nRationale:")
        assert all(lab == -100 for lab in labels[:n_prompt])


def test_training_loss_merged_model_in_vllm_and_pipeline(tmp_path):
    from specrag_batch.drafter_training.train import TrainOptions, train_drafter
    from specrag_batch.engines.weights import drafter_identity
    from specrag_batch.engines.engine import get_engine
    from specrag_batch.run.pipeline import RunInfo, process_rows
    from specrag_batch.core.schema import validate_table

    data = tiny_training_data(tmp_path / "data")
    opts = TrainOptions(max_steps=12, save_steps=100, logging_steps=3, **OPTS)

    m = train_drafter(str(data), "smollm2-135m-instruct", str(tmp_path / "model"), opts)
    losses = [p["loss"] for p in m["loss_curve"]]
    assert len(losses) >= 4 and losses[-1] < losses[0]
    assert (tmp_path / "model" / "training_manifest.json").is_file()
    ident = drafter_identity(str(tmp_path / "model"))
    assert ident["training_manifest_id"] == m["manifest_id"] and ident["weights_sha256"]

    # the merged model is a drafter vLLM loads by path; a pipeline run with it drafts
    cfg = small_config(**{"drafter.model": str(tmp_path / "model")})
    drafter = get_engine(cfg.drafter, cfg.seed)
    verifier = get_engine(cfg.verifier, cfg.seed)
    rows = validate_table(sample_rows("popqa", 2, skip=12), "popqa.parquet")
    recs = process_rows(rows, cfg, drafter=drafter, verifier=verifier, info=RunInfo("t", "popqa"))
    assert all(r["error"] is None and r["drafts"] for r in recs)
    assert any(d["answer"] for r in recs for d in r["drafts"])
    assert recs[0]["drafter_model"] == str(tmp_path / "model")


def train_command(data: Path, out: Path) -> list[str]:
    return [str(Path(sys.executable).with_name("specrag-batch")), "drafter", "train", "--data", str(data),
            "--base", "smollm2-135m-instruct", "-o", str(out), "--max-steps", "6", "--save-steps", "2",
            "--batch-size", "2", "--grad-accum", "1", "--max-length", "256", "--max-doc-tokens", "64"]


def test_killed_training_resumes_and_its_manifest_describes_the_whole_training(tmp_path):
    """Killed after checkpoint-4 of 6 and run again: it resumes there, and the manifest
    describes the whole training as an uninterrupted run's does (issue 40 item 4: the loss over
    all 6 steps, not the last 2; time per step over the steps run; TRL's num_tokens carried
    across; resumed_from_step)."""
    data = tiny_training_data(tmp_path / "data")
    out = tmp_path / "model"
    cmd = train_command(data, out)
    env = subprocess_env(tmp_path)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 900
        while not list((out / "_checkpoints").glob("checkpoint-4/trainer_state.json")) and time.time() < deadline:
            assert proc.poll() is None, "training ended before it could be killed"
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not (out / "training_manifest.json").exists()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((out / "training_manifest.json").read_text())
    assert m["resumed_from"].endswith("checkpoint-4") and m["resumed_from_step"] == 4
    assert m["global_step"] == 6

    r = subprocess.run(train_command(data, tmp_path / "whole"), env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    whole = json.loads((tmp_path / "whole" / "training_manifest.json").read_text())
    assert whole["resumed_from_step"] is None and whole["loss_steps"] == 6
    assert m["loss_steps"] == 6 and m["train_loss"] == pytest.approx(whole["train_loss"], abs=1e-3)
    assert m["num_tokens"] == whole["num_tokens"] > 0
    assert [h["step"] for h in m["loss_curve"]] == [h["step"] for h in whole["loss_curve"]] == [2, 4, 5, 6]
    assert [h["loss"] for h in m["loss_curve"]] == pytest.approx([h["loss"] for h in whole["loss_curve"]], abs=1e-3)
    # the sessions: steps 1-4 before the kill (time up to the checkpoint), 5-6 after it
    assert [(x["from_step"], x["to_step"]) for x in m["sessions"]] == [(0, 4), (4, 6)]
    assert m["train_seconds"] == pytest.approx(sum(x["train_seconds"] for x in m["sessions"]), abs=0.1)
    assert m["seconds_per_step"] == pytest.approx(m["train_seconds"] / 6, rel=0.02)


def test_one_step_run_has_a_loss_curve_and_its_manifest_names_every_dropped_row(tmp_path, monkeypatch):
    """Issue 40 item 10: a 1-step run logs its step (logging every 5 steps left the curve
    empty); the rows training did not use are named with their reason: dropped by the data
    step, too long for max_length, and fully masked (TRL drops an example whose labels are all
    -100; counted as ``fully_masked``)."""
    from specrag_batch.drafter_training import train
    from specrag_batch.drafter_training.data import DATA_SCHEMA

    data = tiny_training_data(tmp_path / "data", n=6)
    rows = pq.read_table(data / "tiny.parquet").to_pylist()
    dropped = {**rows[0], "query_id": "dropped-in-data", "drop_reason": "no_evidence", "source_row": 7}
    long = {**rows[1], "query_id": "too-long", "query": "word " * 400, "source_row": 8}
    pq.write_table(pa.Table.from_pylist(rows + [dropped, long], schema=DATA_SCHEMA), data / "tiny.parquet")

    real = train.build_datasets

    def one_fully_masked(*args, **kw):  # as if truncation had cut the completion of example 0
        tr, held, counts = real(*args, **kw)
        masked = tr.map(lambda r, i: {"completion_mask": [0] * len(r["input_ids"])} if i == 0 else {},
                        with_indices=True)
        return masked, held, counts

    monkeypatch.setattr(train, "build_datasets", one_fully_masked)
    m = train.train_drafter(str(data), "smollm2-135m-instruct", str(tmp_path / "model"),
                            train.TrainOptions(max_steps=1, save_steps=100, **OPTS))
    assert m["global_step"] == 1 and [h["step"] for h in m["loss_curve"]] == [1]
    assert m["loss_curve"][0]["loss"] > 0 and m["train_loss"] == pytest.approx(m["loss_curve"][0]["loss"])
    named = {(d["query_id"], d["reason"], d["stage"]) for d in m["dropped"]}
    assert named == {("dropped-in-data", "no_evidence", "data"), ("too-long", "too_long", "training"),
                     (rows[0]["query_id"], "fully_masked", "training")}
    assert all(d["source_file"] and d["source_row"] is not None for d in m["dropped"])
    assert m["counts"]["fully_masked"] == 1 and m["counts"]["too_long"] == 1 and m["counts"]["dropped_in_data"] == 1


def test_lora_update_survives_in_what_the_engine_serves(tmp_path):
    """Issue 40 item 1: the update a few steps of LoRA make is small against the base weights;
    merged and saved in bf16 27-38% of it was rounded away. The saved merge must equal the exact
    float32 update (B·A·alpha/r of the trained adapter, as the last checkpoint holds it), and a
    run serving the adapter unmerged (``drafter.adapter``, vLLM LoRA on the CPU backend) must
    draft what the exact float32 merge drafts, with its log-probs."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specrag_batch.drafter_training.data import read_training_data
    from specrag_batch.drafter_training.train import TrainOptions, build_datasets, train_drafter
    from specrag_batch.engines.engine import get_engine
    from specrag_batch.engines.models import resolve_model

    data = tiny_training_data(tmp_path / "data")
    out = tmp_path / "model"
    opts = TrainOptions(max_steps=4, save_steps=100, **OPTS)
    m = train_drafter(str(data), "smollm2-135m-instruct", str(out), opts)
    base_path = resolve_model("smollm2-135m-instruct")
    base = load_file(f"{base_path}/model.safetensors")
    ckpt = out / "_checkpoints" / "checkpoint-4"
    adapter = load_file(str(ckpt / "adapter_model.safetensors"))
    lora = json.loads((ckpt / "adapter_config.json").read_text())
    saved = load_file(str(out / "model.safetensors"))
    exact, err, size = {}, 0.0, 0.0
    for key, w in base.items():
        name = "base_model.model." + key.removesuffix(".weight")
        if name + ".lora_A.weight" not in adapter:
            continue
        exact[key] = adapter[name + ".lora_B.weight"].float() @ adapter[name + ".lora_A.weight"].float() \
            * lora["lora_alpha"] / lora["r"]
        err += float((saved[key].float() - w.float() - exact[key]).pow(2).sum())
        size += float(exact[key].pow(2).sum())
    assert exact and size > 0
    assert (err / size) ** 0.5 < 1e-3, f"saved merge off the exact update by {(err / size) ** 0.5:.1%}"
    assert m["saved_dtype"] == "float32" and (out / "adapter" / "adapter_model.safetensors").is_file()

    # served unmerged: the drafter's engine applies the adapter on every call
    tok = AutoTokenizer.from_pretrained(base_path)
    train_ds, _, _ = build_datasets(read_training_data(str(data)), tok, opts)
    prompts = [ex["input_ids"][:ex["completion_mask"].index(1)] for ex in train_ds.select(range(3))]
    cfg = small_config(**{"drafter.adapter": str(out / "adapter")})
    kw = dict(max_tokens=24, temperature=0.0, top_p=1.0, seed=0)
    served = get_engine(cfg.drafter, cfg.seed).generate(prompts, **kw)
    untuned = get_engine(small_config().drafter, cfg.seed).generate(prompts, **kw)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).eval()
    model.load_state_dict({k: v.float() + exact.get(k, 0.0) for k, v in base.items()}, strict=False)
    for p, g in zip(prompts, served):
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([p + g.token_ids])).logits[0].float(), -1)
        rows = lp[len(p) - 1:len(p) - 1 + len(g.token_ids)]
        assert g.token_ids == rows.argmax(-1).tolist()  # the exact merge's greedy draft
        ref = [float(rows[i, t]) for i, t in enumerate(g.token_ids)]
        assert g.logprobs == pytest.approx(ref, abs=2e-3)
    assert [g.token_ids for g in served] != [g.token_ids for g in untuned]  # the update is served
