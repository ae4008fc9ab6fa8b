"""Run report: ``<output>/_report/report.md`` plus PNG plots, from a run's output shards.

Read with polars (a lazy scan per trusted shard, concatenated): only data objects that have a
done marker in ``_shards/`` or are listed ``ok`` in ``_manifest.json`` (README "Operations");
``_drafts/``, ``_report/`` and ``_shards/`` are never read as data. Listed paths are opened as
they are (local: ``glob=False``; other URIs through the project's fsspec file system), never
re-parsed as URL or glob.

The report holds: rows, answered, errors by reason, flags by kind; accuracy (match for QA) /
exact match / F1 per task where gold exists; the selected score of correct vs wrong rows; the
risk-coverage curve of each confidence measure and its AUROC (:mod:`calibration`); fast-path
and low-confidence rates; seconds per stage and tokens per row per model (from the manifest).
A ``fallback`` column in the output (a later second pass for low-confidence rows) is counted
when present.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from . import calibration, storage
from .redaction import redact_text
from .resume import RUN_FILE, SHARDS_DIR

REPORT_DIR = "_report"
MANIFEST = "_manifest.json"
COLUMNS = ("query_id", "task", "answer", "score", "score_draft", "score_self_consistency",
           "score_self_reflection", "low_confidence", "fast_path", "drafts", "flags", "error",
           "correct", "exact_match", "f1", "mode")
OPTIONAL_COLUMNS = ("fallback",)
PLOTS = {"scores": "score_correct_vs_wrong.png", "risk_coverage": "risk_coverage.png"}


def _read_json(uri: str) -> dict | None:
    try:
        return json.loads(storage.read_bytes(uri))
    except FileNotFoundError:
        return None


def trusted_outputs(prefix: str, manifest: dict | None = None) -> list[str]:
    """Data objects of ``prefix`` that readers may trust, sorted: each ``_shards/<name>.json``
    done marker with status ``ok`` names ``<prefix>/<name>``, and each manifest shard with
    status ``ok`` its output's name under ``prefix``; only objects that exist. Draft shards
    (``_drafts/``) are never included."""
    names: set[str] = set()
    mdir = storage.join(prefix, SHARDS_DIR)
    if storage.exists(mdir):
        fs, path = storage.filesystem(mdir)
        for f in fs.ls(path, detail=False):
            base = f.rstrip("/").rsplit("/", 1)[-1]
            if not base.endswith(".json") or base.startswith("."):
                continue
            fs_path = f if "://" not in f else storage.split_uri(f)[1]
            with fs.open(fs_path, "rb") as fh:
                m = json.loads(fh.read())
            if m.get("result", {}).get("status") == "ok":
                names.add(base[:-len(".json")])
    for s in (manifest or {}).get("shards", []):
        if s.get("status") == "ok" and s.get("output"):
            names.add(s["output"].rsplit("/", 1)[-1])
    return [u for u in sorted(storage.join(prefix, n) for n in names) if storage.exists(u)]


def _scan(uri: str) -> pl.LazyFrame:
    proto, path = storage.split_uri(uri)
    if proto == "file":
        return pl.scan_parquet(path, glob=False)
    fs, path = storage.filesystem(uri)
    return pl.scan_parquet(io.BytesIO(fs.cat_file(path)))


@dataclass
class RunData:
    """Output rows of the trusted shards plus the run's manifest and config (dicts)."""

    prefix: str
    rows: pl.DataFrame
    shards: list[str]
    manifest: dict | None
    config: dict = field(default_factory=dict)


def with_mean_logprob(df: pl.DataFrame, selection: dict | None = None) -> pl.DataFrame:
    """Add ``mean_logprob`` (:func:`specrag_batch.selection.mean_logprob` of the selected draft,
    nats per token) to output rows. The selected draft is the row's draft whose three score
    terms and answer equal the row's; terms switched off in ``selection`` (the run config's
    ``selection`` mapping) are left out, and so are ρ_SC/ρ_SR on fast-path rows and in
    standard mode, as ``select`` does."""
    sel = selection or {}
    terms = ("score_draft", "score_self_consistency", "score_self_reflection", "answer")
    toks = ("tokens_draft", "tokens_answer", "tokens_rationale")
    d = (df.select(pl.int_range(pl.len()).alias("_row"), *terms, "drafts").explode("drafts")
         .filter(pl.col("drafts").is_not_null())
         .with_columns([pl.col("drafts").struct.field(n).alias(f"_d_{n}") for n in (*terms, *toks)])
         .filter(pl.all_horizontal([pl.col(f"_d_{n}").eq_missing(pl.col(n)) for n in terms]))
         .group_by("_row", maintain_order=True).first()
         .select("_row", *[pl.col(f"_d_{n}").alias(f"_{n}") for n in toks]))
    out = df.with_columns(pl.int_range(pl.len()).alias("_row")).join(d, on="_row", how="left")
    full = (pl.col("mode") != "standard") & ~pl.col("fast_path").fill_null(False)
    parts = []
    if sel.get("use_draft_score", True):
        parts.append((pl.lit(True), pl.col("score_draft") / pl.col("_tokens_draft")))
    if sel.get("use_self_consistency", True):
        parts.append((full, pl.col("score_self_consistency")
                      / (pl.col("_tokens_answer").fill_null(0) + pl.col("_tokens_rationale").fill_null(0))))
    if sel.get("use_self_reflection", True):
        parts.append((full, pl.col("score_self_reflection")))
    total = pl.lit(0.0)
    for on, v in parts:
        v = pl.when(v.is_finite()).then(v)  # a zero token count gives inf/NaN: no value
        total = total + pl.when(on).then(v).otherwise(0.0)
    return out.with_columns(mean_logprob=pl.when(pl.col("score").is_not_null()).then(total)) \
        .drop("_row", "_tokens_draft", "_tokens_answer", "_tokens_rationale")


def load_rows(prefix: str) -> RunData:
    """Read a run's trusted output shards under ``prefix`` (local path or URI).

    Raises:
        FileNotFoundError: ``prefix`` holds no trusted shard (no done marker, no ``ok``
            manifest entry)."""
    prefix = storage.normalize_uri(prefix)
    manifest = _read_json(storage.join(prefix, MANIFEST))
    config = (manifest or {}).get("config") or (_read_json(storage.join(prefix, RUN_FILE)) or {}).get("config") or {}
    shards = trusted_outputs(prefix, manifest)
    if not shards:
        raise FileNotFoundError(f"{prefix!r}: no finished output shard (no done marker in "
                                f"{SHARDS_DIR}/ and no shard listed ok in {MANIFEST})")
    frames = []
    for u in shards:
        lf = _scan(u)
        have = lf.collect_schema().names()
        frames.append(lf.select([c for c in (*COLUMNS, *OPTIONAL_COLUMNS) if c in have]))
    rows = pl.concat(frames, how="diagonal_relaxed").collect()
    return RunData(prefix, with_mean_logprob(rows, config.get("selection")), shards, manifest, config)


def _reason(error: str) -> str:
    """An error message without its row-specific parts: ``<field>: <reason>``."""
    m = re.search(r"field '([^']+)': (.*)", error)
    text = f"{m.group(1)}: {m.group(2)}" if m else error.split(": ", 1)[-1]
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    return re.sub(r"\d+", "N", text)[:120]


def summary(data: RunData) -> dict:
    """Numbers of the report (JSON-serialisable): counts, rates, errors by reason, flags by
    kind, metrics per task, AUROC per measure, stage seconds and tokens per row per model."""
    df = data.rows
    n = df.height
    answered = df.filter(pl.col("error").is_null() & pl.col("answer").is_not_null()).height
    errs = df.filter(pl.col("error").is_not_null())["error"].to_list()
    by_reason: dict[str, int] = {}
    for e in errs:
        by_reason[_reason(e)] = by_reason.get(_reason(e), 0) + 1
    flags = (df.select(pl.col("flags").explode()).drop_nulls()["flags"].value_counts(sort=True)
             if n else pl.DataFrame({"flags": [], "count": []}))
    out: dict = {
        "output": redact_text(data.prefix), "shards": len(data.shards), "rows": n, "answered": answered,
        "errors": len(errs), "errors_by_reason": dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
        "flags_by_kind": dict(zip(flags["flags"].to_list(), flags["count"].to_list())),
        "low_confidence": int(df["low_confidence"].fill_null(False).sum()),
        "fast_path": int(df["fast_path"].fill_null(False).sum()),
        "by_task": {}, "auroc": {},
    }
    out["low_confidence_rate"] = out["low_confidence"] / answered if answered else None
    out["fast_path_rate"] = out["fast_path"] / answered if answered else None
    if "fallback" in df.columns:  # a later fallback pass: which answer was used
        fb = df["fallback"].drop_nulls().cast(pl.String).value_counts(sort=True)
        out["fallback"] = dict(zip(fb["fallback"].to_list(), fb["count"].to_list()))
    g = calibration.graded_rows(df)
    for task in sorted(g["task"].unique().to_list()):
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
    man = data.manifest or {}
    out["stage_seconds"] = man.get("stage_seconds", {})
    out["seconds"] = man.get("seconds")
    rows_out = man.get("rows_out") or n
    out["tokens_per_row"] = {
        name: {"prompt": st.get("prompt_tokens", 0) / rows_out if rows_out else None,
               "generated": st.get("generated_tokens", 0) / rows_out if rows_out else None,
               "engine_seconds": st.get("seconds")}
        for name, st in (man.get("engines") or {}).items()}
    return out


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def markdown(s: dict, plots: dict[str, str] | None = None) -> str:
    """The report as Markdown (``plots``: name -> file name relative to the report)."""
    lines = [f"# Run report: `{s['output']}`", "",
             "| | |", "|---|---|",
             f"| shards read | {s['shards']} |", f"| rows | {s['rows']} |",
             f"| answered | {s['answered']} |", f"| row errors | {s['errors']} |",
             f"| low confidence | {s['low_confidence']} ({_fmt(s['low_confidence_rate'])} of answered) |",
             f"| fast path (verifier skipped) | {s['fast_path']} ({_fmt(s['fast_path_rate'])} of answered) |"]
    if "fallback" in s:
        lines.append("| fallback | " + ", ".join(f"{k} {v}" for k, v in s["fallback"].items()) + " |")
    lines += ["", "## Accuracy per task (where gold exists)", "",
              "| task | n with gold | accuracy (match for qa) | exact match | F1 |", "|---|---|---|---|---|"]
    lines += [f"| {t} | {m['n_with_gold']} | {_fmt(m['accuracy'])} | {_fmt(m.get('exact_match'))} | "
              f"{_fmt(m.get('f1'))} |" for t, m in s["by_task"].items()] or ["| – | 0 | – | – | – |"]
    lines += ["", "## Confidence measures: AUROC correct vs wrong (rows τ_min applies to)", "",
              "| task | " + " | ".join(calibration.MEASURES) + " |", "|---|" + "---|" * len(calibration.MEASURES)]
    lines += [f"| {t} | " + " | ".join(_fmt(a[m]) for m in calibration.MEASURES) + " |"
              for t, a in s["auroc"].items()]
    lines += ["", "## Errors by reason", ""]
    lines += [f"- {v} × {k}" for k, v in s["errors_by_reason"].items()] or ["none"]
    lines += ["", "## Flags by kind", ""]
    lines += [f"- {k}: {v}" for k, v in s["flags_by_kind"].items()] or ["none"]
    lines += ["", "## Time and tokens", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in s["stage_seconds"].items()]
    lines += [f"| total | {_fmt(s['seconds'])} |", "",
              "| model | prompt tokens / row | generated tokens / row | engine seconds |", "|---|---|---|---|"]
    lines += [f"| {k} | {_fmt(v['prompt'])} | {_fmt(v['generated'])} | {_fmt(v['engine_seconds'])} |"
              for k, v in s["tokens_per_row"].items()]
    for name, f in (plots or {}).items():
        lines += ["", f"![{name}]({f})"]
    return "\n".join(lines) + "\n"


def table_rows(s: dict) -> list[dict]:
    """The report's headline numbers as rows of (metric, value) for a table artifact."""
    rows = [{"metric": k, "value": _fmt(s[k])} for k in
            ("rows", "answered", "errors", "low_confidence", "low_confidence_rate", "fast_path",
             "fast_path_rate")]
    for t, m in s["by_task"].items():
        rows += [{"metric": f"{t} {k}", "value": _fmt(v)} for k, v in m.items()]
    for t, a in s["auroc"].items():
        rows += [{"metric": f"auroc {t} {k}", "value": _fmt(v)} for k, v in a.items()]
    rows += [{"metric": f"seconds {k}", "value": _fmt(v)} for k, v in s["stage_seconds"].items()]
    return rows


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def plots(data: RunData) -> dict[str, bytes]:
    """PNG bytes per plot: the selected score of correct vs wrong rows (histograms), and the
    risk-coverage curve (accuracy of kept rows vs share kept) of each confidence measure."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    g = calibration.graded_rows(data.rows)
    out = {}
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for ok, label in ((True, "correct"), (False, "wrong")):
        v = g.filter(pl.col("correct") == ok)["score"].drop_nulls().to_numpy()
        v = v[np.isfinite(v)]
        if len(v):
            ax.hist(v, bins=20, alpha=0.6, label=f"{label} (n={len(v)})")
    ax.set_xlabel("selected score log ρ (nats)")
    ax.set_ylabel("rows")
    ax.set_title("Selected score, correct vs wrong")
    ax.legend() if g.height else ax.text(0.5, 0.5, "no rows with gold", ha="center")
    out["scores"] = _png(fig)
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for m in calibration.MEASURES:
        c = calibration.risk_coverage(calibration.measure_values(g, m), g["correct"].to_numpy(),
                                      g["always"].to_numpy())
        if len(c.taus):
            ax.plot(c.coverage, c.accuracy, marker="o", ms=3, alpha=0.8, label=m)
    ax.set_xlabel("coverage (share of graded rows kept)")
    ax.set_ylabel("accuracy of kept rows")
    ax.set_ylim(0, 1.02)
    ax.set_title("Risk-coverage as τ_min moves")
    ax.legend() if g.height else ax.text(0.5, 0.5, "no rows with gold", ha="center")
    out["risk_coverage"] = _png(fig)
    return out


def write_report(prefix: str, manifest: dict | None = None) -> dict:
    """Write ``<prefix>/_report/report.md``, ``summary.json`` and the PNG plots; returns the
    summary plus ``report_uri``. ``manifest`` (the run's, e.g. before it is written) overrides
    the one stored under ``prefix``.

    Raises:
        FileNotFoundError: no trusted output shard under ``prefix``."""
    data = load_rows(prefix)
    if manifest is not None:
        data.manifest = manifest
    s = summary(data)
    rdir = storage.join(data.prefix, REPORT_DIR)
    for name, png in plots(data).items():
        storage.write_bytes_atomic(storage.join(rdir, PLOTS[name]), png)
    md = markdown(s, PLOTS)
    storage.write_bytes_atomic(storage.join(rdir, "summary.json"), json.dumps(s, indent=2).encode())
    storage.write_bytes_atomic(storage.join(rdir, "report.md"), md.encode())
    return {**s, "report_uri": storage.join(rdir, "report.md"), "markdown": md}


def publish_artifacts(s: dict, key: str = "specrag-run-report") -> None:
    """The report as Prefect artifacts of the current flow run: a markdown artifact (the report
    without images) and a table artifact (:func:`table_rows`)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_markdown_artifact(markdown=s["markdown"].split("\n![")[0], key=key,
                             description=f"specrag-batch run report ({s['report_uri']})")
    create_table_artifact(table=table_rows(s), key=f"{key}-table",
                          description="specrag-batch run report: headline numbers")
