"""Issue 50 item 5: the calibrated confidence must not be worse than what it learns from.
Its regularisation is chosen by cross-validation (a small run of noise gets an all but flat
model, not 11 fitted weights), and ``calibrate`` says when its out-of-fold AUROC is not above
the plain measure's on the same rows, proposing that measure."""

import numpy as np
import pytest
import polars as pl

from specrag_batch.confidence.measures import FEATURES
from specrag_batch.confidence.fit import fit_task, not_better


def _noise(n=40, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(FEATURES)))
    y = rng.random(n) < 0.5
    return x, y


def test_on_noise_the_cross_validated_strength_flattens_the_model():
    from sklearn.linear_model import LogisticRegression

    x, y = _noise()
    m = fit_task(x, y, task="claim")
    sd = x.std(axis=0)
    standardised = np.abs(np.array(m.coefficients) * sd)
    unregularised = np.abs(LogisticRegression(C=1.0, max_iter=2000).fit((x - x.mean(0)) / sd, y).coef_[0])
    assert standardised.max() < 0.1 < unregularised.max()


def test_calibrate_proposes_the_plain_measure_when_the_model_ranks_no_better():
    # the score alone orders right above wrong perfectly
    t = pl.DataFrame({"correct": [True, True, True, False, False, False],
                      "score": [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0], "mean_logprob": [None] * 6,
                      "flags": [[]] * 6}, schema_overrides={"mean_logprob": pl.Float64, "flags": pl.List(pl.String)})
    line = not_better("claim", 0.6, t)
    assert line is not None and "plain measure score (AUROC 1.000" in line
    assert "selection.confidence: score" in line and "out-of-fold AUROC 0.600" in line
    assert not_better("claim", None, t) is not None  # no AUROC at all is not better either
    # a model above every plain measure gets no warning
    worse = t.with_columns(score=pl.Series([-4.0, -1.0, -6.0, -2.0, -5.0, -3.0]))
    assert not_better("claim", 0.9, worse) is None


def test_calibrate_chooses_tau_min_on_the_label_probability_fast_path_rows_included():
    """Issue 50 item 2: ``label_probability`` is a measure of `calibrate` like the others: a
    probability (not refused for being above 0), thresholded on fast-path rows too (selection
    applies it to them), with its AUROC beside the others'."""
    from specrag_batch.confidence.calibration import calibrate, config_snippet

    n = 20
    df = pl.DataFrame({"query_id": [f"q{i}" for i in range(n)], "task": ["claim"] * n, "answer": ["S"] * n,
                       "error": [None] * n, "correct": [i >= 8 for i in range(n)],
                       "score": [-1.0] * n, "mean_logprob": [-0.1] * n,
                       "label_probability": [0.3 + i / 40 for i in range(n)],
                       "fast_path": [i % 2 == 0 for i in range(n)], "flags": [[]] * n},
                      schema_overrides={"error": pl.String, "flags": pl.List(pl.String)})
    [r] = calibrate(df, measure="label_probability", target_accuracy=1.0, n_boot=20)
    assert r.tau == pytest.approx(0.3 + 8 / 40) and r.kept == 12 and r.fast_path == 0
    assert r.auroc["label_probability"] == 1.0
    assert "confidence: label_probability" in config_snippet([r])
