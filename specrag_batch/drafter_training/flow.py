"""Prefect flow: train a specialist drafter (paper §3.1) — data -> train -> short evaluation.

1. data: the teacher writes rationales for labelled rows (``specrag-batch drafter data``),
   resumable per shard;
2. train: SFT with TRL + PEFT LoRA, merged model directory + training manifest
   (``specrag-batch drafter train``), resumable from the last checkpoint;
3. evaluate: the tuned and the base drafter on the held-out slice of the training data (share
   of drafts that parse, accuracy vs gold, generated tokens per draft).

Each step is a task; a retried flow run skips finished data shards and resumes training from
its last checkpoint. On a GPU worker the same code trains in bf16 with larger batches.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task


@task(name="drafter-training-data")
def data_task(input_uri: str, data_uri: str, config_path: str | None, teacher: str | None,
              drafter: str | None, subsets_per_row: int) -> dict:
    """Step 1 (:func:`~specrag_batch.drafter_training.data.build_training_data`); returns the
    data manifest's counts and seconds.

    Raises:
        RuntimeError: a data shard failed (listed in ``<data_uri>/_manifest.json``)."""
    from specrag_batch.config import load_config
    from specrag_batch.drafter_training.data import DataOptions, build_training_data

    m = build_training_data(input_uri, data_uri, load_config(config_path),
                            DataOptions(teacher=teacher, drafter=drafter, subsets_per_row=subsets_per_row))
    if m["failed_shards"]:
        raise RuntimeError(f"{m['failed_shards']} data shard(s) failed: see {data_uri}/_manifest.json")
    return {k: m[k] for k in ("rows_in", "examples", "kept", "trimmed", "dropped", "teacher_model", "seconds")}


@task(name="drafter-training-train")
def train_task(data_uri: str, base: str, model_dir: str, train: dict[str, Any]) -> dict:
    """Step 2 (:func:`~specrag_batch.drafter_training.train.train_drafter`, ``train``:
    :class:`TrainOptions` fields); returns the training manifest's id, counts, losses, step
    count, seconds and device."""
    from specrag_batch.drafter_training.train import TrainOptions, train_drafter

    m = train_drafter(data_uri, base, model_dir, TrainOptions(**train))
    return {k: m[k] for k in ("manifest_id", "counts", "global_step", "train_loss", "eval_loss",
                              "seconds", "seconds_per_step", "device")}


@task(name="drafter-training-evaluate")
def evaluate_task(data_uri: str, model_dir: str, base: str, config_path: str | None,
                  eval_fraction: float, max_rows: int) -> dict:
    """Step 3 (:func:`~specrag_batch.drafter_training.evaluate.evaluate_drafters`): the tuned
    (``model_dir``) and the ``base`` drafter on at most ``max_rows`` held-out rows."""
    from specrag_batch.config import load_config
    from specrag_batch.drafter_training.evaluate import evaluate_drafters

    return evaluate_drafters(data_uri, {"tuned": model_dir, "base": base}, load_config(config_path),
                             eval_fraction, max_rows)


@flow(name="specrag-drafter-training")
def drafter_training_flow(input_uri: str, data_uri: str, model_dir: str,
                          base: str = "qwen2.5-coder-0.5b-instruct", config_path: str | None = None,
                          teacher: str | None = None, subsets_per_row: int = 1,
                          train: dict[str, Any] | None = None, eval_rows: int = 50) -> dict:
    """Data -> train -> evaluate. ``train`` holds :class:`TrainOptions` fields (defaults: the
    2-core recipe). Returns the three steps' summaries."""
    log = get_run_logger()
    train = dict(train or {})
    d = data_task(input_uri, data_uri, config_path, teacher, base, subsets_per_row)
    log.info("training data: %s", d)
    t = train_task(data_uri, base, model_dir, train)
    log.info("training: %s", t)
    e = evaluate_task(data_uri, model_dir, base, config_path, train.get("eval_fraction", 0.05), eval_rows)
    log.info("held-out evaluation: %s", e)
    return {"data": d, "train": t, "evaluate": e}
