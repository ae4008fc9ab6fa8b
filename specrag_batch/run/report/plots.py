"""The report's PNG plots (matplotlib, Agg backend): the selected score of correct vs wrong
rows, the risk-coverage curve of the confidence the run compared with τ_min
(:func:`specrag_batch.confidence.calibration.used_confidence`) as τ_min moves, and the label tasks'
confusion matrix and the confidences' reliability diagram (:mod:`.diagnostics`)."""

from __future__ import annotations

import io

import numpy as np
import polars as pl

from ...confidence import calibration
from .diagnostics import diagnostics, figures
from ..results import RunData

PLOTS = {"scores": "score_correct_vs_wrong.png", "risk_coverage": "risk_coverage.png",
         "confusion": "confusion_matrix.png", "reliability": "reliability.png"}
"""Plot name -> file name under ``_report/``."""
_SHORT = {"score": "the selected score log ρ", "mean_logprob": "log-probability per token",
          "confidence": "the calibrated P(right)"}


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _legend_or_note(ax, note: str) -> None:
    """A legend when something on ``ax`` is labelled, else ``note`` in the middle (matplotlib
    warns on a legend with nothing labelled)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    else:
        ax.text(0.5, 0.5, note, ha="center", transform=ax.transAxes)


def plots(data: RunData) -> dict[str, bytes]:
    """PNG bytes per plot (name of :data:`PLOTS` -> bytes): the selected score log ρ (nats)
    of correct vs wrong rows (histograms), and the risk-coverage curve (accuracy of kept rows
    vs share kept) of the confidence the run used (:func:`~specrag_batch.confidence.calibration.used_confidence`:
    the calibrated probability under ``selection.confidence: calibrated``, else the measure it
    names), titled with it. Without a graded row (no gold) there is no risk-coverage plot
    (:func:`~specrag_batch.run.report.summary.summary` says why in the report). A plot with nothing
    else to draw (only fast-path rows, no score) says so in place of a legend."""
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
    _legend_or_note(ax, "no graded row with a finite score" if g.height else "no rows with gold")
    out["scores"] = _png(fig)
    if g.height == 0:
        return out
    column, caption = calibration.used_confidence(data.config)
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    conf = calibration.measure_values(g, column) if column in g.columns else np.full(g.height, np.nan)
    c = calibration.risk_coverage(conf, g["correct"].to_numpy(), calibration.always_kept(g, column))
    if len(c.taus):
        ax.plot(c.coverage, c.accuracy, marker="o", ms=3, label=f"{column} (n={c.n})")
        ax.axhline(float(g["correct"].mean()), ls="--", color="grey", lw=1, label="accuracy of all graded rows")
    ax.set_xlabel("coverage (share of graded rows kept)")
    ax.set_ylabel("accuracy of kept rows")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Risk-coverage as τ_min moves on {_SHORT.get(column, column)}", fontsize=11)
    fig.text(0.5, 0.01, "confidence: " + caption, ha="center", fontsize=7)
    fig.subplots_adjust(bottom=0.18)
    _legend_or_note(ax, f"no graded row has a {column} τ_min applies to")
    out["risk_coverage"] = _png(fig)
    for name, fig in figures(diagnostics(g, data.config)).items():  # confusion matrix, reliability diagram
        out[name] = _png(fig)
    return out
