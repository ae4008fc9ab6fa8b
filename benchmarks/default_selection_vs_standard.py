"""Speculative RAG re-selected with the product's default score terms against Standard RAG on
the same rows: the decision benchmark's cells ran the paper's log ρ (``configs/bench.yaml``
keeps ``selection.use_self_consistency: true``), and the default since 2026-12-04 leaves log
ρ_SC out. Each row's stored drafts are selected again with ``use_sc=False``
(:func:`decision_stats.variant_rows`, the product's ``selection.select``; consensus fast-path
rows keep their answer) and paired with the row's Standard RAG outcome: accuracy of both, the
paired difference with its stratified bootstrap 95% interval (rows resampled within each
dataset) and McNemar's exact p, per dataset and pooled.

Usage (restore a run's cells first, e.g. the one-machine headline)::

    python benchmarks/decision.py --config configs/bench.yaml --arms main --machine d2c7dd01bb0b \\
        --runs /tmp/om --analyse-only --out /tmp/om-out
    python benchmarks/default_selection_vs_standard.py --runs /tmp/om
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decision_stats as ds  # noqa: E402

DATASETS = ("climate_fever", "hotpotqa", "nq_open", "popqa", "arc_challenge")


def _rows(cell: Path) -> list[dict]:
    """The output (or input) rows of a run directory's ``part-*.parquet`` shards, in shard order."""
    return [r for f in sorted(cell.glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()]


def main(argv: list[str] | None = None) -> None:
    """Print one line per dataset with both cells and the pooled paired comparison."""
    from specrag_batch.config import load_config

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, required=True, help="runs directory holding <dataset>/{input,speculative,standard}")
    p.add_argument("--config", default="configs/bench.yaml", help="the cells' config (claim labels)")
    a = p.parse_args(argv)
    labels = load_config(a.config).claim_labels
    spec_ok, std_ok, strata = [], [], []
    for d in DATASETS:
        if not (a.runs / d / "speculative").is_dir():
            continue
        choices = {r["query_id"]: r.get("choices") for r in _rows(a.runs / d / "input")}
        units = ds.variant_rows(_rows(a.runs / d / "speculative"), choices, labels, seed=0,
                                variants={"paper": {}, "default": {"use_sc": False}})
        std = {r["query_id"]: ok for r, ok, _ in ds.graded_rows(_rows(a.runs / d / "standard"), choices, labels)}
        x = [(u["default"], std[u["query_id"]]) for u in units if u["query_id"] in std]
        spec_ok += [s for s, _ in x]
        std_ok += [t for _, t in x]
        strata += [d] * len(x)
        print(_line(d, [s for s, _ in x], [t for _, t in x]))
    print(_line("pooled", spec_ok, std_ok, strata))


def _line(name: str, spec_ok: list[bool], std_ok: list[bool], strata: list[str] | None = None) -> str:
    """``<name>: n, both accuracies (%), the paired difference in points [bootstrap 95%], McNemar p (a/b)``."""
    r, m, n = ds.paired_bootstrap(spec_ok, std_ok, strata=strata), ds.mcnemar_exact(spec_ok, std_ok), len(spec_ok)
    return (f"{name}: n = {n}, default selection {100 * sum(spec_ok) / n:.1f}%, standard {100 * sum(std_ok) / n:.1f}%, "
            f"difference {100 * r['diff']:+.1f} [{100 * r['ci95'][0]:+.1f}, {100 * r['ci95'][1]:+.1f}], "
            f"McNemar p = {m['p']:.2g} ({m['b']}/{m['c']})")


if __name__ == "__main__":
    main()
