"""Does the calibrated confidence find the wrong answers, and does a cascade on it pay? (issue 39
items 2 and 3), from the decision benchmark's stored cells only (no engine run).

**Confidence.** For each Speculative RAG arm, each reported row gets the product's calibrated
probability of being right (``specrag_batch.confidence.fit``: the per-task logistic model over
``specrag_batch.confidence.measures.FEATURES``) from a model *not fitted on that row*, two ways:

* ``cv``: stratified 5-fold cross-validation by row within each task (qa, claim, choice), the
  probability averaged over 5 fold assignments (seeds 0-4), each from a model that never saw
  the row;
* ``tuning``: fitted on the arm's tuning rows (cells of the same config hash whose query ids are
  not among the reported rows; only tasks with enough of them) and evaluated on the reported rows.

AUROC of that probability for ``correct`` with a 95% percentile bootstrap interval (rows
resampled, 2,000 times), per task, per dataset and pooled, beside the AUROC of each single signal
(no fit: higher = more confident) and of the row's current ``score`` (log ρ).

**Cascade.** The rows the arm is least confident about (lowest ``cv`` probability) are answered
again by Standard RAG, whose cell holds the same rows: for a fallback share q (0-100% by 5), the
cascade's accuracy, its paired difference from Standard RAG alone (95% paired bootstrap interval)
and its seconds per row relative to Standard RAG's, (spec s/row + q × standard s/row) / standard
s/row, with s/row = the cells' summed stage seconds / rows (same machine). A setting is
*non-inferior at budget* when the interval's lower end is above -2 points and the ratio is at
most 0.85. The share is chosen on the same rows it is scored on (optimistic; a real run per
dataset confirms it: issue 39 item 3). ``perfect_confidence_diff_at_budget`` bounds what any
confidence could do within the budget: the share 0.85 - spec/std seconds re-answered, rows the
arm got wrong and Standard RAG right first.

**Risk-coverage.** The same ``cv`` probability ranks the rows; keeping the most confident
share c of them (coverage, 5% to 100% by 5), the risk is the share of kept rows answered
wrong. A confidence that finds the wrong answers has risk rising with coverage; one that does
not has a flat curve at the arm's error rate (``risk_coverage``, pooled and per task).

Usage::

    python benchmarks/confidence.py [--machine 843baa784212] [--out benchmarks/confidence]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.cell_archive import read_archive  # noqa: E402
from specrag_batch.confidence.measures import FEATURES  # noqa: E402
from specrag_batch.confidence.fit import CalibrationInputError, feature_matrix, fit_task, out_of_fold  # noqa: E402

DATASETS = ("climate_fever", "popqa", "arc_challenge", "hotpotqa", "nq_open")
ARMS = {"speculative-default": "log ρ_draft alone, adaptive drafting (the defaults before decision 009)",
        "speculative": "the paper's configuration (ρ_draft·ρ_SC·ρ_SR)",
        "speculative-default-large-drafter": "the defaults with the 1.5B model as drafter",
        "speculative-default-one-round": "the current defaults (0.5B drafter, log ρ_draft alone, one round)"}
TUNING = {"speculative-default": ("tuning-adaptive-on",), "speculative-default-one-round": ("tuning-adaptive-off",),
          "speculative": ("tuning-verifier", "tuning-selection", "tuning")}
"""Tuning cells of each arm's config hash (any machine's archive)."""
SIGNALS = ("score", "score_draft", "draft_per_token", "agreement", "vote_share", "margin", "fast_path")
SHARES = tuple(round(x, 2) for x in np.arange(0, 1.0001, 0.05))
MARGIN, BUDGET, SEEDS, N_BOOT = -0.02, 0.85, 5, 2000


def load(archives: Path) -> dict[str, dict]:
    """Every archive's members, by archive stem (machine id)."""
    return {p.name.split(".")[0]: read_archive(p) for p in sorted(archives.glob("*.tar.xz"))}


def cell(members: dict, dataset: str, arm: str) -> tuple[pl.DataFrame | None, float]:
    """(graded answered rows, seconds per row = summed stage seconds / rows) of one cell."""
    tables, seconds, rows = [], 0.0, 0
    for key in sorted(members):
        if key.startswith(f"{dataset}/{arm}/") and key.endswith(".parquet"):
            tables.append(pq.read_table(io.BytesIO(members[key])))
            res = json.loads(members[key[:-len(".parquet")] + ".json"])["result"]
            seconds += sum(res["stage_seconds"].values())
            rows += res["rows_out"]
    if not tables:
        return None, float("nan")
    df = pl.from_arrow(pa.concat_tables(tables, promote_options="permissive"))
    df = df.filter(pl.col("error").is_null() & pl.col("correct").is_not_null() & pl.col("answer").is_not_null())
    return df.with_columns(dataset=pl.lit(dataset)), seconds / max(rows, 1)


def _auc(y: np.ndarray, s: np.ndarray) -> np.ndarray:
    """AUROC (Mann-Whitney, ties counted half) of scores ``s`` (b, n) for labels ``y`` (b, n)."""
    from scipy.stats import rankdata

    r = rankdata(s, axis=-1)
    n1 = y.sum(-1)
    n0 = y.shape[-1] - n1
    return ((r * y).sum(-1) - n1 * (n1 + 1) / 2) / (n1 * n0)


def auroc_ci(y, s, n_boot: int | None = None, seed: int = 0) -> dict:
    """AUROC of score ``s`` for bool ``y`` and its 95% percentile bootstrap interval (rows
    resampled; resamples with one class left out); NaN scores rank lowest."""
    y, s = np.asarray(y, bool), np.nan_to_num(np.asarray(s, float), nan=-1e12)
    if y.all() or not y.any():
        return {"auroc": None, "lo": None, "hi": None, "n": int(len(y))}
    i = np.random.default_rng(seed).integers(0, len(y), (n_boot or N_BOOT, len(y)))
    yb = y[i]
    ok = yb.any(-1) & ~yb.all(-1)
    boots = _auc(yb[ok], s[i][ok])
    return {"auroc": float(_auc(y[None], s[None])[0]), "lo": float(np.percentile(boots, 2.5)),
            "hi": float(np.percentile(boots, 97.5)), "n": int(len(y))}


def cv_probability(df: pl.DataFrame, x: np.ndarray) -> np.ndarray:
    """Out-of-fold probability per row, per task, averaged over :data:`SEEDS` fold assignments."""
    p, y = np.full(df.height, np.nan), df["correct"].to_numpy()
    for task in df["task"].unique().to_list():
        i = (df["task"] == task).to_numpy()
        p[i] = np.mean([out_of_fold(x[i], y[i], seed=s) for s in range(SEEDS)], axis=0)
    return p


def tuning_probability(df: pl.DataFrame, x: np.ndarray, tune: pl.DataFrame | None) -> tuple[np.ndarray, dict]:
    """Probability per reported row from a model fitted on the tuning rows of its task (NaN for
    a task without enough tuning rows), and the tuning rows per task."""
    p, used = np.full(df.height, np.nan), {}
    if tune is None:
        return p, used
    tune = tune.filter(~pl.col("query_id").is_in(df["query_id"].implode()))
    for task in df["task"].unique().to_list():
        t = tune.filter(pl.col("task") == task)
        try:
            m = fit_task(feature_matrix(t), t["correct"].to_numpy(), task=task)
        except CalibrationInputError:
            continue
        i = (df["task"] == task).to_numpy()
        p[i], used[task] = m.predict(x[i]), t.height
    return p, used


def paired_ci(a, b, n_boot: int | None = None, seed: int = 0) -> tuple[float, float, float]:
    """Mean of a - b (bool or 0/1 per row) and its 95% paired bootstrap interval."""
    d = np.asarray(a, float) - np.asarray(b, float)
    boots = d[np.random.default_rng(seed).integers(0, len(d), (n_boot or N_BOOT, len(d)))].mean(-1)
    return float(d.mean()), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def cascade(spec, std, conf, spec_spr: float, std_spr: float, shares=SHARES) -> list[dict]:
    """The cascade's frontier: the lowest-``conf`` share q of rows answered by Standard RAG.

    Args:
        spec, std: bool (rows,), each arm's correctness on the same rows (paired).
        conf: float (rows,), the confidence (NaN ranks lowest).
        spec_spr, std_spr: seconds per row of the two arms."""
    spec, std = np.asarray(spec, bool), np.asarray(std, bool)
    order = np.argsort(np.nan_to_num(np.asarray(conf, float), nan=-np.inf), kind="stable")
    out = []
    for q in shares:
        k = int(round(q * len(spec)))
        got = spec.copy()
        got[order[:k]] = std[order[:k]]
        diff, lo, hi = paired_ci(got, std)
        ratio = (spec_spr + k / len(spec) * std_spr) / std_spr
        out.append({"share": q, "accuracy": float(got.mean()), "diff": diff, "lo": lo, "hi": hi,
                    "seconds_ratio": ratio, "non_inferior_at_budget": bool(lo > MARGIN and ratio <= BUDGET)})
    return out


def risk_coverage(correct, conf, coverages=SHARES[1:]) -> list[dict]:
    """Selective prediction's risk-coverage curve: keep the most confident ``coverage`` share
    of rows (highest ``conf`` first; NaN ranks lowest, ties in row order) and report the share
    of kept rows answered wrong.

    Args:
        correct: bool (rows,), whether each row's answer is right.
        conf: float (rows,), the confidence.
        coverages: shares of rows kept, each in (0, 1].
    Returns:
        ``[{"coverage": c, "rows": kept, "risk": wrong share of kept}, ...]``; no rows, no points."""
    correct = np.asarray(correct, bool)
    if not len(correct):
        return []
    order = np.argsort(-np.nan_to_num(np.asarray(conf, float), nan=-np.inf), kind="stable")
    out = []
    for c in coverages:
        k = max(1, int(round(c * len(correct))))
        out.append({"coverage": c, "rows": k, "risk": float(1.0 - correct[order[:k]].mean())})
    return out


def analyse(members: dict, machine: str) -> dict:
    """Every figure of the benchmark (see the module docstring)."""
    here = members[machine]
    std = {d: cell(here, d, "standard") for d in DATASETS}
    result = {"machine": machine, "arms": {}}
    for arm, what in ARMS.items():
        parts = [(d, *cell(here, d, arm)) for d in DATASETS]
        if any(df is None for _, df, _ in parts):
            continue
        df = pl.concat([df for _, df, _ in parts], how="diagonal_relaxed")
        spr = {d: s for d, _, s in parts}
        x = feature_matrix(df)
        y = df["correct"].to_numpy()
        p_cv = cv_probability(df, x)
        tunes = [c for m in members.values() for name in TUNING.get(arm, ()) for d in DATASETS
                 if (c := cell(m, d, name)[0]) is not None]
        tune = pl.concat(tunes, how="diagonal_relaxed").unique("query_id", keep="first") if tunes else None
        p_tune, tune_rows = tuning_probability(df, x, tune)
        groups = {"pooled": np.ones(df.height, bool),
                  **{f"task {t}": (df["task"] == t).to_numpy() for t in ("qa", "claim", "choice")},
                  **{d: (df["dataset"] == d).to_numpy() for d in DATASETS}}
        rows = {}
        for g, i in groups.items():
            entry = {"calibrated_cv": auroc_ci(y[i], p_cv[i])}
            ok = i & np.isfinite(p_tune)
            if ok.sum() and ok.sum() == i.sum():
                entry["calibrated_tuning"] = auroc_ci(y[ok], p_tune[ok])
            for s in SIGNALS:
                entry[s] = auroc_ci(y[i], x[i, FEATURES.index(s)], n_boot=200)
            rows[g] = entry
        frontier = {}
        for d in DATASETS:
            i = (df["dataset"] == d).to_numpy()
            sd, s_spr = std[d]
            pair = df.filter(pl.col("dataset") == d).select("query_id", "correct").with_columns(p=p_cv[i]).join(
                sd.select("query_id", std_correct="correct"), on="query_id", how="inner")
            a, b = pair["correct"].to_numpy(), pair["std_correct"].to_numpy()
            room = max(0.0, BUDGET - spr[d] / s_spr)  # the share Standard RAG may re-answer within budget
            frontier[d] = {"rows": pair.height, "spec_seconds_per_row": spr[d], "standard_seconds_per_row": s_spr,
                           "standard_accuracy": float(b.mean()), "share_within_budget": room,
                           "perfect_confidence_diff_at_budget": float(a.mean() - b.mean() + min(room, float((~a & b).mean()))),
                           "points": cascade(pair["correct"].to_numpy(), pair["std_correct"].to_numpy(),
                                             pair["p"].to_numpy(), spr[d], s_spr)}
        curves = {g: risk_coverage(y[i], p_cv[i]) for g, i in groups.items() if i.any() and (g == "pooled" or g.startswith("task "))}
        result["arms"][arm] = {"what": what, "rows": df.height, "accuracy": float(y.mean()),
                               "tuning_rows": tune_rows, "auroc": rows, "cascade": frontier,
                               "risk_coverage": curves}
    return result


def _f(a: dict | None) -> str:
    return "–" if not a or a.get("auroc") is None else f"{a['auroc']:.3f} [{a['lo']:.2f}, {a['hi']:.2f}]"


def markdown(r: dict, date: str) -> str:
    """The figures as Markdown (benchmarks/confidence.md)."""
    out = [f"# Calibrated confidence and cascade, from stored cells ({date}, host {r['machine']})", "",
           "Generated by `python benchmarks/confidence.py`; method in its docstring. AUROC of the",
           "probability of being right for `correct`, on rows the model was not fitted on, with a 95%",
           "bootstrap interval. `cv`: 5-fold cross-validation by row within each task (5 fold",
           "assignments averaged); `tuning`: fitted on the arm's tuning rows, evaluated on the",
           "reported rows. Single signals are not fitted (higher = more confident).", ""]
    for arm, a in r["arms"].items():
        out += [f"## `{arm}`: {a['what']}", "",
                f"{a['rows']} reported rows, accuracy {a['accuracy']:.3f}; tuning rows per task: "
                f"{a['tuning_rows'] or 'none'}.", "",
                "| rows | n | calibrated (cv) | calibrated (tuning) | " + " | ".join(SIGNALS) + " |",
                "|---|---|---|---|" + "---|" * len(SIGNALS)]
        for g, e in a["auroc"].items():
            out.append(f"| {g} | {e['calibrated_cv']['n']} | {_f(e['calibrated_cv'])} | {_f(e.get('calibrated_tuning'))} | "
                       + " | ".join("–" if e[s]["auroc"] is None else f"{e[s]['auroc']:.2f}" for s in SIGNALS) + " |")
        out += ["", "Cascade (least-confident share re-answered by Standard RAG): Standard RAG's accuracy; the",
                "cascade at share 0, at the largest share within 0.85x Standard RAG's seconds, what a",
                "perfect confidence would reach within 0.85x (point estimate), and the cheapest",
                "non-inferior share (paired interval above -2 points) if any.", "",
                "| dataset | n | Standard | s/row spec / std | share 0: diff [95%], ratio | within 0.85x: share, diff [95%] | perfect confidence within 0.85x: diff | cheapest non-inferior: share, ratio | non-inferior at ≤0.85x |",
                "|---|---|---|---|---|---|---|---|---|"]
        for d, c in a["cascade"].items():
            pts = c["points"]
            p0 = pts[0]
            within = [p for p in pts if p["seconds_ratio"] <= BUDGET]
            w = within[-1] if within else None
            ni = [p for p in pts if p["lo"] > MARGIN]
            best = ni[0] if ni else None
            ok = any(p["non_inferior_at_budget"] for p in pts)
            out.append(f"| {d} | {c['rows']} | {c['standard_accuracy']:.3f} | {c['spec_seconds_per_row']:.2f} / "
                       f"{c['standard_seconds_per_row']:.2f} | {p0['diff']*100:+.1f} [{p0['lo']*100:+.1f}, {p0['hi']*100:+.1f}], "
                       f"{p0['seconds_ratio']:.2f}x | "
                       + (f"{w['share']:.2f}, {w['diff']*100:+.1f} [{w['lo']*100:+.1f}, {w['hi']*100:+.1f}]" if w else "none")
                       + f" | {c['perfect_confidence_diff_at_budget']*100:+.1f}"
                       + " | " + (f"{best['share']:.2f}, {best['seconds_ratio']:.2f}x" if best else "none")
                       + f" | {'**yes**' if ok else 'no'} |")
        out.append("")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archives", type=Path, default=ROOT / "benchmarks/decision/archives")
    ap.add_argument("--machine", default="843baa784212")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/confidence")
    ap.add_argument("--date", default=None, help="date written in the Markdown (default today, UTC)")
    a = ap.parse_args(argv)
    import datetime as dt

    r = analyse(load(a.archives), a.machine)
    date = a.date or dt.datetime.now(dt.timezone.utc).date().isoformat()
    a.out.with_suffix(".json").write_text(json.dumps({"date": date, **r}, indent=1) + "\n")
    a.out.with_suffix(".md").write_text(markdown(r, date))
    print(a.out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
