"""Did the drafts see the evidence? Gold-passage coverage of the drafted subsets (NQ-open).

NQ-open rows in the decision benchmark carry one gold passage (doc id ``<query_id>:gold``)
and nine distractors, the gold passages of other questions (``specrag_batch.core.datasets.nq_open_passages``).
Multi-perspective sampling (paper §3.2) gives each draft a subset of k documents, so a row can
only be answered from its evidence when some subset holds the gold passage. For each cell named
this prints, over the cell's rows:

* rows with the gold passage in at least one subset, and the histogram of subsets holding it;
* drafts whose subset holds it, and how many of those (and of the others) are right
  (``decision_stats.draft_correct``: the benchmark's own grading);
* selected answers right on rows with / without a covered draft.

It reads finished cells only (``benchmarks/runs/<dataset>/<arm>/*.parquet``), computes no
model call and writes nothing:

    python benchmarks/evidence_coverage.py                       # nq_open: speculative, sampling_cover
    python benchmarks/evidence_coverage.py --arms speculative,adaptive
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import decision_stats  # noqa: E402


def coverage(rows: list[dict]) -> dict:
    """Gold-passage coverage figures of one cell's output rows (dicts of the product's output
    schema with ``drafts``; rows with an error or no drafts count as uncovered).

    Returns ``{"rows", "rows_covered", "subsets_with_gold": {count: rows}, "drafts",
    "drafts_covered", "right_covered", "right_uncovered", "selected_right_covered_rows",
    "selected_right_uncovered_rows", "uncovered_rows"}`` (counts, not shares)."""
    out = Counter()
    hist: Counter = Counter()
    for r in rows:
        gold = f"{r['query_id']}:gold"
        drafts = r.get("drafts") or []
        right = decision_stats.draft_correct(r, None, []) if drafts else []
        has = [gold in (d.get("doc_ids") or []) for d in drafts]
        hist[sum(has)] += 1
        out["rows"] += 1
        out["drafts"] += len(drafts)
        covered = any(has)
        out["rows_covered"] += covered
        out["selected_right_covered_rows" if covered else "selected_right_uncovered_rows"] += bool(r.get("correct"))
        out["uncovered_rows"] += not covered
        for h, c in zip(has, right):
            out["drafts_covered"] += h
            out["right_covered" if h else "right_uncovered"] += bool(c)
    return {**{k: out[k] for k in ("rows", "rows_covered", "drafts", "drafts_covered", "right_covered",
                                   "right_uncovered", "selected_right_covered_rows",
                                   "selected_right_uncovered_rows", "uncovered_rows")},
            "subsets_with_gold": dict(sorted(hist.items()))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", default=str(ROOT / "benchmarks" / "runs"))
    p.add_argument("--dataset", default="nq_open")
    p.add_argument("--arms", default="speculative,sampling_cover")
    a = p.parse_args(argv)
    import polars as pl

    for arm in a.arms.split(","):
        files = sorted((Path(a.runs) / a.dataset / arm).glob("part-*.parquet"))
        if not files:
            print(f"{a.dataset}/{arm}: no finished shards")
            continue
        rows = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed").to_dicts()
        c = coverage(rows)
        nd_un = c["drafts"] - c["drafts_covered"]
        print(f"{a.dataset}/{arm}: {c['rows']} rows; gold passage in some subset on {c['rows_covered']} "
              f"(subsets holding it per row: {c['subsets_with_gold']}); drafts seeing it "
              f"{c['drafts_covered']} of {c['drafts']}, right {c['right_covered']} of {c['drafts_covered']}; "
              f"other drafts right {c['right_uncovered']} of {nd_un}; selected answer right on "
              f"{c['selected_right_covered_rows']} of {c['rows_covered']} covered rows, "
              f"{c['selected_right_uncovered_rows']} of {c['uncovered_rows']} uncovered")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
