"""Night over night: one night's run profile (:mod:`specrag_batch.run.drift.profile`) compared with
the profiles of the nights before it, measure by measure, with a test suited to each kind.

===============  ==========================================  =================================
kind             measures                                    test (moved when ...)
===============  ==========================================  =================================
rate             ``low_confidence_rate``, ``fast_path_rate``,  Fisher's exact test on the 2x2
                 ``error_rate``, ``error_reason:<code>``,      table (scipy): p < ``p_value`` and
                 ``answer_source:<pass>``, ``accuracy:<task>`` the rate moved >= ``min_rate_change``
mix              ``answers:<task>`` (claim, choice labels)     chi-square test of the 2 x labels
                                                               table (scipy): p < ``p_value`` and
                                                               Cramér's V >= ``min_distance``
distribution     ``score:<task>``, ``confidence:<task>``,      two-sample Kolmogorov-Smirnov
                 ``answer_length:qa``, ``draft_tokens``        (scipy): p < ``p_value`` and
                                                               statistic >= ``min_distance``
per_row          ``seconds_per_row``, ``tokens_per_row:*``,    relative change from the baseline
                 ``engine_seconds_per_row:*``                  nights' median > ``max_relative_change``
===============  ==========================================  =================================

The baseline pools the nights: counts summed, distribution samples joined; per-row costs take
the median of the nights' values. A measure tonight or the baseline lacks is not compared.
``drift.min_effect`` replaces a measure's effect threshold (:class:`~specrag_batch.config.DriftConfig`).
"""

from __future__ import annotations

import math
import statistics

import numpy as np
from scipy import stats

from ...config import DriftConfig

EXACT_TEST_MAX = 10**8
"""Most rows (tonight's and the baseline's) a rate is compared on with Fisher's exact test
(scipy's overflows near 10**10); more take the chi-square test of the 2x2 table."""


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-3 and v != 0 else f"{v:.3f}"
    return str(v)


def _result(name: str, kind: str, test: str, tonight, baseline, p_value: float | None, effect: float,
            effect_name: str, threshold: float, cfg: DriftConfig) -> dict:
    """One measure's comparison as a JSON-able dict; ``moved`` applies the thresholds."""
    p_ok = p_value is None or p_value < cfg.p_value
    moved = bool(p_ok and (effect > threshold if kind == "per_row" else effect >= threshold) and effect > 0)
    return {"measure": name, "kind": kind, "test": test, "tonight": tonight, "baseline": baseline,
            "p_value": p_value, "effect": effect, "effect_name": effect_name, "threshold": threshold,
            "moved": moved, "fails": moved and cfg.fails_on(name)}


def compare_rate(name: str, k1: int, n1: int, k0: int, n0: int, cfg: DriftConfig) -> dict | None:
    """Tonight's rate ``k1 / n1`` against the baseline's pooled ``k0 / n0`` (Fisher's exact
    test, two-sided, ``scipy.stats.fisher_exact``; the chi-square test beyond
    :data:`EXACT_TEST_MAX` rows in all); None when either has no rows. Counts are whole
    numbers with ``0 <= k <= n`` (a profile read is checked so:
    :func:`specrag_batch.run.drift.profile.check_profile`)."""
    if not n1 or not n0:
        return None
    table = [[k1, n1 - k1], [k0, n0 - k0]]
    test = "Fisher's exact test" if n1 + n0 <= EXACT_TEST_MAX else "chi-square test"
    if k1 * n0 == k0 * n1:
        p = 1.0
    elif n1 + n0 <= EXACT_TEST_MAX:
        p = float(stats.fisher_exact(table).pvalue)
    else:  # scipy's exact test overflows on such counts; the asymptotic one is exact enough there
        p = float(stats.chi2_contingency(np.array(table, dtype=float)).pvalue)
    r1, r0 = k1 / n1, k0 / n0
    return _result(name, "rate", test, {"rate": r1, "k": k1, "n": n1},
                   {"rate": r0, "k": k0, "n": n0}, p, abs(r1 - r0), "rate change",
                   cfg.effect_threshold(name, cfg.min_rate_change), cfg)


def compare_mix(name: str, tonight: dict[str, int], baseline: dict[str, int], cfg: DriftConfig) -> dict | None:
    """Tonight's answers per label against the baseline's pooled counts (chi-square test of
    independence, ``scipy.stats.chi2_contingency``; effect: Cramér's V,
    ``scipy.stats.contingency.association``); labels neither has are left out. None when either
    side has no answer; a mix of one label on both sides compares as unchanged."""
    labels = sorted(k for k in tonight.keys() | baseline.keys() if tonight.get(k, 0) + baseline.get(k, 0) > 0)
    t = [tonight.get(k, 0) for k in labels]
    b = [baseline.get(k, 0) for k in labels]
    if not sum(t) or not sum(b):
        return None
    shares = lambda c: {k: v / sum(c) for k, v in zip(labels, c)}  # noqa: E731
    if len(labels) < 2:
        p, v = 1.0, 0.0
    else:
        table = np.array([t, b])
        p = float(stats.chi2_contingency(table).pvalue)
        v = float(stats.contingency.association(table, method="cramer"))
    return _result(name, "mix", "chi-square test", {"shares": shares(t), "n": sum(t)},
                   {"shares": shares(b), "n": sum(b)}, p, v, "Cramér's V",
                   cfg.effect_threshold(name, cfg.min_distance), cfg)


def compare_distribution(name: str, tonight: dict, baselines: list[dict], cfg: DriftConfig) -> dict | None:
    """Tonight's sample against the baseline nights' samples joined (two-sample
    Kolmogorov-Smirnov test, ``scipy.stats.ks_2samp``); each side shown by its median. None
    when either side has no value."""
    pooled = [x for d in baselines for x in d["sample"]]
    if not tonight.get("sample") or not pooled:
        return None
    r = stats.ks_2samp(tonight["sample"], pooled)
    return _result(name, "distribution", "two-sample Kolmogorov-Smirnov test",
                   {"median": tonight["quantiles"]["0.5"], "n": tonight["n"]},
                   {"median": float(np.median(pooled)), "n": sum(d["n"] for d in baselines)},
                   float(r.pvalue), float(r.statistic), "KS statistic",
                   cfg.effect_threshold(name, cfg.min_distance), cfg)


def compare_per_row(name: str, tonight: float, baseline: list[float], cfg: DriftConfig) -> dict | None:
    """Tonight's per-row cost against the median of the baseline nights' values: the relative
    change (no p-value, one value per night). None without a baseline value or when the
    median is 0."""
    values = [v for v in baseline if v is not None and math.isfinite(v)]
    if tonight is None or not values or not (m := statistics.median(values)):
        return None
    test = f"relative change vs median of {len(values)} nights" if len(values) > 1 else "relative change vs 1 night"
    return _result(name, "per_row", test,
                   {"value": tonight}, {"value": m}, None, abs(tonight / m - 1), "relative change",
                   cfg.effect_threshold(name, cfg.max_relative_change), cfg)


def compare(tonight: dict, baselines: list[dict], cfg: DriftConfig) -> list[dict]:
    """Every measure of profile ``tonight`` against the baseline profiles ``baselines`` (the
    nights before it, each a :func:`specrag_batch.run.drift.profile.profile` dict), sorted by
    name; each a dict with ``measure``, ``kind``, ``test``, ``tonight``, ``baseline``,
    ``p_value`` (None for per-row costs), ``effect`` / ``effect_name`` / ``threshold``,
    ``moved`` and ``fails`` (moved and named by ``cfg.fail_on``). Empty without baselines."""
    if not baselines:
        return []
    out = []
    for name in sorted(set(tonight.get("rates", {})) | {n for b in baselines for n in b.get("rates", {})}):
        t = tonight.get("rates", {}).get(name)
        bs = [b["rates"][name] for b in baselines if name in b.get("rates", {})]
        if t is not None and bs:
            out.append(compare_rate(name, t["k"], t["n"], sum(b["k"] for b in bs), sum(b["n"] for b in bs), cfg))
    for family in sorted(set(tonight.get("shares", {})) | {f for b in baselines for f in b.get("shares", {})}):
        t = tonight.get("shares", {}).get(family)
        bs = [b["shares"][family] for b in baselines if family in b.get("shares", {})]
        if t is None or not bs:
            continue
        values = set(t["counts"]) | {v for b in bs for v in b["counts"]}
        for v in sorted(values):
            out.append(compare_rate(f"{family}:{v}", t["counts"].get(v, 0), t["n"],
                                    sum(b["counts"].get(v, 0) for b in bs), sum(b["n"] for b in bs), cfg))
    for name, t in sorted(tonight.get("mixes", {}).items()):
        pooled: dict[str, int] = {}
        for b in baselines:
            for k, v in b.get("mixes", {}).get(name, {}).items():
                pooled[k] = pooled.get(k, 0) + v
        out.append(compare_mix(name, t, pooled, cfg))
    for name, t in sorted(tonight.get("distributions", {}).items()):
        out.append(compare_distribution(name, t, [b["distributions"][name] for b in baselines
                                                  if name in b.get("distributions", {})], cfg))
    for name, v in sorted(tonight.get("per_row", {}).items()):
        out.append(compare_per_row(name, v, [b.get("per_row", {}).get(name) for b in baselines], cfg))
    return sorted((r for r in out if r is not None), key=lambda r: r["measure"])


def _cells(r: dict) -> list[str]:
    """One measure's comparison as table cells: measure, tonight, baseline, test, p-value, effect."""
    def side(x: dict) -> str:
        if "rate" in x:
            return f"{_fmt(x['rate'])} ({x['k']}/{x['n']})"
        if "shares" in x:
            return ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(x["shares"].items(), key=lambda kv: -kv[1]))
        if "median" in x:
            return f"median {_fmt(x['median'])} (n {x['n']})"
        return _fmt(x["value"])
    return [f"`{r['measure']}`", side(r["tonight"]), side(r["baseline"]), r["test"], _fmt(r["p_value"]),
            f"{r['effect_name']} {_fmt(r['effect'])} (threshold {_fmt(r['threshold'])})"]


def describe(r: dict) -> str:
    """One measure's comparison as a Markdown table row: measure, tonight, baseline, test,
    p-value, effect (six cells, as the table of :func:`markdown`)."""
    return "| " + " | ".join(" ".join(c.replace("|", "\\|").split()) for c in _cells(r)) + " |"


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun`` (an English count noun with a plain plural), "1 night", "3 nights"."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def heading(result: dict) -> str:
    """The heading of a night's comparison ``result`` (without ``##``): "Changes since the last
    night" (one baseline night), "Changes since the last 3 nights", or "No comparison:
    <reason>" when nothing was compared (no baseline night, status other than ``compared``)."""
    k = len(result.get("baseline") or [])
    if not k or result.get("status", "compared") != "compared":
        return f"No comparison: {_reason(result)}"
    return "Changes since the last night" if k == 1 else f"Changes since the last {k} nights"


def _reason(result: dict) -> str:
    """Why ``result`` compared nothing, in a few words."""
    if result.get("reason"):
        return result["reason"]
    return {"no_profile": "this night has no readable profile", "error": "the comparison failed"}.get(
        result.get("status"), "no baseline night")


def markdown(result: dict) -> str:
    """The section of a night's comparison ``result``
    (:func:`specrag_batch.run.drift.watch.night_drift`), headed by :func:`heading`
    ("Changes since the last night", "... the last K nights" or "No comparison: <reason>"); its status lines, then
    a table of only the measures that moved (a measure of ``drift.fail_on`` marked **fails the
    run** in its effect cell; none moved: one line saying so)."""
    compared = not heading(result).startswith("No comparison:")
    lines = [f"## {heading(result)}", ""]
    lines += [f"- {n}" for n in result.get("notes") or []]
    moved = [r for r in result.get("measures") or [] if r["moved"]]
    if compared:
        lines += ([""] if result.get("notes") else []) + [
            f"Baseline: {', '.join(result['baseline'])} (config hash `{result.get('config_hash')}`); "
            f"{counted(len(result['measures']), 'measure')} compared, {len(moved)} moved."]
    if moved:
        lines += ["", "| measure | tonight | baseline | test | p-value | effect |", "|---|---|---|---|---|---|"]
        lines += [describe({**r, "effect_name": f"**fails the run**: {r['effect_name']}"} if r["fails"] else r)
                  for r in moved]
    elif compared:
        lines += ["", "Nothing moved."]
    return "\n".join(lines) + "\n"
