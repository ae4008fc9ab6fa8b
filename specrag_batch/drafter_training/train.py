"""Drafter training step (paper §3.1): supervised fine-tuning on teacher-written rationales.

The loss is the paper's L = -E[log P_drafter(A, E | Q, D)]: token cross-entropy on the
completion tokens only (rationale E, the ``Answer:`` line with A, and the end-of-turn token),
never on the prompt. Training uses TRL's ``SFTTrainer`` with a PEFT LoRA adapter (``full=True``
fine-tunes every weight instead); the adapter is merged into the base and saved as a standalone
model directory that vLLM loads by path (``drafter.model: <dir>`` in a run config).

Prompts are rendered again for the base being trained by the inference code
(:func:`specrag_batch.prompts.fitted_prompt` with the base's tokenizer, from the subset's
documents stored in the data), so the token ids trained on are the ids the drafter is given at
inference. Each example is pre-tokenised here: ``input_ids`` = prompt ids + completion ids +
end-of-turn id, ``completion_mask`` = 0 on the prompt, 1 on the rest; TRL's collator sets the
labels of masked positions to -100.

Layout of the output directory::

    <dir>/config.json, model.safetensors, tokenizer files   the merged model (vLLM loads <dir>)
    <dir>/training_manifest.json                            written last: training is complete
    <dir>/_checkpoints/checkpoint-<step>/                   Trainer checkpoints (resume after a kill)

Re-running the same command after a kill resumes from the last checkpoint (optimizer,
scheduler, RNG and data order restored by the Trainer).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import storage
from ..config import RunConfig
from ..identity import TRAINING_MANIFEST, weights_hash
from ..prompts import PromptTooLongError, encode_plain, fitted_prompt
from ..schema import Document

MANIFEST = TRAINING_MANIFEST
CHECKPOINTS = "_checkpoints"


@dataclass
class TrainOptions:
    """Hyper-parameters (recorded in the training manifest).

    Default recipe sized for 2 CPU cores: about 1,000 examples, sequences up to 768
    tokens, LoRA rank 16, one epoch. On a GPU: bf16 and ``batch_size`` x4 unless set.
    ``max_steps`` > 0 overrides ``epochs``. ``eval_fraction`` of the query ids (hashed) is held
    out for the evaluation loss and the flow's short evaluation; never trained on."""

    epochs: float = 1.0
    max_steps: int = -1
    learning_rate: float = 2e-4
    batch_size: int = 4
    grad_accum: int = 4
    max_length: int = 768
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    full: bool = False
    save_steps: int = 50
    logging_steps: int = 5
    eval_fraction: float = 0.05
    seed: int = 0
    max_doc_tokens: int | None = None
    claim_labels: tuple[str, ...] | None = None
    prompt_layout: str | None = None
    """Drafter prompt layout; None = the data step's config (``drafter.prompt_layout``)."""
    rationale_style: str | None = None
    """Drafter rationale instruction; None = the data step's config (``drafter.rationale_style``)."""


def is_held_out(query_id: str, fraction: float) -> bool:
    """Deterministic split by query id (sha256): the same query is never on both sides."""
    h = int.from_bytes(hashlib.sha256(query_id.encode()).digest()[:4], "little")
    return h < fraction * 2 ** 32


def tokenize_example(tokenizer, ex: dict, max_length: int, opts: TrainOptions) -> dict | None:
    """``input_ids`` and ``completion_mask`` for one data row, or None when it does not fit.

    The prompt is rendered by :func:`fitted_prompt` (the inference drafter prompt for this
    tokenizer, in ``opts.prompt_layout`` with ``opts.rationale_style``) with room for the completion; the completion is tokenised on its own as plain
    text (:func:`~specrag_batch.prompts.encode_plain`: a ``<|im_end|>`` in a rationale or gold
    stays text) and ends with the tokenizer's end-of-turn (eos) token, where vLLM stops the
    drafter."""
    comp = encode_plain(tokenizer, ex["completion"]) + [tokenizer.eos_token_id]
    docs = [Document(d["doc_id"], d["title"], d["text"]) for d in ex["documents"]]
    try:
        prompt, _ = fitted_prompt(tokenizer, ex["task"], ex["query"], docs, ex["choices"],
                                  list(opts.claim_labels or RunConfig().claim_labels),
                                  opts.max_doc_tokens or RunConfig().retrieval.max_doc_tokens, max_length - len(comp),
                                  opts.prompt_layout or RunConfig().drafter.prompt_layout,
                                  opts.rationale_style or RunConfig().drafter.rationale_style)
    except PromptTooLongError:
        return None
    return {"input_ids": prompt + comp, "completion_mask": [0] * len(prompt) + [1] * len(comp)}


def build_datasets(rows: list[dict], tokenizer, opts: TrainOptions):
    """(train, held-out or None) ``datasets.Dataset`` of tokenised examples (:func:`tokenize_example`),
    and counts (examples train / held_out / too_long; train tokens, train completion tokens).

    Raises:
        ValueError: no example fits ``opts.max_length`` tokens."""
    from datasets import Dataset

    train, held, too_long = [], [], 0
    for r in rows:
        t = tokenize_example(tokenizer, r, opts.max_length, opts)
        if t is None:
            too_long += 1
            continue
        (held if is_held_out(r["query_id"], opts.eval_fraction) else train).append(t)
    if not train:
        raise ValueError("no training example fits max_length")
    counts = {"train": len(train), "held_out": len(held), "too_long": too_long,
              "train_tokens": sum(len(t["input_ids"]) for t in train),
              "train_completion_tokens": sum(sum(t["completion_mask"]) for t in train)}
    return Dataset.from_list(train), (Dataset.from_list(held) if held else None), counts


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for p in ("specrag-batch", "torch", "transformers", "trl", "peft", "datasets", "accelerate"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def make_trainer(base_path: str, train_ds, eval_ds, out_dir: Path, opts: TrainOptions, tokenizer):
    """TRL ``SFTTrainer`` (completion-only loss: -log P(A, E | Q, D) over the completion tokens,
    paper §3.1) on the base at ``base_path``, LoRA unless ``opts.full``. Uses bf16 and 4x the
    batch on a CUDA GPU, fp32 on CPU."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    gpu = torch.cuda.is_available()
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.bfloat16 if gpu else torch.float32)
    cfg = SFTConfig(
        output_dir=str(out_dir / CHECKPOINTS), num_train_epochs=opts.epochs, max_steps=opts.max_steps,
        learning_rate=opts.learning_rate, per_device_train_batch_size=opts.batch_size * (4 if gpu else 1),
        per_device_eval_batch_size=opts.batch_size, gradient_accumulation_steps=opts.grad_accum,
        max_length=opts.max_length, completion_only_loss=True, packing=False, bf16=gpu,
        logging_steps=opts.logging_steps, save_steps=opts.save_steps, save_total_limit=2,
        eval_strategy="no", seed=opts.seed, data_seed=opts.seed, report_to=[], lr_scheduler_type="cosine",
        warmup_steps=0, dataloader_num_workers=0, disable_tqdm=os.environ.get("SPECRAG_PROGRESS") == "0")
    peft_cfg = None if opts.full else LoraConfig(
        r=opts.lora_r, lora_alpha=opts.lora_alpha, lora_dropout=opts.lora_dropout,
        target_modules="all-linear", task_type="CAUSAL_LM")
    return SFTTrainer(model=model, args=cfg, train_dataset=train_ds, eval_dataset=eval_ds,
                      processing_class=tokenizer, peft_config=peft_cfg)


def last_checkpoint(out_dir: Path) -> str | None:
    """The newest complete ``checkpoint-<step>`` directory under ``<out_dir>/_checkpoints``
    (one holding ``trainer_state.json``: a kill while a checkpoint was being written leaves an
    incomplete one, which is skipped), or None."""
    d = out_dir / CHECKPOINTS
    found = [(int(p.name.rsplit("-", 1)[1]), p) for p in d.glob("checkpoint-*")
             if p.name.rsplit("-", 1)[1].isdigit() and (p / "trainer_state.json").is_file()] if d.is_dir() else []
    return str(max(found)[1]) if found else None


def train_drafter(data_uri: str, base: str, out_dir: str, opts: TrainOptions | None = None) -> dict:
    """The training step (``specrag-batch drafter train``): SFT, merge, save, manifest.

    Args:
        data_uri: prefix written by the data step (kept rows are trained on).
        base: base drafter (packaged name, HF id or local path).
        out_dir: local directory for the merged model, checkpoints and the manifest.

    Returns the training manifest: base model and weights sha256, data sha256, options, counts
    (examples, tokens), loss curve (``log_history``), held-out loss, wall seconds, seconds per
    optimizer step, device, versions, and ``manifest_id`` (sha256 of those).

    Raises:
        FileNotFoundError / ValueError: no data, or no example fits ``max_length``."""
    import torch
    from transformers import AutoTokenizer

    from ..models import resolve_model
    from .data import read_training_data

    opts = opts or TrainOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows = read_training_data(data_uri)
    from ..planning import plan_shards

    shards, _ = plan_shards(storage.normalize_uri(data_uri))
    data_hash = hashlib.sha256(b"".join(storage.read_bytes(s) for s in shards)).hexdigest()
    try:  # claim labels, document budget, prompt layout and rationale style of the data step's run config
        dcfg = RunConfig.model_validate(json.loads(storage.read_bytes(
            storage.join(storage.normalize_uri(data_uri), "_manifest.json")))["config"])
    except (FileNotFoundError, KeyError):
        dcfg = RunConfig()
    if opts.claim_labels is None:
        opts.claim_labels = tuple(dcfg.claim_labels)
    if opts.max_doc_tokens is None:
        opts.max_doc_tokens = dcfg.retrieval.max_doc_tokens
    if opts.prompt_layout is None:
        opts.prompt_layout = dcfg.drafter.prompt_layout
    if opts.rationale_style is None:
        opts.rationale_style = dcfg.drafter.rationale_style
    base_path = resolve_model(base)
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    train_ds, eval_ds, counts = build_datasets(rows, tokenizer, opts)
    trainer = make_trainer(base_path, train_ds, eval_ds, out, opts, tokenizer)
    resume_from = last_checkpoint(out)
    result = trainer.train(resume_from_checkpoint=resume_from)
    eval_loss = trainer.evaluate()["eval_loss"] if eval_ds is not None else None
    model = trainer.model
    if not opts.full:
        model = model.merge_and_unload()
    tmp = out / ".merged.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    for f in tmp.iterdir():
        f.replace(out / f.name)
    tmp.rmdir()
    steps = trainer.state.global_step
    manifest = {
        "kind": "drafter_training", "created": dt.datetime.now(dt.UTC).isoformat(),
        "base_model": base, "base_path": base_path, "base_weights_sha256": weights_hash(base_path),
        "data": storage.normalize_uri(data_uri), "data_sha256": data_hash, "data_shards": shards,
        "options": asdict(opts), "method": "full" if opts.full else "lora (merged)",
        "counts": counts, "global_step": steps, "resumed_from": resume_from,
        "train_loss": result.training_loss, "eval_loss": eval_loss,
        "loss_curve": [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h],
        "seconds": round(time.perf_counter() - t0, 1),
        "train_seconds": round(result.metrics.get("train_runtime", 0.0), 1),
        "seconds_per_step": round(result.metrics.get("train_runtime", 0.0) / max(1, steps), 3),
        "device": "cuda" if torch.cuda.is_available() else "cpu", "threads": torch.get_num_threads(),
        "weights_sha256": weights_hash(str(out)), "versions": _versions(),
    }
    manifest["manifest_id"] = hashlib.sha256(json.dumps(
        {k: manifest[k] for k in ("base_weights_sha256", "data_sha256", "options", "weights_sha256")},
        sort_keys=True).encode()).hexdigest()[:16]
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
    return manifest
