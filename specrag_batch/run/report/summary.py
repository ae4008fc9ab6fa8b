"""The report's numbers and their Markdown / table forms.

Rows, answered, row errors by reason (the output's ``error_reason`` code, never parsed from
the message), flags by kind; accuracy (match for QA) / exact match / F1 per task where gold
exists; AUROC of each confidence measure (:mod:`specrag_batch.confidence.calibration`); fast-path and
low-confidence rates; the output's cost (seconds per stage, tokens per row and prefix-cache hit
rate per model, over every finished shard, whichever run computed it) and, labelled apart, what the
run that wrote the manifest computed (:func:`cost_summary`, from the manifest's ``cost``).
Rows per ``answer_source`` (``first`` or the fallback pass that answered a low-confidence row)
and per ``draft_rounds`` (adaptive drafting) are counted when the run wrote them.
"""

from __future__ import annotations

import math
import re

import polars as pl

from ...confidence import calibration
from ...engines.usage import prefix_cache_hit_rate
from ...core.redaction import redact_text
from ..manifest import cost_of
from .diagnostics import diagnostics, markdown as diagnostics_markdown
from ..results import RunData, with_marker_usage

UNRECORDED = "unrecorded"
"""``errors_by_reason`` key of row errors that carry no ``error_reason`` (outputs written
before the column was added)."""


def summary(data: RunData) -> dict:
    """Numbers of the report (JSON-serialisable): counts, rates, errors by reason, flags by
    kind, metrics per task, AUROC per measure, and the cost (:func:`cost_summary`: the
    output's stage seconds, tokens per row and prefix-cache hit rate per model,
    ``tokens_per_row``, the rate None in manifests written before cached prompt tokens were
    counted; and this invocation's, ``this_invocation``).

    ``errors_by_reason`` counts row errors by their ``error_reason`` code
    (:class:`specrag_batch.core.records.ErrorReason`), most frequent first (ties by code); a row error without a
    code (an output written before the column existed) counts as :data:`UNRECORDED`.
    ``answer_source`` / ``draft_rounds``: rows per value, only when the run wrote them.
    ``verifier_drafts_deduplicated``: verifier forward passes saved by
    ``verifier.deduplicate_drafts`` (sum over rows), only when the run wrote a value.
    A number that is NaN or infinite is None.
    ``shards_missing``: shards listed as finished whose data object is gone (not read);
    ``columns_read_as_null``: shard -> report columns it lacks (read as null).
    ``shards_not_answered``: the manifest's failed shards (``input``, ``status``, ``reason``: its
    error) and skipped input files (``status`` ``skipped``, ``reason``), none of whose rows
    are in the output.
    ``diagnostics``: the label tasks' confusion matrices and each confidence's reliability
    with its ECE (:func:`~specrag_batch.run.report.diagnostics.diagnostics`).
    ``risk_coverage``: the confidence the risk-coverage plot is drawn for (``confidence``: the
    report column, ``caption``: what it is) and ``note``, the line said instead of the plot
    when no row has gold (else None).

    Raises:
        ValueError: a graded row without a task (:func:`specrag_batch.confidence.calibration.tasks`)."""
    df = data.rows
    n = df.height
    answered = df.filter(pl.col("error").is_null() & pl.col("answer").is_not_null()).height
    errors = df.filter(pl.col("error").is_not_null())
    reasons = (errors["error_reason"] if "error_reason" in errors.columns
               else pl.Series("error_reason", [None] * errors.height, pl.String))
    by_reason = (reasons.fill_null(UNRECORDED).value_counts()
                 .sort(["count", "error_reason"], descending=[True, False]))  # ties: by name
    flags = (df.select(pl.col("flags").explode()).drop_nulls()["flags"].value_counts(sort=True)
             if n else pl.DataFrame({"flags": [], "count": []}))
    out: dict = {
        "output": redact_text(data.prefix), "shards": len(data.shards), "rows": n, "answered": answered,
        "errors": errors.height,
        "errors_by_reason": dict(zip(by_reason["error_reason"].to_list(), by_reason["count"].to_list())),
        "flags_by_kind": dict(zip(flags["flags"].to_list(), flags["count"].to_list())),
        "low_confidence": int(df["low_confidence"].fill_null(False).sum()),
        "fast_path": int(df["fast_path"].fill_null(False).sum()),
        "by_task": {}, "auroc": {},
        "shards_missing": [redact_text(u) for u in data.shards_missing],
        "columns_read_as_null": {redact_text(u): c for u, c in data.columns_read_as_null.items()},
        "shards_not_answered": not_answered(data.manifest),
    }
    out["low_confidence_rate"] = out["low_confidence"] / answered if answered else None
    out["fast_path_rate"] = out["fast_path"] / answered if answered else None
    for column in ("answer_source", "draft_rounds"):  # only runs with the fallback / adaptive drafting
        values = df[column].drop_nulls() if column in df.columns else None
        if values is not None and values.len():
            counts = values.cast(pl.String).value_counts(sort=True)
            out[column] = dict(zip(counts[column].to_list(), counts["count"].to_list()))
    if "verifier_drafts_deduplicated" in df.columns and df["verifier_drafts_deduplicated"].drop_nulls().len():
        out["verifier_drafts_deduplicated"] = int(df["verifier_drafts_deduplicated"].sum())
    g = calibration.graded_rows(df)
    column, caption = calibration.used_confidence(data.config)
    out["risk_coverage"] = {"confidence": column, "caption": caption, "note": None if g.height else (
        "No risk-coverage plot: no answered row has a gold answer, so no row is known to be right or wrong.")}
    out["diagnostics"] = diagnostics(g, data.config)
    for task in calibration.tasks(g):
        t = g.filter(pl.col("task") == task)
        m = {"n_with_gold": t.height, "accuracy": float(t["correct"].mean())}
        if task == "qa":
            m["exact_match"] = float(t["exact_match"].fill_null(False).mean())
            m["f1"] = float(t["f1"].fill_null(0.0).mean())
        out["by_task"][task] = m
    for task in ["all", *out["by_task"]]:
        t = g if task == "all" else g.filter(pl.col("task") == task)
        t = t.filter(~pl.col("always"))  # τ_min never applies to fast-path rows
        out["auroc"][task] = {mm: calibration.auroc(calibration.measure_values(t, mm), t["correct"].to_numpy())
                              for mm in calibration.MEASURES}
    out["reuse"] = (data.manifest or {}).get("reuse")  # rows copied from earlier runs (specrag_batch.run.reuse)
    man = with_marker_usage(data.manifest, data.prefix) if data.manifest else {}
    cost = cost_of(man) if man else None
    out["by_mode"] = by_mode(df, g, ((cost or {}).get("output") or {}).get("mode_seconds") or {})
    for task, m in out["by_task"].items():
        modes = df.filter(pl.col("task") == task)["mode"].drop_nulls().unique().sort().to_list() if "mode" in df.columns else []
        if modes:
            m["mode"] = "+".join(modes)
    out.update(cost_summary(cost, n))
    if cost is not None:
        out["this_invocation"]["run_id"] = man.get("run_id")
    return _finite(out)


def by_mode(df: pl.DataFrame, graded: pl.DataFrame, seconds: dict[str, float]) -> dict:
    """Per mode that answered rows (the output's ``mode`` column): ``rows``, ``n_with_gold``,
    ``accuracy`` (a fraction; None without gold), ``seconds`` (wall seconds of the stages that
    answered them, the manifest's ``cost.output.mode_seconds``; None when not recorded) and
    ``seconds_per_row``."""
    out: dict = {}
    for mode in (sorted(df["mode"].drop_nulls().unique().to_list()) if "mode" in df.columns else []):
        rows, g = df.filter(pl.col("mode") == mode).height, graded.filter(pl.col("mode") == mode)
        sec = seconds.get(mode)
        out[mode] = {"rows": rows, "n_with_gold": g.height, "accuracy": float(g["correct"].mean()) if g.height else None,
                     "seconds": sec, "seconds_per_row": sec / rows if sec is not None and rows else None}
    return out


def not_answered(manifest: dict | None) -> list[dict]:
    """The input files of a run (its manifest's) whose rows are not in the output: each failed
    shard (``status`` not ``ok``, ``reason`` its ``error``) and each skipped file
    (``skipped_files``: ``status`` ``skipped``, ``reason`` why), as ``{"input", "status",
    "reason"}`` with secrets redacted, in the manifest's order; [] without a manifest."""
    out = []
    for s in (manifest or {}).get("shards") or []:
        if isinstance(s, dict) and s.get("status") != "ok":
            out.append({"input": redact_text(str(s.get("input") or s.get("output") or "?")),
                        "status": str(s.get("status") or "failed"), "reason": redact_text(str(s.get("error") or "unknown"))})
    for s in (manifest or {}).get("skipped_files") or []:
        if isinstance(s, dict):
            out.append({"input": redact_text(str(s.get("input") or "?")), "status": "skipped",
                        "reason": redact_text(str(s.get("reason") or "unknown"))})
    return out


def _engine_row(st: dict, rows: int | None) -> dict:
    """One model's usage per row (prompt / generated tokens over ``rows``), engine seconds, hit rate."""
    per_row = lambda v: v / rows if rows and v is not None else None  # noqa: E731
    return {"prompt": per_row(st.get("prompt_tokens", 0)), "generated": per_row(st.get("generated_tokens", 0)),
            "engine_seconds": st.get("seconds"), "prefix_cache_hit_rate": prefix_cache_hit_rate(st)}


def cost_summary(cost: dict | None, rows_read: int) -> dict:
    """The report's cost numbers from a manifest's cost (:func:`run.cost_of`; None: no manifest).

    The output's cost, labelled as such: ``stage_seconds`` (every finished shard's, whichever
    run computed it), ``shard_seconds`` (their task wall time summed), ``tokens_per_row`` (per
    model: prompt and generated tokens per row over the rows those shards hold, engine seconds,
    prefix-cache hit rate, ``dtype``: the dtype the model computed in, ``run.output_dtypes``,
    None when the manifest predates it) and ``output_cost`` (``shards``, ``rows``, ``runs``,
    ``engines_unrecorded``). Separately, ``this_invocation``: what the run that wrote the
    manifest computed (``computed_shards``, ``resumed_shards``, ``rows``, ``seconds`` wall time,
    ``engine_load_seconds``, ``stage_seconds``, ``engines``: per model prompt / generated tokens,
    engine seconds, hit rate), or None."""
    if cost is None:
        return {"stage_seconds": {}, "shard_seconds": None, "tokens_per_row": {},
                "output_cost": None, "this_invocation": None}
    o, t = cost["output"], cost["this_invocation"]
    rows = o.get("rows") or rows_read
    return {
        "stage_seconds": o.get("stage_seconds") or {},
        "shard_seconds": o.get("shard_seconds"),
        "tokens_per_row": {name: {**_engine_row(st, rows), "dtype": (o.get("engine_dtypes") or {}).get(name)}
                           for name, st in (o.get("engines") or {}).items()},
        "output_cost": {"shards": o.get("shards"), "rows": rows, "runs": o.get("runs") or [],
                        "engines_unrecorded": o.get("engines_unrecorded") or []},
        "this_invocation": {
            **{k: t.get(k) for k in ("computed_shards", "resumed_shards", "failed_shards", "rows",
                                     "seconds", "engine_load_seconds")},
            "stage_seconds": t.get("stage_seconds") or {},
            "engines": {name: {"prompt_tokens": st.get("prompt_tokens"),
                               "generated_tokens": st.get("generated_tokens"),
                               "engine_seconds": st.get("seconds"),
                               "prefix_cache_hit_rate": prefix_cache_hit_rate(st)}
                        for name, st in (t.get("engines") or {}).items()}},
    }


def _finite(v):
    """``v`` with every NaN or infinite float (a NaN F1 of another writer's output) replaced by
    None: summary.json stays JSON that strict parsers read, and the report shows "–"."""
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def md_code(text) -> str:
    """``text`` (a path, a bucket key, a column name: data, any characters) as one Markdown
    code span that shows it as it is: control characters (a newline, a tab, ESC) written as
    their escapes (``\\n``) so that the span stays on its line, and fenced by one more backtick
    than its longest run of backticks (padded by a space where it begins or ends with one)."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    fence = "`" * (max((len(m) for m in re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def markdown(s: dict, plots: dict[str, str] | None = None) -> str:
    """The report as Markdown (``plots``: name -> file name relative to the report)."""
    lines = [f"# Run report: {md_code(s['output'])}", "",
             "| | |", "|---|---|",
             f"| shards read | {s['shards']} |", f"| rows | {s['rows']} |",
             f"| answered | {s['answered']} |", f"| row errors | {s['errors']} |",
             f"| low confidence | {s['low_confidence']} ({_fmt(s['low_confidence_rate'])} of answered) |",
             f"| fast path (verifier skipped) | {s['fast_path']} ({_fmt(s['fast_path_rate'])} of answered) |"]
    for key, name in (("answer_source", "answer source (rows)"), ("draft_rounds", "drafting rounds (rows)")):
        if key in s:
            lines.append(f"| {name} | " + ", ".join(f"{k}: {v}" for k, v in s[key].items()) + " |")
    if "verifier_drafts_deduplicated" in s:
        lines.append(f"| verifier passes saved (repeated drafts) | {s['verifier_drafts_deduplicated']} |")
    if (s.get("reuse") or {}).get("rows"):
        lines.append(f"| reused from earlier runs (not computed) | {s['reuse']['rows']} rows, "
                     f"about {_fmt(s['reuse'].get('seconds_saved'))} s saved |")
    if s["shards_missing"] or s["columns_read_as_null"]:
        lines += ["", "## Shards not read as written", ""]
        lines += [f"- {md_code(u)}: listed as finished, data object missing: not read" for u in s["shards_missing"]]
        lines += [f"- {md_code(u)}: columns " + ", ".join(md_code(c) for c in cols) + " missing: read as null"
                  for u, cols in s["columns_read_as_null"].items()]
    if s.get("shards_not_answered"):
        lines += ["", "## Input files not answered", "",
                  "Their rows are not in this output (nor in the numbers below)."]
        lines += [f"- {md_code(x['input'])}: {x['status']}: {' '.join(x['reason'].split())}" for x in s["shards_not_answered"]]
    lines += ["", "## Accuracy per task (where gold exists)", "",
              "| task | n with gold | accuracy (match for qa) | exact match | F1 |", "|---|---|---|---|---|"]
    lines += [f"| {t} | {m['n_with_gold']} | {_fmt(m['accuracy'])} | {_fmt(m.get('exact_match'))} | "
              f"{_fmt(m.get('f1'))} |" for t, m in s["by_task"].items()] or ["| – | 0 | – | – | – |"]
    if len(s.get("by_mode") or {}) > 1:
        lines += ["", "## Per mode (a mode per task)", "",
                  "| mode | tasks | rows | n with gold | accuracy | seconds | seconds per row |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {mode} | {', '.join(t for t, tm in s['by_task'].items() if tm.get('mode') == mode) or '–'} | "
                  f"{m['rows']} | {m['n_with_gold']} | {_fmt(m['accuracy'])} | {_fmt(m['seconds'])} | "
                  f"{_fmt(m['seconds_per_row'])} |" for mode, m in s["by_mode"].items()]
    lines += ["", "## Confidence measures: AUROC correct vs wrong (rows τ_min applies to)", "",
              "| task | " + " | ".join(calibration.MEASURES) + " |", "|---|" + "---|" * len(calibration.MEASURES)]
    lines += [f"| {t} | " + " | ".join(_fmt(a[m]) for m in calibration.MEASURES) + " |"
              for t, a in s["auroc"].items()]
    lines += diagnostics_markdown(s.get("diagnostics") or {})
    lines += ["", "## Errors by reason", ""]
    lines += [f"- {v} × {k}" for k, v in s["errors_by_reason"].items()] or ["none"]
    lines += ["", "## Flags by kind", ""]
    lines += [f"- {k}: {v}" for k, v in s["flags_by_kind"].items()] or ["none"]
    lines += cost_markdown(s)
    rc = s.get("risk_coverage") or {}
    for name, f in (plots or {}).items():
        if name == "risk_coverage" and rc.get("note"):
            lines += ["", rc["note"]]
            continue
        lines += ["", f"![{name}]({f})"]
        if name == "risk_coverage" and rc.get("caption"):
            kept = "" if rc.get("confidence") == "confidence" else "; fast-path rows are always kept"
            lines += ["", f"Risk-coverage of the confidence this run compared with τ_min: {rc['caption']}{kept}."]
    return "\n".join(lines) + "\n"


def _count(n: int | None, what: str) -> str:
    return f"{_fmt(n)} {what}" + ("" if n == 1 else "s")


def cost_markdown(s: dict) -> list[str]:
    """Markdown lines of the cost sections: "Cost of this output" (every finished shard,
    whichever run computed it) and "This invocation" (what the run that wrote the manifest
    computed; "computed nothing" for a re-run that found every shard done)."""
    o, t = s.get("output_cost"), s.get("this_invocation")
    if o is None:
        return ["", "## Cost of this output", "", "unknown: no run manifest"]
    runs = len(o["runs"])
    lines = ["", "## Cost of this output", "",
             f"Every finished shard ({_count(o['shards'], 'shard')}, {_count(o['rows'], 'row')}, computed by "
             f"{_count(runs, 'run')}), summed from the shards' done markers; tokens per row are over these rows.",
             "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in s["stage_seconds"].items()]
    lines += [f"| shards' task time (sum) | {_fmt(s['shard_seconds'])} |", "",
              "| model | dtype | prompt tokens / row | generated tokens / row | engine seconds | "
              "prefix-cache hit rate |", "|---|---|---|---|---|---|"]
    lines += [f"| {k} | {_fmt(v.get('dtype'))} | {_fmt(v['prompt'])} | {_fmt(v['generated'])} | "
              f"{_fmt(v['engine_seconds'])} | {_fmt(v.get('prefix_cache_hit_rate'))} |"
              for k, v in s["tokens_per_row"].items()]
    if o["engines_unrecorded"]:
        lines += ["", "Engine usage not recorded for resumed shards (manifest written before resumed "
                  "shards kept it): " + ", ".join(md_code(u) for u in o["engines_unrecorded"])]
    lines += ["", f"## This invocation (run {t.get('run_id') or '–'})", ""]
    if not t["computed_shards"]:
        lines.append(f"Computed nothing: {_count(t['resumed_shards'], 'shard')} already done"
                     + (f", {_count(t['failed_shards'], 'shard')} failed" if t.get("failed_shards") else "")
                     + ". The cost above is the output's, from earlier runs.")
    else:
        lines.append(f"Computed {_count(t['computed_shards'], 'shard')} ({_count(t['rows'], 'row')}); "
                     f"{_count(t['resumed_shards'], 'shard')} already done, not computed again.")
    lines += ["", "| | seconds |", "|---|---|", f"| wall time | {_fmt(t['seconds'])} |",
              f"| engine load | {_fmt(t['engine_load_seconds'])} |"]
    lines += [f"| stage {k} | {_fmt(v)} |" for k, v in t["stage_seconds"].items() if t["computed_shards"]]
    if t["engines"]:
        lines += ["", "| model | prompt tokens | generated tokens | engine seconds | prefix-cache hit rate |",
                  "|---|---|---|---|---|"]
        lines += [f"| {k} | {_fmt(v['prompt_tokens'])} | {_fmt(v['generated_tokens'])} | {_fmt(v['engine_seconds'])} | "
                  f"{_fmt(v['prefix_cache_hit_rate'])} |" for k, v in t["engines"].items()]
    return lines


def table_rows(s: dict) -> list[dict]:
    """The report's headline numbers as rows of (metric, value) for a table artifact (seconds:
    the output's per stage, then this invocation's wall time)."""
    rows = [{"metric": k, "value": _fmt(s[k])} for k in
            ("rows", "answered", "errors", "low_confidence", "low_confidence_rate", "fast_path",
             "fast_path_rate")]
    rows.append({"metric": "input files not answered", "value": _fmt(len(s.get("shards_not_answered") or []))})
    for t, m in s["by_task"].items():
        rows += [{"metric": f"{t} {k}", "value": _fmt(v)} for k, v in m.items()]
    for t, a in s["auroc"].items():
        rows += [{"metric": f"auroc {t} {k}", "value": _fmt(v)} for k, v in a.items()]
    rows += [{"metric": f"output seconds {k}", "value": _fmt(v)} for k, v in s["stage_seconds"].items()]
    if s.get("this_invocation"):
        t = s["this_invocation"]
        rows += [{"metric": "this invocation: shards computed", "value": _fmt(t["computed_shards"])},
                 {"metric": "this invocation: wall seconds", "value": _fmt(t["seconds"])}]
    return rows
