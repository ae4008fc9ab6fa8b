"""``specrag-batch calibrate``: τ_min per task from a labelled run (:mod:`specrag_batch.confidence.calibration`,
:mod:`specrag_batch.confidence.fit`), or with ``--fallback-run`` the share of rows the fallback pass
re-answers (:mod:`specrag_batch.confidence.cascade`). Registered on the app by :mod:`specrag_batch.cli.commands`."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from .options import fail, offline_errors
from .console import console

TARGETS = ("--target-accuracy", "--target-coverage")
"""The targets of τ_min for kept rows."""
BUDGETS = ("--target-accuracy", "--budget-share", "--budget-seconds")
"""The targets of the fallback share (``--fallback-run``)."""
UNMET = 3
"""Exit code of a target the data does not meet (a task without τ_min, or no share of
re-answered rows); 2 is refused input (docs/cli.md, "Exit codes of calibrate")."""


MAX_BOOTSTRAP = 100_000
"""Most ``--bootstrap`` resamples: far more than a 95% interval's ends need (a few thousand),
and still seconds per task; a larger count is refused rather than run for hours unannounced."""


def check_out(out: str) -> None:
    """``--out`` (a local path or a storage URI) can take the snippet, checked before any run
    is read: a local path is not a directory, a link or a special file (a device, a pipe), and
    its parent is an existing, writable directory; on ``s3://`` the bucket exists and answers;
    a URI is not a directory (a prefix). A file already there is replaced only when it is a
    snippet ``calibrate`` wrote (it begins with :data:`SNIPPET_HEAD`): another file, such as the
    run config the snippet is meant to be merged into, is refused; so is a name starting with
    ``_`` (a run's own files: ``_manifest.json``, which may not be written yet).

    Raises:
        ValueError: one line naming ``--out`` and the path (an empty value, a ``_`` name, a directory, a link or
            special file, a file calibrate did not write, a missing or non-directory parent, a
            bucket not there or not reachable, a scheme without its file system installed)."""
    from ..core import storage
    from ..core.redaction import redact_text

    if not out.strip():
        raise ValueError("--out: an empty path; give the snippet's file name (e.g. fallback.yaml)")
    name = redact_text(out)
    proto, path = storage.split_uri(out)
    if path.rstrip("/").rsplit("/", 1)[-1].startswith("_"):  # _manifest.json, _run.json, _report/
        raise ValueError(f"--out {name}: a name starting with '_' is kept for a run's own files (_manifest.json, "
                         "_run.json) in an output prefix; give another name (e.g. tau.yaml)")
    if proto == "file":
        p = Path(path)
        if p.is_dir():
            raise ValueError(f"--out {name}: is a directory; give a file name (e.g. {Path(name) / 'snippet.yaml'})")
        if not p.parent.exists():
            raise ValueError(f"--out {name}: directory {p.parent} does not exist")
        if not p.parent.is_dir():
            raise ValueError(f"--out {name}: {p.parent} is not a directory")
        if p.is_symlink() or (p.exists() and not p.is_file()):
            raise ValueError(f"--out {name}: is a link or a special file, not a regular file; give a file name")
        if not os.access(p.parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise ValueError(f"--out {name}: not writable")
        if p.exists():
            with p.open("rb") as f:
                _refuse_foreign(name, f.read(len(SNIPPET_HEAD)))
        return
    try:
        fs, key = storage.filesystem(out)
        bucket = key.split("/", 1)[0]
        try:
            storage.require_bucket(out, f"--out {name}")
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None
        if not key.strip("/") or (proto in storage.S3_PROTOCOLS and key.strip("/") == bucket) or fs.isdir(key):
            raise ValueError(f"--out {name}: is a bucket or directory; give a file name")
        if fs.isfile(key):
            _refuse_foreign(name, fs.cat_file(key, start=0, end=len(SNIPPET_HEAD)))
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - no fsspec implementation, no credentials, no endpoint
        raise ValueError(f"--out {name}: cannot be checked: {_first_line(e)}") from None


SNIPPET_HEAD = b"# specrag-batch calibrate "
"""How every snippet ``calibrate`` writes begins (its header comment): a file at ``--out`` that
begins otherwise is not replaced (:func:`check_out`)."""


def _refuse_foreign(name: str, head: bytes) -> None:
    """Refuse to replace a file at ``--out`` that ``calibrate`` did not write (``head``: its
    first bytes), e.g. the run config the snippet is meant to be merged into, or a data shard.

    Raises:
        ValueError: one line naming ``--out``."""
    if not head.startswith(SNIPPET_HEAD):
        raise ValueError(f"--out {name}: a file calibrate did not write is there (a run config, a data file?); "
                         "it is not replaced: give another file name, or remove it first")


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def write_out(out: str, text: str) -> None:
    """Write the snippet ``text`` to ``out`` (local path or URI) whole or not at all
    (:func:`specrag_batch.core.storage.write_bytes_atomic`).

    Raises:
        ValueError: it cannot be written, one line naming ``--out`` and the path."""
    from ..core import storage
    from ..core.redaction import redact_text

    proto, path = storage.split_uri(out)
    try:  # a bare local name has no directory part to write the temporary in
        storage.write_bytes_atomic(os.path.abspath(path) if proto == "file" else out, text.encode())
    except Exception as e:  # noqa: BLE001 - OSError, botocore, a file system's own errors
        raise ValueError(f"--out {redact_text(out)}: cannot be written: {_first_line(e)}") from None


def remove_out(out: str) -> bool:
    """Remove the file at ``out`` if there is one (an older run's snippet); True when removed.

    Raises:
        ValueError: it is there but cannot be removed, naming ``--out`` and the path."""
    from ..core import storage
    from ..core.redaction import redact_text

    try:
        fs, key = storage.filesystem(out)
        if not fs.isfile(key):
            return False
        fs.rm_file(key)
        return True
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"--out {redact_text(out)}: an older snippet there cannot be removed: {_first_line(e)}") from None


def check_flags(values: dict[str, float | None], fallback: bool) -> None:
    """The target flags given (flag -> value, None when not given) fit the mode: exactly one of
    :data:`TARGETS`, or with ``--fallback-run`` (``fallback``) exactly one of :data:`BUDGETS`;
    accuracies, coverages and shares in range, seconds positive.

    Raises:
        ValueError: one line naming the flags (as the command line spells them)."""
    from ..confidence.calibration import check_target

    allowed = BUDGETS if fallback else TARGETS
    stray = [f for f, v in values.items() if v is not None and f not in allowed]
    if stray:
        why = ("with --fallback-run the target is " if fallback else "without --fallback-run the target is ")
        raise ValueError(f"{stray[0]}: {why}one of {', '.join(allowed)}")
    given = [f for f in allowed if values.get(f) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {' and '.join(allowed) if len(allowed) == 2 else ', '.join(allowed)}"
                         + (f" (got {' and '.join(given)})" if given else ""))
    flag, value = given[0], values[given[0]]
    if flag == "--budget-share":
        if not 0 <= value <= 1:
            raise ValueError(f"--budget-share must be in [0, 1] (a fraction of rows re-answered), got {value}")
    elif flag == "--budget-seconds":
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"--budget-seconds must be a positive number of seconds per row, got {value}")
    else:
        check_target(value, flag)


def calibrate(
    output: str = typer.Argument(..., help="Output prefix of a run with gold answers (with --fallback-run: "
                                 "the Speculative RAG run, selection.fallback: none)."),
    target_accuracy: Optional[float] = typer.Option(None, "--target-accuracy", help="Rows kept "
                                                    "(confidence >= τ_min) reach this accuracy; with "
                                                    "--fallback-run: the cascade's accuracy over all rows."),
    target_coverage: Optional[float] = typer.Option(None, "--target-coverage", help="Share of "
                                                    "graded rows kept at τ_min."),
    fallback_run: Optional[str] = typer.Option(
        None, "--fallback-run", help="Output prefix of a labelled Standard RAG run over the same rows "
        "(query_id): propose the share of least-confident rows selection.fallback: standard re-answers."),
    budget_share: Optional[float] = typer.Option(None, "--budget-share", help="With --fallback-run: "
                                                 "at most this fraction of rows re-answered (0 to 1)."),
    budget_seconds: Optional[float] = typer.Option(None, "--budget-seconds", help="With --fallback-run: "
                                                   "at most these seconds per row (estimated from both manifests)."),
    confidence: Optional[str] = typer.Option(None, "--confidence", help="Measure: score (log ρ, the "
                                             "default), mean_logprob (per token), label_probability, or calibrated (fit a model "
                                             "per task); with --fallback-run the run's own by default."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=1, max=MAX_BOOTSTRAP,
                                  help="Bootstrap resamples of the 95% intervals."),
    out: Optional[str] = typer.Option(None, "--out", help="Config snippet to write (YAML; a path or a URI "
                                      "such as s3://bucket/key); default tau_min.yaml (fallback.yaml with "
                                      "--fallback-run) in the current directory."),
) -> None:
    """Choose selection.tau_min per task from a labelled run; write a config snippet.

    A task whose τ_min rests on fewer than 10 kept rows (calibration.MIN_KEPT_ROWS) gets a
    warning, printed and written into the snippet as a comment. With --fallback-run, print the
    accuracy-cost frontier of re-answering the least-confident rows with Standard RAG and write
    the selection.tau_min / selection.fallback snippet meeting the target.

    Exit 2: refused input (flags, --out, the runs), nothing written. Exit 3 (UNMET): the target
    is not met: plain, the snippet is written leaving those tasks out; with --fallback-run
    nothing is written and a file already at --out (not this run's) is removed."""
    from ..core import stopping
    from ..confidence.calibration import calibrate as calibrate_rows
    from ..confidence.calibration import MEASURES, config_snippet
    from ..core.redaction import redact_text
    from ..run.report import load_rows

    stopping.computes_no_shards()

    try:  # before reading the run, naming the flags
        check_flags({"--target-accuracy": target_accuracy, "--target-coverage": target_coverage,
                     "--budget-share": budget_share, "--budget-seconds": budget_seconds}, fallback_run is not None)
        if fallback_run is not None and not fallback_run.strip():
            raise ValueError("--fallback-run: an empty value; give the output prefix of a labelled Standard RAG run")
        out = out if out is not None else "fallback.yaml" if fallback_run is not None else "tau_min.yaml"
        check_out(out)
    except ValueError as e:
        fail(e, 2)
    if fallback_run is not None:
        return _fallback_share(output, fallback_run, target_accuracy, budget_share, budget_seconds, confidence, out)
    confidence = confidence or "score"
    target = (f"accuracy >= {target_accuracy}" if target_accuracy is not None
              else f"coverage >= {target_coverage}")
    with offline_errors(where=output):
        data = load_rows(output)
        from ..confidence.cascade import check_unique

        check_unique(data.rows, f"the run {redact_text(output)}")  # a row counted twice would skew τ_min
        from ..confidence.calibration import graded_rows

        if graded_rows(data.rows).height == 0:  # named here: the measures' own check knows no run
            raise ValueError(f"the run {redact_text(output)} has no answered rows with a gold answer: "
                             "calibration needs a labelled run")
        head = f"specrag-batch calibrate {redact_text(output)} ({target}, measure {confidence})"
        if confidence == "calibrated":  # a model per task (specrag_batch.confidence.fit)
            from ..confidence.fit import calibrate_run
            text, lines, warnings = calibrate_run(data.rows, data.config, target_accuracy=target_accuracy,
                                                  target_coverage=target_coverage, header=head)
            write_out(out, text)
            console.print("\n".join(lines))
            for line in warnings:  # also in the snippet
                console.print(Text("warning:", style="yellow"), Text(line))
            console.print(f"config snippet -> {out}")
            import yaml

            sel = yaml.safe_load(text)["selection"]
            unmet = sorted(set(sel["calibration"]) - set(sel.get("tau_min") or {}))
            if unmet:
                fail(ValueError(f"{target} not met for task(s) {', '.join(unmet)}: the snippet leaves them out"), UNMET)
            return
        res = calibrate_rows(data.rows, measure=confidence, target_accuracy=target_accuracy,
                             target_coverage=target_coverage, n_boot=bootstrap)
        write_out(out, config_snippet(res, f"{head}, {bootstrap} bootstrap resamples"))
    t = Table(title=f"τ_min ({confidence}) for {target}")
    for col in ("task", "n", "τ_min", "coverage", "accuracy", "95% interval", *(f"AUROC {m}" for m in MEASURES)):
        t.add_column(col)
    f = lambda v: "–" if v is None else f"{v:.4g}"  # noqa: E731
    for r in res:
        t.add_row(r.task, str(r.n), f(r.tau), f(r.coverage), f(r.accuracy),
                  f"[{f(r.interval[0])}, {f(r.interval[1])}]" if r.interval else "–",
                  *(f(r.auroc[m]) for m in MEASURES))
    console.print(t)
    for r in res:  # an unmet target, or a τ_min on a handful of rows; also in the snippet
        for line in (r.unmet, r.few_rows, r.no_ranking):
            if line:
                console.print(Text("warning:", style="yellow"), Text(line))
    console.print(f"config snippet -> {out}")
    unmet = [r.task for r in res if r.unmet]
    if unmet:
        fail(ValueError(f"{target} not met for task(s) {', '.join(unmet)}: the snippet leaves them out"), UNMET)


def _seconds(data) -> float | None:
    """Seconds per row of a run (:func:`cascade.seconds_per_row` of its manifest's output cost)."""
    from ..confidence.cascade import seconds_per_row
    from ..run.manifest import cost_of

    return seconds_per_row(cost_of(data.manifest)["output"]) if data.manifest else None


def _fallback_share(output: str, fallback_run: str, target_accuracy: float | None, budget_share: float | None,
                    budget_seconds: float | None, confidence: str | None, out: str) -> None:
    """``calibrate --fallback-run``: check both runs, print the frontier and the chosen point,
    write the snippet (nothing is written when a run is refused or no point meets the target;
    then, exit :data:`UNMET`, an older file at ``out`` is removed)."""
    from ..confidence import cascade
    from ..confidence.calibration import used_confidence
    from ..core.redaction import redact_text
    from ..run.report import load_rows

    target = next(f"{flag} {v}" for flag, v in (("--target-accuracy", target_accuracy),
                                                ("--budget-share", budget_share),
                                                ("--budget-seconds", budget_seconds)) if v is not None)
    with offline_errors(where=f"{output} or {fallback_run}"):
        spec, std = load_rows(output), load_rows(fallback_run)
        cascade.check_runs(spec.config, std.config, redact_text(output), redact_text(fallback_run))
        cascade.check_unique(spec.rows, f"the speculative run {redact_text(output)}")
        cascade.check_unique(std.rows, f"the Standard RAG run {redact_text(fallback_run)}")
        column = used_confidence(spec.config)[0] if confidence is None else \
            "confidence" if confidence == "calibrated" else confidence
        if column not in ("score", "mean_logprob", "label_probability", "confidence"):
            raise ValueError(f"--confidence: unknown measure {confidence!r} (score, mean_logprob, label_probability "
                             "or calibrated)")
        f = cascade.frontier(spec.rows, std.rows, column=column, spec_seconds=_seconds(spec),
                             std_seconds=_seconds(std))
        point = cascade.choose(f, target_accuracy=target_accuracy, budget_share=budget_share,
                               budget_seconds=budget_seconds)
        head = (f"specrag-batch calibrate {redact_text(output)} --fallback-run {redact_text(fallback_run)} "
                f"({target}, confidence {column})")
        text = cascade.snippet(f, point, spec.config, head) if point is not None else None
    _print_frontier(f, point, target)
    try:
        if text is None:  # never leave an older snippet looking like this run's
            removed = remove_out(out)
        else:
            write_out(out, text)
    except ValueError as e:
        fail(e, 2)
    if text is None:
        fail(ValueError(f"no share of re-answered rows meets {target} on these rows (best accuracy "
                        f"{max(p.accuracy for p in f.points if p.kind != 'standard'):.3f}); no snippet written"
                        + (f"; removed the older {redact_text(out)} (not this run's)" if removed else "")), UNMET)
    console.print(f"config snippet -> {out}")


def _print_frontier(f, point, target: str) -> None:
    """The frontier table (shares 0..100% in tenths, the chosen point marked) and its notes."""
    from ..confidence.cascade import table_points

    fmt = lambda v, spec="{:.3f}": "–" if v is None else spec.format(v)  # noqa: E731
    t = Table(title=f"Re-answering the least-confident rows with Standard RAG ({f.column}; {f.n} shared "
                    f"labelled rows, tasks {', '.join(f.tasks)})")
    for col in ("", "re-answered", "rows", "τ_min", "accuracy", "s/row (est.)"):
        t.add_column(col)
    for p in table_points(f, chosen=point):
        name = {"speculative": "Speculative RAG alone", "standard": "Standard RAG alone"}.get(p.kind, "")
        t.add_row(("→ " if p is point else "") + name, f"{p.share:.0%}", str(p.reanswered), fmt(p.tau, "{:.4g}"),
                  fmt(p.accuracy), fmt(p.seconds, "{:.3g}"))
    console.print(t)
    if f.spec_only or f.std_only:
        console.print(Text("note:", style="yellow"), Text(
            f"{f.spec_only} graded row(s) of the speculative run and {f.std_only} of the Standard RAG run are "
            "not in the other run: left out"))
    if f.left_out_note:
        console.print(Text("note:", style="yellow"), Text(f.left_out_note))
    if f.few_rows:
        console.print(Text("warning:", style="yellow"), Text(f.few_rows))
    if f.spec_seconds is None or f.std_seconds is None:
        console.print(Text("note:", style="yellow"), Text("seconds per row unknown: a run's manifest records none"))
    if point is not None:
        console.print(f"{target}: re-answer {point.share:.1%} of the rows ({point.reanswered} of {f.n}"
                      + (f", τ_min {point.tau:.4g}" if point.tau is not None else "") + f"): accuracy "
                      f"{point.accuracy:.3f}" + (f", about {point.seconds:.3g} s/row" if point.seconds else ""))
