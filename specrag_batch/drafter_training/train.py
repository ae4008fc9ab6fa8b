"""Drafter training step (paper §3.1): supervised fine-tuning on teacher-written rationales.

The loss is the paper's L = -E[log P_drafter(A, E | Q, D)]: token cross-entropy on the
completion tokens only (rationale E, the ``Answer:`` line with A, and the end-of-turn token),
never on the prompt. Training uses TRL's ``SFTTrainer`` with a PEFT LoRA adapter (``full=True``
fine-tunes every weight instead). The adapter is saved as it is (``<dir>/adapter``: a run serves
it unmerged with ``drafter.model: <base>`` and ``drafter.adapter: <dir>/adapter``) and merged, in
float32, into a standalone model directory that vLLM loads by path (``drafter.model: <dir>``).

Prompts are rendered again for the base being trained by the inference code
(:func:`specrag_batch.stages.prompts.fitted_prompt` with the base's tokenizer, from the subset's
documents stored in the data), so the token ids trained on are the ids the drafter is given at
inference. Each example is pre-tokenised here: ``input_ids`` = prompt ids + completion ids +
end-of-turn id, ``completion_mask`` = 0 on the prompt, 1 on the rest; TRL's collator sets the
labels of masked positions to -100.

Layout of the output directory::

    <dir>/config.json, model.safetensors, tokenizer files   the merged model, float32 (vLLM loads <dir>)
    <dir>/adapter/adapter_config.json, adapter_model.safetensors   the LoRA adapter (drafter.adapter)
    <dir>/training_manifest.json                            written last: training is complete
    <dir>/_checkpoints/checkpoint-<step>/                   Trainer checkpoints (resume after a kill)

Re-running the same command after a kill resumes from the last checkpoint (optimizer,
scheduler, RNG and data order restored by the Trainer); the manifest then describes the whole
training (loss over every step, time per step over the steps run, TRL's token count carried
across, ``resumed_from_step``).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import storage
from ..config import RunConfig
from ..engines.weights import TRAINING_MANIFEST, weights_hash
from ..stages.prompts import PromptTooLongError, encode_plain, fitted_prompt
from ..core.schema import Document
from ..run.manifest import package_versions

MANIFEST = TRAINING_MANIFEST
CHECKPOINTS = "_checkpoints"
ADAPTER = "adapter"
"""The LoRA adapter's directory inside a tuned drafter's (``drafter.adapter: <dir>/adapter``)."""


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


TRAINING_PACKAGES = ("specrag-batch", "torch", "transformers", "trl", "peft", "datasets", "accelerate")
"""The packages whose versions a trained drafter's manifest records."""


def is_held_out(query_id: str, fraction: float) -> bool:
    """Deterministic split by query id (sha256): the same query is never on both sides."""
    h = int.from_bytes(hashlib.sha256(query_id.encode()).digest()[:4], "little")
    return h < fraction * 2 ** 32


def tokenize_example(tokenizer, ex: dict, max_length: int, opts: TrainOptions) -> dict | None:
    """``input_ids`` and ``completion_mask`` for one data row, or None when it does not fit.

    The prompt is rendered by :func:`fitted_prompt` (the inference drafter prompt for this
    tokenizer, in ``opts.prompt_layout`` with ``opts.rationale_style``) with room for the completion; the completion is tokenised on its own as plain
    text (:func:`~specrag_batch.stages.prompts.encode_plain`: a ``<|im_end|>`` in a rationale or gold
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


def build_datasets(rows: list[dict], tokenizer, opts: TrainOptions, dropped: list[dict] | None = None):
    """(train, held-out or None) ``datasets.Dataset`` of tokenised examples (:func:`tokenize_example`),
    and counts (examples train / held_out / too_long; train tokens, train completion tokens).

    Each example keeps ``example_index``, its index in ``rows``, so that the rows TRL's
    preparation drops can be named (:func:`trl_dropped`); the Trainer removes the column
    before batching. A row that does not fit ``opts.max_length`` is appended to ``dropped``
    (when given) as :func:`dropped_row` with reason ``too_long``.

    Raises:
        ValueError: no example fits ``opts.max_length`` tokens."""
    from datasets import Dataset

    train, held, too_long = [], [], 0
    for i, r in enumerate(rows):
        t = tokenize_example(tokenizer, r, opts.max_length, opts)
        if t is None:
            too_long += 1
            if dropped is not None:
                dropped.append(dropped_row(r, "too_long"))
            continue
        t["example_index"] = i
        (held if is_held_out(r["query_id"], opts.eval_fraction) else train).append(t)
    if not train:
        raise ValueError("no training example fits max_length")
    counts = {"train": len(train), "held_out": len(held), "too_long": too_long,
              "train_tokens": sum(len(t["input_ids"]) for t in train),
              "train_completion_tokens": sum(sum(t["completion_mask"]) for t in train)}
    return Dataset.from_list(train), (Dataset.from_list(held) if held else None), counts


def dropped_row(row: dict, reason: str) -> dict:
    """A data row training did not use, named for the training manifest's ``dropped`` list
    (:data:`~.data.DROPPED_FIELDS`, ``reason``, ``stage`` ``"training"``)."""
    from .data import DROPPED_FIELDS

    return {**{k: row.get(k) for k in DROPPED_FIELDS}, "reason": reason, "stage": "training"}


def trl_dropped(before, after) -> list[int] | None:
    """``example_index`` values of ``before`` (a dataset given to the trainer) missing from
    ``after`` (the trainer's prepared dataset): TRL drops examples whose labels are all -100
    after truncation ("fully masked"). None when ``after`` lost the column (then only the
    count is known)."""
    if before is None:
        return []
    if after is None or "example_index" not in (after.column_names or []):
        return None
    return sorted(set(before["example_index"]) - set(after["example_index"]))


def make_trainer(base_path: str, train_ds, eval_ds, out_dir: Path, opts: TrainOptions, tokenizer,
                 callbacks: list | None = None):
    """TRL ``SFTTrainer`` (completion-only loss: -log P(A, E | Q, D) over the completion tokens,
    paper §3.1) on the base at ``base_path``, LoRA unless ``opts.full``. Uses bf16 and 4x the
    batch on a CUDA GPU, fp32 on CPU. ``callbacks``: Trainer callbacks (``train_drafter``
    passes :func:`_progress_class`'s)."""
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
                      processing_class=tokenizer, peft_config=peft_cfg, callbacks=callbacks)


@functools.cache
def _progress_class():
    """:class:`TrainingProgress`'s class, built on first use (transformers imports late)."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState

    class TrainingProgress(TrainerCallback, ExportableState):
        """Makes a checkpoint describe the training up to it, so a resumed run's manifest can
        describe the whole training: the loss is logged at every checkpoint and at the last
        step (the log history, saved in the checkpoint, then covers every step: the loss
        curve of a 1-step run is not empty), and the training sessions so far (``sessions``:
        ``from_step``, ``to_step``, ``train_seconds``, the session up to the checkpoint)
        are saved in its ``trainer_state.json`` (``stateful_callbacks``)."""

        def __init__(self, sessions: list[dict] | None = None):
            self.sessions = list(sessions or [])
            self.t0, self.from_step, self.step = None, 0, 0

        def on_train_begin(self, args, state, control, **kwargs):
            self.t0, self.from_step = time.perf_counter(), state.global_step
            self.step = state.global_step

        def on_step_end(self, args, state, control, **kwargs):
            self.step = state.global_step
            if control.should_save or state.global_step >= state.max_steps:
                control.should_log = True

        def current(self) -> dict:
            """This session so far."""
            return {"from_step": self.from_step, "to_step": self.step,
                    "train_seconds": round(time.perf_counter() - self.t0, 3) if self.t0 else 0.0}

        def all_sessions(self) -> list[dict]:
            return self.sessions + ([self.current()] if self.t0 is not None else [])

        def state(self) -> dict:  # written into each checkpoint
            return {"args": {"sessions": self.all_sessions()}, "attributes": {}}

    return TrainingProgress


def resumed_state(checkpoint: str | None) -> dict:
    """What a checkpoint says of the training before it (``trainer_state.json``): ``step``,
    ``sessions`` (:func:`_progress_class`; ``[]`` for a checkpoint written without them) and
    ``num_tokens`` (TRL's count of tokens trained on, its last logged value; 0 when none)."""
    if checkpoint is None:
        return {"step": 0, "sessions": [], "num_tokens": 0}
    st = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    progress = (st.get("stateful_callbacks") or {}).get("TrainingProgress") or {}
    tokens = [h["num_tokens"] for h in st.get("log_history", []) if "num_tokens" in h]
    return {"step": int(st.get("global_step", 0)), "sessions": (progress.get("args") or {}).get("sessions") or [],
            "num_tokens": int(tokens[-1]) if tokens else 0}


def whole_loss(log_history: list[dict], session_starts: list[int]) -> tuple[float | None, int]:
    """(mean loss per optimizer step, steps covered) over the whole training, from the
    Trainer's ``log_history`` (restored from the checkpoint on a resume, so it spans every
    session): each ``loss`` entry is the mean over the steps since the previous entry, or
    since its session began (``session_starts``: the steps sessions began at), whichever is
    later. Steps no entry covers (a checkpoint written without a log at its step) are left
    out and not counted."""
    total = covered = prev = 0
    for h in sorted((h for h in log_history if "loss" in h), key=lambda h: h["step"]):
        start = max([prev] + [s for s in session_starts if s < h["step"]])
        total += h["loss"] * (h["step"] - start)
        covered += h["step"] - start
        prev = h["step"]
    return (total / covered if covered else None), covered


def last_checkpoint(out_dir: Path) -> str | None:
    """The newest complete ``checkpoint-<step>`` directory under ``<out_dir>/_checkpoints``
    (one holding ``trainer_state.json``: a kill while a checkpoint was being written leaves an
    incomplete one, which is skipped), or None."""
    d = out_dir / CHECKPOINTS
    found = [(int(p.name.rsplit("-", 1)[1]), p) for p in d.glob("checkpoint-*")
             if p.name.rsplit("-", 1)[1].isdigit() and (p / "trainer_state.json").is_file()] if d.is_dir() else []
    return str(max(found)[1]) if found else None


def save_drafter(model, tokenizer, out: Path, full: bool) -> None:
    """Write the tuned drafter into ``out``, in float32, never rounded to bf16: a LoRA update
    is small against the base weights, and bf16 (8 bits of mantissa) rounded 27-38% of it away
    (issue 40). With LoRA: the adapter itself (``out/adapter/``, PEFT format; served unmerged
    with ``drafter.adapter``, exact in any engine dtype) and the model merged in float32 (the
    base upcast first, so a GPU's bf16 base is merged exactly too); ``full``: the model.
    Files are written to ``out/.merged.tmp`` and moved into place."""
    import torch

    tmp = out / ".merged.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    if not full:
        model.save_pretrained(str(tmp / ADAPTER), safe_serialization=True)
        model = model.to(torch.float32).merge_and_unload()
    model.to(torch.float32).save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(out / ADAPTER, ignore_errors=True)
    for f in tmp.iterdir():
        f.replace(out / f.name)
    tmp.rmdir()


def served_as(model: str) -> dict:
    """How a run serves the drafter ``model`` (``{"model": ..., "adapter": ...}``, the
    ``drafter`` config keys): a directory ``drafter train`` wrote with LoRA as its base plus
    its ``adapter/`` (unmerged: exact in any engine dtype); anything else as itself."""
    p = Path(model)
    if (p / ADAPTER / "adapter_config.json").is_file() and (p / MANIFEST).is_file():
        return {"model": json.loads((p / MANIFEST).read_text())["base_model"], "adapter": str(p / ADAPTER)}
    return {"model": model, "adapter": None}


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

    from ..engines.models import resolve_model
    from .data import read_training_examples

    opts = opts or TrainOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows, dropped = read_training_examples(data_uri)
    from ..run.planning import plan_shards

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
    train_ds, eval_ds, counts = build_datasets(rows, tokenizer, opts, dropped)
    resume_from = last_checkpoint(out)
    before = resumed_state(resume_from)
    progress = _progress_class()(before["sessions"])
    trainer = make_trainer(base_path, train_ds, eval_ds, out, opts, tokenizer, callbacks=[progress])
    masked = 0
    for ds, prepared in ((train_ds, trainer.train_dataset), (eval_ds, trainer.eval_dataset)):
        lost = trl_dropped(ds, prepared)
        masked += (len(ds) - len(prepared)) if lost is None else len(lost)
        dropped += [dropped_row(rows[i], "fully_masked") for i in lost or []]
    counts["fully_masked"] = masked
    if resume_from and hasattr(trainer, "_total_train_tokens"):
        trainer._total_train_tokens = before["num_tokens"]  # TRL's num_tokens restarts at 0 otherwise
    result = trainer.train(resume_from_checkpoint=resume_from)
    sessions = progress.all_sessions()
    eval_loss = trainer.evaluate()["eval_loss"] if eval_ds is not None else None
    save_drafter(trainer.model, tokenizer, out, opts.full)
    steps = trainer.state.global_step
    history = trainer.state.log_history
    train_loss, loss_steps = whole_loss(history, [x["from_step"] for x in sessions])
    train_seconds = sum(x["train_seconds"] for x in sessions)
    run_steps = sum(x["to_step"] - x["from_step"] for x in sessions)
    tokens = [h["num_tokens"] for h in history if "num_tokens" in h]
    manifest = {
        "kind": "drafter_training", "created": dt.datetime.now(dt.UTC).isoformat(),
        "base_model": base, "base_path": base_path, "base_weights_sha256": weights_hash(base_path),
        "data": storage.normalize_uri(data_uri), "data_sha256": data_hash, "data_shards": shards,
        "options": asdict(opts), "method": "full" if opts.full else "lora (adapter; merged in float32)",
        "saved_dtype": "float32", "adapter": None if opts.full else ADAPTER,
        "adapter_sha256": None if opts.full else weights_hash(str(out / ADAPTER)),
        "counts": {**counts, "dropped_in_data": sum(d["stage"] == "data" for d in dropped)},
        "dropped": dropped, "global_step": steps,
        "resumed_from": resume_from, "resumed_from_step": before["step"] if resume_from else None,
        "sessions": sessions, "train_loss": train_loss if train_loss is not None else result.training_loss,
        "loss_steps": loss_steps, "eval_loss": eval_loss,
        "num_tokens": tokens[-1] if tokens else None,
        "loss_curve": [{"step": h["step"], "loss": h["loss"]} for h in history if "loss" in h],
        "seconds": round(time.perf_counter() - t0, 1), "train_seconds": round(train_seconds, 1),
        "seconds_per_step": round(train_seconds / max(1, run_steps), 3),
        "device": "cuda" if torch.cuda.is_available() else "cpu", "threads": torch.get_num_threads(),
        "weights_sha256": weights_hash(str(out)), "versions": package_versions(TRAINING_PACKAGES, python=False),
    }
    manifest["manifest_id"] = hashlib.sha256(json.dumps(
        {k: manifest[k] for k in ("base_weights_sha256", "data_sha256", "options", "weights_sha256")},
        sort_keys=True).encode()).hexdigest()[:16]
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
    return manifest
