"""What the commands print: the rich consoles (standard output and standard error) and the
run summary table printed after ``run``, ``nightly``, ``backfill`` and ``claims``."""

from __future__ import annotations

import re
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

NON_TTY_WIDTH = 100_000
"""Console width, characters, when the output is not a terminal (a log, CI, ``> file``): wider
than any line the commands print, so that rich never wraps, folds or cuts a line there and a
path or error can be copied whole from the log."""


def make_console(file=None, stderr: bool = False) -> Console:
    """The commands' rich console on ``file`` (default: standard output, or standard error with
    ``stderr``, looked up when printing).
    Markup off: paths, errors, task names and labels are data (a key may hold ``[ack]`` or
    ``[/x]``) and print as they are; styles are given as :class:`rich.text.Text`. On a terminal
    it has the terminal's width (tables wrap to fit); otherwise (``file.isatty()`` false, also
    when ``FORCE_COLOR`` makes rich write colours) :data:`NON_TTY_WIDTH`, whatever ``COLUMNS``
    says, so that nothing is wrapped or truncated."""
    c = Console(markup=False, file=file, stderr=stderr)
    try:
        tty = bool((file if file is not None else sys.stderr if stderr else sys.stdout).isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        tty = False
    if not tty:
        c.width = NON_TTY_WIDTH
    return c


console = make_console()
"""The console every command prints its results on (:func:`make_console`): standard output."""
err_console = make_console(stderr=True)
"""The console the ``error:`` line of a refused or failed command goes to: standard error, so
that ``--json`` output and summaries piped on stay clean of it."""


def _section(t: Table, label: str, text: str = "") -> None:
    t.add_row(Text(label, style="bold"), text)


def _cache_row(t: Table, name: str, st: dict) -> None:
    """One engine's prefix-cache hit rate row (``st``: its usage, :meth:`EngineUsage.as_dict`)."""
    from ..engines.usage import prefix_cache_hit_rate

    rate = prefix_cache_hit_rate(st)
    t.add_row(f"  prefix cache {name}", "unknown" if rate is None else
              f"{rate:.3f} ({st['cached_prompt_tokens']:.0f} of {st['prompt_tokens']:.0f} prompt tokens)")


def _cost_rows(t: Table, m: dict) -> None:
    """The two cost sections of the summary, labelled (:func:`run.cost_of`): the output's (every
    finished shard, whichever run computed it, from the done markers) and this invocation's."""
    from ..run.manifest import cost_of

    cost = cost_of(m)
    o, this = cost["output"], cost["this_invocation"]
    _section(t, "output cost", f"{o['shards']} finished shards, {o['rows']} rows, computed by "
             f"{len(o['runs'])} run(s); from the shards' done markers")
    for k, v in o["stage_seconds"].items():
        t.add_row(f"  stage {k} (s)", f"{v:.1f}")
    t.add_row("  shards' task time (s)", f"{o['shard_seconds']:.1f}")
    if o.get("engine_dtypes"):  # absent from manifests written before dtypes were recorded
        t.add_row("  engine dtypes", ", ".join(f"{n}: {d}" for n, d in o["engine_dtypes"].items()))
    for name, st in o["engines"].items():
        rows = o["rows"] or 0
        per = (lambda k: "?" if st.get(k) is None or not rows else f"{st[k] / rows:.0f}")  # noqa: E731
        t.add_row(f"  tokens / row {name}", f"prompt {per('prompt_tokens')}, generated {per('generated_tokens')}")
        _cache_row(t, name, st)
    if o.get("engines_unrecorded"):
        t.add_row("  engine usage not recorded", f"{len(o['engines_unrecorded'])} resumed shard(s)")
    if this["computed_shards"]:
        what = (f"computed {this['computed_shards']} shard(s), {this['rows']} rows; "
                f"{this['resumed_shards']} already done")
    else:
        what = (f"computed nothing: {this['resumed_shards']} shard(s) already done"
                + (f", {this['failed_shards']} failed" if this["failed_shards"] else ""))
    _section(t, "this invocation", what)
    t.add_row("  engine load (s)", f"{this['engine_load_seconds']:.1f}")
    if this["computed_shards"] and this["stage_seconds"] == o["stage_seconds"] and this["engines"] == o["engines"]:
        t.add_row("  stages and tokens", "as the output cost above (it computed every shard)")
    else:
        if this["computed_shards"] or this["failed_shards"]:
            for k, v in this["stage_seconds"].items():
                t.add_row(f"  stage {k} (s)", f"{v:.1f}")
        for name, st in this["engines"].items():
            _cache_row(t, name, st)
    t.add_row("  wall time (s)", f"{this['seconds']:.1f}")


def print_summary(m: dict) -> None:
    """Rows, answers, low-confidence count, accuracy vs gold; the output's cost (time per stage,
    each engine's dtype, tokens per row and prefix-cache hit rate per engine, over every
    finished shard) and, labelled
    apart, this invocation's (what it computed, its wall time and engine load); each failed shard
    with its rows (none written; ``?`` when its file is not readable as Parquet) and error; a
    nightly run's drift comparison (``m["drift"]``): the measures that moved, or why none was
    compared, and where ``drift.json`` is. Paths are never cut: the output and report cells do not wrap."""
    met = m["metrics"]
    mode = m["mode"] if isinstance(m["mode"], str) else ",".join(f"{k}={v}" for k, v in m["mode"].items())
    t = Table(title=f"run {m['run_id']} ({mode})", show_header=False)
    t.add_column()
    t.add_column(overflow="fold")
    t.add_row("shards", f"{len(m['shards'])} ({m['failed_shards']} failed, "
              f"{m.get('resumed_shards', 0)} already done, "
              f"{len(m['skipped_files'])} files skipped)")
    failed = [s for s in m["shards"] if s["status"] != "ok"]
    unknown = " + ?" if any(s.get("rows_in") is None for s in failed) else ""
    t.add_row("rows in / out", f"{m['rows_in']}{unknown} / {m['rows_out']}")
    if failed:
        t.add_row("  rows in failed shards (not written)",
                  f"{sum(s.get('rows_in') or 0 for s in failed)}{unknown}")
    t.add_row("answered", str(met["answered"]))
    t.add_row("row errors", str(met["errors"]))
    t.add_row("low confidence", str(met["low_confidence"]))
    t.add_row("fast path (verifier skipped)", str(met["fast_path"]))
    if met.get("draft_rounds"):
        t.add_row("rows per drafting rounds", ", ".join(f"{k}: {v}" for k, v in sorted(met["draft_rounds"].items())))
    if met.get("verifier_drafts_deduplicated"):
        t.add_row("verifier passes saved (duplicate drafts)", str(met["verifier_drafts_deduplicated"]))
    if met.get("fallback") or met.get("fallback_failed"):
        t.add_row("fallback (answered again / kept first)", f"{met['fallback']} / {met['fallback_failed']}")
    if met.get("accuracy") is not None:
        t.add_row("accuracy vs gold", f"{met['accuracy']:.3f} (n={met['n_with_gold']})")
        for task, v in met["by_task"].items():
            extra = "".join(f", {k} {v[k]:.3f}" for k in ("exact_match", "f1") if k in v)
            t.add_row(f"  {task}", f"{'match' if task == 'qa' else 'accuracy'} {v['accuracy']:.3f}"
                      f" (n={v['n_with_gold']}){extra}")
    _cost_rows(t, m)
    console.print(t)
    # paths on lines of their own, never folded, whatever the console width: copyable
    console.print(Text(f"output: {m['output']}"), soft_wrap=True)
    if m.get("report"):
        rep = m["report"]
        text = rep.get("uri") if rep["status"] == "ok" else f"{rep['status']}: {rep.get('error')}"
        console.print(Text(f"report: {text}"), soft_wrap=True)
    if m.get("drift"):  # nightly: the comparison with the nights before (drift_watch)
        from ..run.drift.compare import counted

        d = m["drift"]
        moved = ", ".join(d.get("moved") or []) or "nothing moved"
        text = (f"{moved} (baseline: {counted(len(d.get('baseline') or []), 'night')})" if d["status"] == "compared"
                else d["status"].replace("_", " "))
        console.print(Text(f"drift: {text}: {d.get('uri')}"), soft_wrap=True)
    for s in failed:
        rows = ("rows unknown: not readable as Parquet" if s.get("rows_in") is None
                else f"{s['rows_in']} rows, none written")
        console.print(Text("shard failed", style="red"), Text(one_line(f"{s['input']} ({rows}): {s['error']}")),
                      soft_wrap=True)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str, only: str | None = None) -> str:
    """``text`` with its control characters (newline, carriage return, tab, escape, C1, the
    Unicode line and paragraph separators) written as Python escapes (``\\n``, ``\\x1b``), so a
    path or key holding one stays on its line and cannot move the terminal's cursor. ``only``:
    escape them only inside the occurrences of that string (a message's own line breaks kept)."""
    def esc(t: str) -> str:
        return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), t)

    if only is None:
        return esc(text)
    return text.replace(only, esc(only)) if only and _CONTROL.search(only) else text
