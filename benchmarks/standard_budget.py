"""Standard RAG given room to answer: its rows cut at the token budget generated again with a
larger budget, merged into the Standard RAG cell, and compared with the Speculative RAG cell on
the same rows (issue 39 item 4, the Climate-FEVER decision at n = 400).

Why. With ``verifier.max_tokens: 96`` (configs/bench.yaml) the verifier-sized model writing Standard
RAG's answer over all N documents is often cut before its ``Answer:`` line (flag
``truncated_at_max_tokens``): such a row has no label and counts as wrong, which handicaps the
baseline rather than measuring it.

How. Answers are greedy (``verifier.temperature: 0``), so a row that ended before the budget
writes the same text under a larger one: only the rows flagged ``truncated_at_max_tokens`` are
generated again (``specrag-batch run --mode standard`` with a config whose ``verifier.max_tokens``
is larger; the product's own run), and every other row keeps its answer. (vLLM on CPU is not
batch-invariant, so a row generated in another batch may differ in a token; those rows are
generated again whole.) Output: accuracy of Standard RAG at the cell's budget and at the larger
one, the rows still cut, and the Speculative RAG cell against both (paired bootstrap 95% interval,
McNemar's exact p; :mod:`decision_stats`). Markdown on stdout and in ``<out>.md``, figures in
``<out>.json``.

    python benchmarks/standard_budget.py --standard benchmarks/runs/climate_fever_400/standard \\
        --rerun /tmp/std256/out --speculative benchmarks/runs/climate_fever_400/speculative-default-one-round \\
        --out benchmarks/decision/claims-400-3be8a119d336/standard_budget
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import decision_stats as ds  # noqa: E402

CUT = "truncated_at_max_tokens"


def read_rows(directory: Path) -> dict[str, dict]:
    """query_id -> output record over ``directory/part-*.parquet``.

    Raises:
        SystemExit: no output shard there."""
    import pyarrow.parquet as pq

    files = sorted(directory.glob("part-*.parquet"))
    if not files:
        raise SystemExit(f"{directory}: no part-*.parquet")
    return {r["query_id"]: r for f in files for r in pq.read_table(f).to_pylist()}


def merge(standard: dict[str, dict], rerun: dict[str, dict]) -> dict[str, dict]:
    """The Standard RAG cell with each row it cut at its budget replaced by the rerun's row.

    Raises:
        SystemExit: a cut row has no rerun row, or the rerun holds a row the cell did not cut."""
    cut = {q for q, r in standard.items() if CUT in (r.get("flags") or [])}
    if missing := sorted(cut - set(rerun)):
        raise SystemExit(f"{len(missing)} cut rows have no rerun row, e.g. {missing[0]}")
    if extra := sorted(set(rerun) - cut):
        raise SystemExit(f"{len(extra)} rerun rows were not cut in the Standard RAG cell, e.g. {extra[0]}")
    return {q: rerun.get(q, r) for q, r in standard.items()}


def figures(standard: dict, merged: dict, speculative: dict, reps: int = ds.REPS) -> dict:
    """Accuracy and paired comparisons over the rows all three hold (``correct`` of each record;
    an error or a missing label is wrong)."""
    ids = sorted(set(standard) & set(merged) & set(speculative))
    s96, s_big, spec = ([bool(x[q].get("correct")) for q in ids] for x in (standard, merged, speculative))

    def cmp(a, b):
        return {**ds.paired_bootstrap(a, b, reps=reps), "mcnemar": ds.mcnemar_exact(a, b)}
    return {"n": len(ids), "cut_at_budget": sum(CUT in (standard[q].get("flags") or []) for q in ids),
            "still_cut": sum(CUT in (merged[q].get("flags") or []) for q in ids),
            "accuracy": {"standard": sum(s96) / len(ids), "standard_larger_budget": sum(s_big) / len(ids),
                         "speculative": sum(spec) / len(ids)},
            "larger_budget_vs_standard": cmp(s_big, s96), "speculative_vs_standard": cmp(spec, s96),
            "speculative_vs_larger_budget": cmp(spec, s_big)}


def table(f: dict, budget: int | None) -> str:
    """Markdown of :func:`figures`."""
    b = f"max_tokens {budget}" if budget else "the larger budget"
    return "\n".join([
        f"Rows: {f['n']}; Standard RAG cut at its budget: {f['cut_at_budget']}, generated again with {b}: "
        f"{f['still_cut']} still cut.", "",
        "| | accuracy % | difference (points) [95%], McNemar p (b/c) |", "|---|---|---|",
        f"| Standard RAG (the cell's budget) | {ds._pct(f['accuracy']['standard'])} | |",
        f"| Standard RAG ({b}) | {ds._pct(f['accuracy']['standard_larger_budget'])} | "
        f"{ds._diff(f['larger_budget_vs_standard'])} vs the cell's budget |",
        f"| Speculative RAG | {ds._pct(f['accuracy']['speculative'])} | {ds._diff(f['speculative_vs_standard'])} "
        f"vs the cell's budget; {ds._diff(f['speculative_vs_larger_budget'])} vs {b} |", ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--standard", required=True, type=Path, help="the Standard RAG cell's output directory")
    ap.add_argument("--rerun", required=True, type=Path, help="output of the cut rows generated again")
    ap.add_argument("--speculative", required=True, type=Path, help="the Speculative RAG cell's output directory")
    ap.add_argument("--budget", type=int, default=None, help="the rerun's verifier.max_tokens (for the table)")
    ap.add_argument("--out", required=True, type=Path, help="path stem of the .md and .json written")
    ap.add_argument("--reps", type=int, default=ds.REPS, help="bootstrap resamples")
    a = ap.parse_args(argv)
    standard = read_rows(a.standard)
    f = figures(standard, merge(standard, read_rows(a.rerun)), read_rows(a.speculative), a.reps)
    md = table(f, a.budget)
    print(md)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".md").write_text(md)
    a.out.with_suffix(".json").write_text(json.dumps({"budget": a.budget, **f}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
