"""Before/after table for issue 10 (scores and metrics): the same reported rows as the
2026-11-29 run (``benchmarks/results.json``, n = 16 per dataset, code of that day), answered
again by today's code with ``python benchmarks/bench.py --only-main --out <after.json>``.

The 2026-11-29 run kept accuracies, not each row's outcome, so *before vs after* is a
comparison of two proportions on the same 16 rows (no paired test is possible for it); the
paired figures here are *within* the after run: Speculative - Standard RAG on the same rows,
with a paired bootstrap 95% interval and McNemar's exact p (``decision_stats``). Pooled rows
are the 64 rows of the four datasets.

When ``--runs`` holds decision-benchmark cells whose reported rows overlap (Climate-FEVER and
HotpotQA rows 40-55 are in both), each overlapping row's outcome in the after run is compared
with the cell's: the two runs share code paths but not batch composition (README "Batch
invariance"), so agreement is a consistency check, not a requirement.

    python benchmarks/before_after.py --after /work/bench/before_after.json [--before benchmarks/results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import decision_stats as ds  # noqa: E402

MODES = ("speculative", "standard")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def table(before: dict, after: dict) -> str:
    """Markdown: per dataset and pooled, each mode's accuracy before (n, %) and after (%, 95%
    bootstrap interval), and after's paired Speculative - Standard difference (points, paired
    bootstrap 95% interval, McNemar exact p with the discordant counts b/c).

    ``before``/``after``: the ``experiments.main`` dicts of two ``bench.py`` results files;
    ``after`` must hold per-row outcomes (``rows``, written by ``--only-main``). Rows whose
    outcome is None (ungraded) are left out of the after figures."""
    lines = ["| dataset | n | Speculative before | Speculative after [95%] | Standard before | "
             "Standard after [95%] | after: Spec - Std [paired 95%], McNemar p (b/c) |",
             "|---|---|---|---|---|---|---|"]
    pooled: dict[str, list[bool]] = {m: [] for m in MODES}
    strata: list[str] = []
    pooled_before: dict[str, list[float]] = {m: [] for m in MODES}
    for name, entry in after.items():
        rows = entry["rows"]
        ids = [q for q in rows["speculative"] if rows["speculative"][q] is not None
               and rows["standard"].get(q) is not None]
        spec = [bool(rows["speculative"][q]) for q in ids]
        std = [bool(rows["standard"][q]) for q in ids]
        pooled["speculative"] += spec
        pooled["standard"] += std
        strata += [name] * len(ids)
        cells = [name, str(len(ids))]
        for mode, vals in (("speculative", spec), ("standard", std)):
            b = before.get(name, {}).get(mode, {})
            pooled_before[mode].append(b.get("accuracy"))
            lo, hi = ds.bootstrap_ci(vals)
            cells += [f"{_pct(b.get('accuracy'))} (n = {b.get('n', 'n/a')})",
                      f"{_pct(sum(vals) / len(vals) if vals else None)} [{_pct(lo)}, {_pct(hi)}]"]
        cells.append(_paired(spec, std))
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["pooled", str(len(pooled["speculative"]))]
    for mode in MODES:
        b = [x for x in pooled_before[mode] if x is not None]
        vals = pooled[mode]
        lo, hi = ds.bootstrap_ci(vals, strata=strata)
        cells += [f"{_pct(sum(b) / len(b) if b else None)} (mean of {len(b)})",
                  f"{_pct(sum(vals) / len(vals) if vals else None)} [{_pct(lo)}, {_pct(hi)}]"]
    cells.append(_paired(pooled["speculative"], pooled["standard"], strata))
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def agreement(after: dict, runs: Path) -> str:
    """Markdown lines: per dataset and mode, how many of the after run's rows that also sit in
    the decision-benchmark cell ``<runs>/<dataset>/<mode>/`` (finished shards' Parquet) got the
    same correctness there (a consistency check; batch composition differs between the runs)."""
    import polars as pl

    out = []
    for name, entry in after.items():
        for mode in MODES:
            cell = runs / name / mode
            files = sorted(cell.glob("*.parquet")) if cell.is_dir() else []
            if not files:
                continue
            there = dict(pl.concat([pl.read_parquet(f, columns=["query_id", "correct"]) for f in files]).iter_rows())
            here = entry["rows"][mode]
            both = [q for q in here if q in there]
            if both:
                same = sum(1 for q in both if bool(here[q]) == bool(there[q]))
                out.append(f"- {name} {mode}: {same} of {len(both)} shared rows have the same correctness "
                           f"as in `{cell}`")
    return "\n".join(out)


def _paired(a: list[bool], b: list[bool], strata: list[str] | None = None) -> str:
    if not a:
        return "n/a"
    d = ds.paired_bootstrap(a, b, strata=strata)
    m = ds.mcnemar_exact(a, b)
    return (f"{100 * d['diff']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}], "
            f"p = {m['p']:.3g} ({m['b']}/{m['c']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, default=Path(__file__).resolve().parent / "results.json")
    ap.add_argument("--after", type=Path, required=True)
    ap.add_argument("--runs", type=Path, default=Path(__file__).resolve().parent / "runs")
    a = ap.parse_args()
    before = json.loads(a.before.read_text())["experiments"]["main"]
    after = json.loads(a.after.read_text())["experiments"]["main"]
    print(table(before, after))
    print()
    print(agreement(after, a.runs))


if __name__ == "__main__":
    main()
