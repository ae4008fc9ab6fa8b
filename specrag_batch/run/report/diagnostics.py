"""The report's label and calibration diagnostics (issue 50 item 6): a confusion matrix of gold
label against answer for the label tasks (``claim``, ``choice``), and a reliability diagram
(predicted probability against observed accuracy) with its expected calibration error for
each confidence of the run.

* Confusion matrix (:func:`confusion`): rows = the gold label (a row's first gold), columns =
  the answer; answers outside the task's gold labels are one column, ``(other)``. A task whose
  gold and answers take more than :data:`MAX_LABELS` distinct values (option texts of
  multiple-choice rows, which differ from question to question) gets no matrix, only a note.
* Reliability (:func:`reliability`): the graded rows are put in :data:`BINS` equal-width bins
  of predicted probability p ∈ [0, 1]; per bin the mean p and the share right;
  ECE = Σ_b (n_b / n) · |accuracy_b − mean p_b| (Guo et al. 2017, "On Calibration of Modern
  Neural Networks", §2). Probabilities are the columns ``label_probability`` and
  ``confidence``; a log-probability confidence (``score``, ``mean_logprob``) the run compared
  with τ_min is drawn as p = exp(value), the probability it stands for.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ...confidence import calibration
from ...core.labels import argmax, mixture, per_label_recall

LABEL_TASKS = ("claim", "choice")
MAX_LABELS = 12
"""Most distinct gold labels and answers a task's confusion matrix is drawn for."""
OTHER = "(other)"
"""The column of answers that are none of the task's gold labels."""
BINS = 10
"""Equal-width bins of the reliability diagram."""
PROBABILITY_COLUMNS = ("label_probability", "confidence")


def confusion(g: pl.DataFrame, prior_corrected: bool = False) -> dict[str, dict]:
    """Per label task of the graded rows ``g`` (:func:`~specrag_batch.confidence.calibration.graded_rows`
    with ``gold``): ``{"labels": gold labels (sorted), "answers": column names (the labels,
    then OTHER when an answer is none of them), "matrix": counts [gold][answer]}``, or
    ``{"note": why no matrix}``. Tasks without graded rows are left out. ``prior_corrected``
    (the run's ``selection.label_prior`` was ``batch``): claim rows also get
    ``recall_before_prior``, each gold label's recall of the answers the drafts' label
    distribution gave before the correction (:func:`uncorrected_answer`)."""
    out: dict[str, dict] = {}
    if "gold" not in g.columns:
        return out
    for task in LABEL_TASKS:
        t = g.filter((pl.col("task") == task) & pl.col("gold").list.len().fill_null(0).gt(0))
        if t.height == 0:
            continue
        gold = [str(v[0]) for v in t["gold"].to_list()]
        answers = [str(a) for a in t["answer"].to_list()]
        labels = sorted(set(gold))
        if len(set(gold) | set(answers)) > MAX_LABELS:
            out[task] = {"note": f"{len(set(gold) | set(answers))} distinct gold labels and answers "
                                 f"(more than {MAX_LABELS}, e.g. option texts): no confusion matrix"}
            continue
        cols = labels + ([OTHER] if any(a not in labels for a in answers) else [])
        m = [[0] * len(cols) for _ in labels]
        for gl, a in zip(gold, answers):
            m[labels.index(gl)][cols.index(a if a in labels else OTHER)] += 1
        out[task] = {"labels": labels, "answers": cols, "matrix": m}
        if task == "claim" and prior_corrected:
            before = [uncorrected_answer(d) for d in t["drafts"].to_list()] if "drafts" in t.columns else []
            if any(b is not None for b in before):
                rec = per_label_recall(gold, before)
                out[task]["recall_before_prior"] = [rec[label][0] for label in labels]
    return out


def uncorrected_answer(drafts) -> str | None:
    """The argmax label of the equal-weight mixture of ``drafts``' ``label_logprobs`` (output
    draft records), before any prior correction; None when no draft has them."""
    dist = mixture([{e["label"]: e["logprob"] for e in d.get("label_logprobs") or []} for d in drafts or []])
    return None if dist is None else argmax(dist)[0]


def reliability(p, correct, bins: int = BINS) -> dict | None:
    """Reliability of probabilities ``p`` (float array, NaN = none) against ``correct`` (bool
    array): ``{"n", "ece", "bins": [{"low", "high", "n", "mean_p", "accuracy"}, ...]}`` over
    the non-empty bins (module docstring); None when no row has a finite p. p is clipped to
    [0, 1]."""
    p = np.asarray(p, dtype=float)
    y = np.asarray(correct, dtype=bool)
    ok = np.isfinite(p)
    p, y = np.clip(p[ok], 0.0, 1.0), y[ok]
    if len(p) == 0:
        return None
    which = np.minimum((p * bins).astype(int), bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        sel = which == b
        if not sel.any():
            continue
        mean_p, acc = float(p[sel].mean()), float(y[sel].mean())
        ece += sel.sum() / len(p) * abs(acc - mean_p)
        rows.append({"low": b / bins, "high": (b + 1) / bins, "n": int(sel.sum()), "mean_p": mean_p, "accuracy": acc})
    return {"n": int(len(p)), "ece": float(ece), "bins": rows}


def probabilities(g: pl.DataFrame, config: dict | None) -> dict[str, np.ndarray]:
    """Confidence name -> predicted probability per graded row (NaN = none): the probability
    columns with a finite value, and the run's own log-probability confidence as
    ``exp(<measure>)`` (:func:`~specrag_batch.confidence.calibration.used_confidence`)."""
    out = {}
    for column in PROBABILITY_COLUMNS:
        v = calibration.measure_values(g, column)
        if np.isfinite(v).any():
            out[column] = v
    used = calibration.used_confidence(config)[0]
    if used not in PROBABILITY_COLUMNS:
        v = calibration.measure_values(g, used)
        if np.isfinite(v).any():
            out[f"exp({used})"] = np.exp(v)
    return out


def diagnostics(g: pl.DataFrame, config: dict | None) -> dict:
    """``{"confusion": :func:`confusion`, "reliability": name -> :func:`reliability`}`` of the
    graded rows ``g`` (all tasks pooled for the reliability)."""
    y = g["correct"].to_numpy().astype(bool) if g.height else np.zeros(0, bool)
    rel = {name: r for name, p in probabilities(g, config).items() if (r := reliability(p, y)) is not None}
    sel = (config or {}).get("selection") or {}
    prior = bool(sel.get("label_distribution")) and sel.get("label_prior") == "batch"
    return {"confusion": confusion(g, prior), "reliability": rel}


def markdown(d: dict) -> list[str]:
    """The diagnostics as Markdown lines (tables; the pictures are linked by the report)."""
    f = lambda v: f"{v:.3f}"  # noqa: E731
    lines: list[str] = []
    if d.get("confusion"):
        lines += ["", "## Confusion matrix: gold label (rows) against answer (columns)", ""]
        for task, c in d["confusion"].items():
            if "note" in c:
                lines += [f"{task}: {c['note']}.", ""]
                continue
            before = c.get("recall_before_prior")
            lines += [f"{task}:", "", "| gold \\ answer | " + " | ".join(c["answers"]) + " | recall |"
                      + (" recall before prior correction |" if before else ""),
                      "|---|" + "---|" * (len(c["answers"]) + 1 + bool(before))]
            for i, (label, counts) in enumerate(zip(c["labels"], c["matrix"])):
                recall = counts[c["answers"].index(label)] / sum(counts) if sum(counts) else float("nan")
                lines.append(f"| {label} | " + " | ".join(str(n) for n in counts) + f" | {f(recall)} |"
                             + (f" {f(before[i])} |" if before else ""))
            lines.append("")
    if d.get("reliability"):
        lines += ["", "## Reliability: predicted probability against observed accuracy", ""]
        for name, r in d["reliability"].items():
            lines += [f"{name}: n = {r['n']}, expected calibration error (ECE) {f(r['ece'])}", "",
                      "| bin | rows | mean predicted | accuracy |", "|---|---|---|---|"]
            lines += [f"| [{b['low']:.1f}, {b['high']:.1f}) | {b['n']} | {f(b['mean_p'])} | {f(b['accuracy'])} |"
                      for b in r["bins"]]
            lines.append("")
    return lines


def figures(d: dict) -> dict[str, object]:
    """matplotlib Figures: ``confusion`` (one heat map per task with a matrix) and
    ``reliability`` (one line per confidence and the diagonal); a figure is left out when
    there is nothing to draw."""
    from matplotlib.figure import Figure

    out: dict[str, object] = {}
    mats = {t: c for t, c in d.get("confusion", {}).items() if "matrix" in c}
    if mats:
        fig = Figure(figsize=(5 * len(mats), 4.5))
        for ax, (task, c) in zip(np.atleast_1d(fig.subplots(1, len(mats))), mats.items()):
            m = np.array(c["matrix"])
            ax.imshow(m, cmap="Blues")
            ax.set_xticks(range(len(c["answers"])), c["answers"], rotation=30, ha="right", fontsize=7)
            ax.set_yticks(range(len(c["labels"])), c["labels"], fontsize=7)
            for (i, j), n in np.ndenumerate(m):
                ax.text(j, i, str(n), ha="center", va="center", color="white" if n > m.max() / 2 else "black")
            ax.set_xlabel("answer")
            ax.set_ylabel("gold")
            ax.set_title(f"{task}: gold against answer", fontsize=10)
        fig.tight_layout()
        out["confusion"] = fig
    if d.get("reliability"):
        fig = Figure(figsize=(6, 4.5))
        ax = fig.subplots()
        ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="perfectly calibrated")
        for name, r in d["reliability"].items():
            ax.plot([b["mean_p"] for b in r["bins"]], [b["accuracy"] for b in r["bins"]], marker="o",
                    label=f"{name} (n={r['n']}, ECE {r['ece']:.3f})")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("predicted probability (mean of the bin)")
        ax.set_ylabel("observed accuracy")
        ax.set_title("Reliability diagram", fontsize=11)
        ax.legend(fontsize=7)
        out["reliability"] = fig
    return out
