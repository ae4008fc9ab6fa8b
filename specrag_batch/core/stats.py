"""Paired comparisons of two answer methods over the same rows: accuracy difference with a
paired percentile bootstrap 95% interval, McNemar's exact test (``scipy.stats.binomtest`` on the
discordant pairs), a ratio of sums (seconds) with a paired bootstrap interval, and how many rows
an interval needs to clear a margin. Used by ``specrag-batch tune`` (:mod:`specrag_batch.run.tuning`)
and by the benchmarks (``benchmarks/decision_stats.py`` re-exports them). Fractions, not points."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import binomtest

REPS = 2000
"""Bootstrap resamples: enough for the ends of a 95% interval to settle to about 0.5 point."""


def _resample_index(n: int, reps: int, rng: np.random.Generator,
                    strata: Sequence | None = None) -> np.ndarray:
    """(reps, n) row indices drawn with replacement; within each stratum when ``strata`` is
    given (each resample keeps every stratum's size)."""
    if strata is None:
        return rng.integers(0, n, (reps, n))
    strata = np.asarray(strata)
    cols = []
    for s in dict.fromkeys(strata.tolist()):
        idx = np.flatnonzero(strata == s)
        cols.append(idx[rng.integers(0, len(idx), (reps, len(idx)))])
    return np.concatenate(cols, axis=1)


def bootstrap_ci(values: Sequence[float], *, reps: int = REPS, seed: int = 0,
                 strata: Sequence | None = None) -> list[float]:
    """Percentile bootstrap 95% interval [low, high] of the mean of ``values`` (e.g. 0/1
    correctness of n rows); [nan, nan] when empty."""
    if len(values) == 0:
        return [math.nan, math.nan]
    a = np.asarray(values, dtype=float)
    means = a[_resample_index(len(a), reps, np.random.default_rng(seed), strata)].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def paired_bootstrap(a: Sequence[bool], b: Sequence[bool], *, reps: int = REPS, seed: int = 0,
                     strata: Sequence | None = None) -> dict:
    """Paired difference of means ``mean(a) - mean(b)`` over the same n rows (a[i], b[i] are
    row i's outcomes under two arms) and its percentile bootstrap 95% interval: rows are
    resampled as pairs, so the interval reflects only the rows' disagreement.

    Returns ``{"n", "diff", "ci95": [low, high]}`` (fractions, not points).

    Raises:
        ValueError: ``a`` and ``b`` differ in length."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    if len(a) == 0:
        return {"n": 0, "diff": math.nan, "ci95": [math.nan, math.nan]}
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    means = d[_resample_index(len(d), reps, np.random.default_rng(seed), strata)].mean(axis=1)
    return {"n": len(d), "diff": float(d.mean()),
            "ci95": [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]}


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict:
    """McNemar's exact test of paired binary outcomes: b = rows right under ``a`` and wrong
    under ``b``, c = the reverse; p = two-sided binomial test of b successes in b + c trials
    at 1/2 (``scipy.stats.binomtest``); p = 1 when there is no discordant pair.

    Returns ``{"n", "b", "c", "p"}``.

    Raises:
        ValueError: ``a`` and ``b`` differ in length."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    nb = sum(1 for x, y in zip(a, b) if x and not y)
    nc = sum(1 for x, y in zip(a, b) if y and not x)
    p = 1.0 if nb + nc == 0 else float(binomtest(nb, nb + nc, 0.5).pvalue)
    return {"n": len(a), "b": nb, "c": nc, "p": p}


def ratio_bootstrap(num: Sequence[float], den: Sequence[float], *, reps: int = REPS, seed: int = 0,
                    strata: Sequence | None = None) -> dict:
    """Ratio ``sum(num) / sum(den)`` over paired units (e.g. seconds of the same shard under
    two arms) and its paired percentile bootstrap 95% interval (units resampled as pairs); a
    sign test (exact two-sided binomial) on the units where ``num < den`` vs ``num > den``.

    Returns ``{"n", "ratio", "ci95": [low, high], "faster_units", "slower_units", "p_sign"}``.

    Raises:
        ValueError: lengths differ."""
    if len(num) != len(den):
        raise ValueError(f"paired samples differ in length: {len(num)} vs {len(den)}")
    if len(num) == 0 or sum(den) == 0:
        return {"n": len(num), "ratio": math.nan, "ci95": [math.nan, math.nan],
                "faster_units": 0, "slower_units": 0, "p_sign": math.nan}
    x, y = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    idx = _resample_index(len(x), reps, np.random.default_rng(seed), strata)
    ratios = x[idx].sum(axis=1) / np.maximum(y[idx].sum(axis=1), 1e-12)
    lo, hi = int((x < y).sum()), int((x > y).sum())
    return {"n": len(x), "ratio": float(x.sum() / y.sum()),
            "ci95": [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))],
            "faster_units": lo, "slower_units": hi,
            "p_sign": 1.0 if lo + hi == 0 else float(binomtest(lo, lo + hi, 0.5).pvalue)}


def rows_to_clear(n: int, estimate: float, bound: float, threshold: float) -> int | None:
    """Rows an interval needs for its ``bound`` to pass ``threshold`` with the same ``estimate``,
    its half-width shrinking as 1/sqrt(n): n · ((estimate - bound) / (estimate - threshold))²,
    rounded up. None when the estimate itself is on the wrong side of (or at) the threshold:
    no number of rows makes that interval clear it. For a ratio, pass logarithms.

    Args:
        n: rows (or units) the interval was computed over.
        estimate: the point estimate (a difference of fractions, or a log ratio).
        bound: the end of the interval that must pass ``threshold``.
        threshold: the value that end must pass (e.g. -0.02 for a lower end, 0 for log ratio 1)."""
    gap, half = estimate - threshold, estimate - bound
    if n <= 0 or gap == 0 or (gap > 0) != (half > 0) or not math.isfinite(gap) or not math.isfinite(half):
        return None
    return max(n + 1, math.ceil(n * (half / gap) ** 2))
