"""Speculative RAG re-selected with the product's default score terms against Standard RAG on
the same rows: the decision benchmark's cells ran the paper's log ρ (``configs/bench.yaml``
keeps ``selection.use_self_consistency`` and ``use_self_reflection`` true), while the default
leaves log ρ_SC out (since 2026-12-04) and log ρ_SR too (later that day: log ρ = log ρ_draft,
``--terms draft_score_only``, the default here; ``--terms without_self_consistency`` is the
earlier default). Each row's stored drafts are selected again (:func:`decision_stats.variant_rows`,
the product's ``selection.select``; consensus fast-path rows keep their answer) and paired with
the row's Standard RAG outcome: accuracy of both, the paired difference with its stratified
bootstrap 95% interval (rows resampled within each dataset) and McNemar's exact p, per dataset
and pooled. ``--arm`` names the speculative cell (default ``speculative``; e.g. a tuned
drafter's ``speculative-tuned-qwen``); ``--versus`` the cell it is paired with (default
``standard``; a speculative cell, e.g. the untuned ``speculative``, is selected again with the
same terms, so a tuned drafter and its untuned base compare under the default selection). The
cells must have drafted in one round
(``sampling.adaptive`` false, as ``configs/bench.yaml``): an adaptive cell's rows that stopped
early hold only the first round's drafts.

Usage (restore a run's cells first, e.g. the one-machine headline)::

    python benchmarks/decision.py --config configs/bench.yaml --arms main --machine d2c7dd01bb0b \\
        --runs /tmp/om --analyse-only --out /tmp/om-out
    python benchmarks/default_selection_vs_standard.py --runs /tmp/om
    python benchmarks/default_selection_vs_standard.py --runs /tmp/tq --arm speculative-tuned-qwen
    python benchmarks/default_selection_vs_standard.py --runs /tmp/tq --arm speculative-tuned-qwen \\
        --versus speculative
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


TERMS = {"draft_score_only": {"use_sc": False, "use_sr": False}, "without_self_consistency": {"use_sc": False}}
"""``--terms``: the default selection's score terms as :func:`decision_stats.reselect_index`
switches (log ρ_draft alone, the default since 2026-12-04; or without log ρ_SC only, the default
before it)."""


def main(argv: list[str] | None = None) -> None:
    """Print one line per dataset with both cells and the pooled paired comparison."""
    from specrag_batch.config import load_config

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, required=True, help="runs directory holding <dataset>/{input,<arm>,<versus>}")
    p.add_argument("--config", default="configs/bench.yaml", help="the cells' config (claim labels)")
    p.add_argument("--arm", default="speculative", help="the speculative cell to select again (default speculative)")
    p.add_argument("--versus", default="standard", help="the cell paired with it (default standard; a "
                   "speculative cell is selected again with the same terms)")
    p.add_argument("--terms", choices=tuple(TERMS), default="draft_score_only",
                   help="the default selection's terms (default draft_score_only: log ρ_draft alone)")
    a = p.parse_args(argv)
    labels = load_config(a.config).claim_labels
    spec_ok, std_ok, paper_ok, strata = [], [], [], []
    for d in DATASETS:
        if not (a.runs / d / a.arm).is_dir() or not (a.runs / d / a.versus).is_dir():
            continue
        choices = {r["query_id"]: r.get("choices") for r in _rows(a.runs / d / "input")}
        rows, other = _rows(a.runs / d / a.arm), _rows(a.runs / d / a.versus)
        for arm, got in ((a.arm, rows), (a.versus, other)):
            if any(r.get("draft_rounds") is not None for r in got):
                raise SystemExit(f"{d}/{arm}: drafted adaptively (draft_rounds set); its early-stopped rows hold "
                                 "only the first round's drafts, so it cannot be selected again as a one-round run")
        units = ds.variant_rows(rows, choices, labels, seed=0, variants={"paper": {}, "default": TERMS[a.terms]})
        # rows without drafts (Standard RAG) keep their own outcome
        std = {u["query_id"]: u["default"] for u in ds.variant_rows(other, choices, labels, seed=0,
                                                                     variants={"default": TERMS[a.terms]})}
        x = [(u["default"], std[u["query_id"]], u["paper"]) for u in units if u["query_id"] in std]
        spec_ok += [s for s, _, _ in x]
        std_ok += [t for _, t, _ in x]
        paper_ok += [q for _, _, q in x]
        strata += [d] * len(x)
        print(_line(d, [s for s, _, _ in x], [t for _, t, _ in x], paper=[q for _, _, q in x], versus=a.versus))
    if spec_ok:
        print(_line("pooled", spec_ok, std_ok, strata, paper=paper_ok, versus=a.versus))
    else:
        print(f"no dataset of {a.runs} holds both {a.arm} and {a.versus} cells")


def _line(name: str, spec_ok: list[bool], std_ok: list[bool], strata: list[str] | None = None,
          paper: list[bool] | None = None, versus: str = "standard") -> str:
    """``<name>: n, the default selection's, the paper's and the ``versus`` cell's accuracy (%),
    the paired difference default - versus in points [bootstrap 95%], McNemar p (a/b)``."""
    r, m, n = ds.paired_bootstrap(spec_ok, std_ok, strata=strata), ds.mcnemar_exact(spec_ok, std_ok), len(spec_ok)
    return (f"{name}: n = {n}, default selection {100 * sum(spec_ok) / n:.1f}%"
            + (f" (paper's log ρ {100 * sum(paper) / n:.1f}%)" if paper else "")
            + f", {versus} {100 * sum(std_ok) / n:.1f}%, "
            f"difference {100 * r['diff']:+.1f} [{100 * r['ci95'][0]:+.1f}, {100 * r['ci95'][1]:+.1f}], "
            f"McNemar p = {m['p']:.2g} ({m['b']}/{m['c']})")


if __name__ == "__main__":
    main()
