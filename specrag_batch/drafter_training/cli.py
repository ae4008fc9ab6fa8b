"""``specrag-batch drafter inputs | data | train``: the specialist drafter's commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

drafter_app = typer.Typer(no_args_is_help=True, help="Specialist drafter (paper §3.1): teacher data, SFT.")


@drafter_app.command("inputs")
def inputs(
    shared: Path = typer.Option(Path("../shared/data"), "--shared", help="The evaluation data directory."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for one input Parquet per dataset."),
    datasets: str = typer.Option("climate_fever,hotpotqa,nq_open,musique", "--datasets"),
    limit: Optional[int] = typer.Option(None, "--limit", min=0, help="Rows per dataset (first after the reserve)."),
) -> None:
    """Labelled training input rows from the shared data, never from rows the benchmark reserves.

    Exit code 2: a dataset that is not a training source (--datasets), a data file missing
    or unreadable under --shared, an --output that cannot be a directory."""
    from ..core.datasets import NotATrainingSourceError, write_training_inputs

    try:
        counts = write_training_inputs(shared, output, datasets=tuple(d.strip() for d in datasets.split(",")),
                                       limit=limit)
    except NotATrainingSourceError as e:
        raise typer.BadParameter(str(e), param_hint="--datasets") from None
    except (OSError, ValueError) as e:  # names the file: a wrong --shared, a corrupt data file,
        # an --output that is a file
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(counts))


@drafter_app.command("data")
def data(
    input: str = typer.Option(..., "--input", "-i", help="Labelled input Parquet (file or prefix), input schema with gold."),
    output: str = typer.Option(..., "--output", "-o", help="Output prefix for the (prompt, completion) shards."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", exists=True, dir_okay=False,
                                          help="Run config: sampling, drafter prompt settings, default teacher (its verifier)."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="Teacher model (default: the config's verifier)."),
    drafter: Optional[str] = typer.Option(None, "--drafter", help="Model whose tokenizer renders prompts (default: the config's drafter)."),
    subsets_per_row: int = typer.Option(1, "--subsets-per-row", min=1, help="Examples per input row."),
    teacher_max_tokens: int = typer.Option(96, "--teacher-max-tokens", min=8, help="Rationale budget, tokens."),
) -> None:
    """Teacher-written rationales for labelled rows (resumable per shard); prints the data manifest counts.

    Exit code 1 when a data shard failed (listed in <output>/_manifest.json)."""
    from ..config import load_config
    from .data import DataOptions, build_training_data

    m = build_training_data(input, output, load_config(config), DataOptions(
        teacher=teacher, drafter=drafter, subsets_per_row=subsets_per_row, teacher_max_tokens=teacher_max_tokens))
    typer.echo(json.dumps({k: m[k] for k in ("rows_in", "examples", "kept", "trimmed", "restated", "dropped", "failed_shards", "seconds")}))
    if m["failed_shards"]:
        raise typer.Exit(1)


@drafter_app.command("train")
def train(
    data: str = typer.Option(..., "--data", help="Prefix written by `drafter data`."),
    base: str = typer.Option(..., "--base", help="Base drafter: packaged name, HF id or path."),
    output: Path = typer.Option(..., "--output", "-o", help="Model directory to write (re-run to resume)."),
    epochs: float = typer.Option(1.0, "--epochs"),
    max_steps: int = typer.Option(-1, "--max-steps", help="> 0 overrides --epochs."),
    learning_rate: float = typer.Option(2e-4, "--lr"),
    batch_size: int = typer.Option(4, "--batch-size", min=1),
    grad_accum: int = typer.Option(4, "--grad-accum", min=1),
    max_length: int = typer.Option(768, "--max-length", min=64, help="Tokens per example."),
    lora_r: int = typer.Option(16, "--lora-r", min=1),
    full: bool = typer.Option(False, "--full", help="Full fine-tuning instead of LoRA."),
    save_steps: int = typer.Option(50, "--save-steps", min=1, help="Checkpoint every N optimizer steps."),
    max_doc_tokens: Optional[int] = typer.Option(None, "--max-doc-tokens", min=16,
                                                 help="Per-document budget (default: the data step's config)."),
) -> None:
    """SFT (TRL + PEFT LoRA, loss on completion tokens), merged model dir + training manifest."""
    from .train import TrainOptions, train_drafter

    m = train_drafter(data, base, str(output), TrainOptions(
        epochs=epochs, max_steps=max_steps, learning_rate=learning_rate, batch_size=batch_size,
        grad_accum=grad_accum, max_length=max_length, lora_r=lora_r, lora_alpha=2 * lora_r, full=full,
        save_steps=save_steps, max_doc_tokens=max_doc_tokens))
    typer.echo(json.dumps({k: m[k] for k in ("manifest_id", "counts", "global_step", "train_loss", "eval_loss",
                                             "seconds", "seconds_per_step", "resumed_from")}, default=str))
