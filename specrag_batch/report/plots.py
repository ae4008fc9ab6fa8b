"""The report's PNG plots (matplotlib, Agg backend): the selected score of correct vs wrong
rows, and the risk-coverage curve of each confidence measure as τ_min moves."""

from __future__ import annotations

import io

import numpy as np
import polars as pl

from .. import calibration
from .rows import RunData

PLOTS = {"scores": "score_correct_vs_wrong.png", "risk_coverage": "risk_coverage.png"}
"""Plot name -> file name under ``_report/``."""


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
    vs share kept) of each confidence measure. A plot with nothing to draw (no graded row, or
    only fast-path rows) says so in place of a legend."""
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
    _legend_or_note(ax, "no graded row τ_min applies to" if g.height else "no rows with gold")
    out["risk_coverage"] = _png(fig)
    return out
