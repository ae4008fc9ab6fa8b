"""Self-reflection variants with the consensus fast path off: which of ``selection.self_reflection``'s
variants separates right from wrong drafts (issue 10, item 2) when every draft is verified.

The decision benchmark now gives these figures post hoc, with no engine run of its own:
``benchmarks/decision_stats.py`` re-selects its cells' stored drafts with ``paper`` and
``contrast`` log ρ_SR (recomputed from each draft's log P(Yes), log P(No)) and chooses the
default on its tuning cells (``benchmarks/README.md``, "Self-reflection variants"). Its figures
cover only rows that reach the verifier; this script remains the way to measure with the fast
path off.

Runs the pipeline once (demo models, consensus fast path off so every draft is verified) on
tuning-split rows of PopQA and Climate-FEVER (rows ``--skip`` .. ``--skip + --n`` of each
dataset, inside the 20-row tuning split of ``decision.py``, which reports rows from index
20 on), keeps
each draft's log P(Yes) and log P(No), and compares, per variant:

* AUROC of log ρ_SR alone at telling right drafts (exact match / accuracy vs gold) from wrong
  ones, over valid verified drafts, with a bootstrap 95% interval;
* selection accuracy with ρ = ρ_draft·ρ_SC·ρ_SR and with ρ_SR alone, over rows.

    python benchmarks/self_reflection.py            # ~10-15 min on 2 cores

Prints the figures quoted in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import make_samples  # noqa: E402
from bench import to_rows  # noqa: E402
from decision import TUNING_ROWS  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from specrag_batch.config import load_config  # noqa: E402
from specrag_batch.engines import get_engine  # noqa: E402
from specrag_batch.evaluation import score_row  # noqa: E402
from specrag_batch.pipeline import RunInfo, StageTimer, process_rows  # noqa: E402
from specrag_batch.records import Flag  # noqa: E402
from specrag_batch.verification import self_reflection_score  # noqa: E402


def sr_value(x: dict, mode: str) -> float | None:
    """log ρ_SR of one output draft under ``mode`` (from its stored log P(Yes), log P(No)), by
    the product's :func:`~specrag_batch.verification.self_reflection_score`."""
    return self_reflection_score(x["logprob_yes"], x["logprob_no"], mode)


def auroc_ci(labels: list[bool], scores: list[float], reps: int = 2000, seed: int = 0):
    """AUROC and a percentile-bootstrap 95% interval (resampling drafts)."""
    y, s = np.asarray(labels), np.asarray(scores)
    if y.all() or not y.any():
        return float("nan"), [float("nan")] * 2
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(reps):
        i = rng.integers(0, len(y), len(y))
        if y[i].all() or not y[i].any():
            continue
        boots.append(roc_auc_score(y[i], s[i]))
    return float(roc_auc_score(y, s)), [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "bench.yaml")
    ap.add_argument("--datasets", default="popqa,climate_fever")
    ap.add_argument("--skip", type=int, default=8, help="first row used (inside the 20-row tuning split)")
    ap.add_argument("--n", type=int, default=12, help="rows per dataset")
    a = ap.parse_args()
    if a.skip + a.n > TUNING_ROWS:
        ap.error(f"--skip + --n must stay inside the {TUNING_ROWS}-row tuning split (decision.py reports the rows after it)")

    cfg = load_config(a.config, overrides={"selection.consensus_enabled": False})
    t0 = time.perf_counter()
    engines = {"drafter": get_engine(cfg.drafter, cfg.seed), "verifier": get_engine(cfg.verifier, cfg.seed)}
    recs = []
    for name in a.datasets.split(","):
        rows = list(make_samples.DATASETS[name](a.shared))[a.skip:a.skip + a.n]
        recs += process_rows(to_rows(rows), cfg, drafter=engines["drafter"], verifier=engines["verifier"],
                             info=RunInfo("sr-measure", name), timer=StageTimer())
    print(f"rows {len(recs)} ({a.datasets}, rows {a.skip}..{a.skip + a.n - 1} of each), "
          f"{time.perf_counter() - t0:.0f} s")

    drafts = [(r, x) for r in recs if r["error"] is None and r["gold"] for x in r["drafts"]
              if x["logprob_yes"] is not None]
    right = [bool(score_row(r["task"], x["answer"], r["gold"]).correct) for r, x in drafts]
    print(f"verified drafts {len(drafts)}: right {sum(right)}, wrong {len(right) - sum(right)}; "
          f"rows with a right draft {sum(any(bool(score_row(r['task'], x['answer'], r['gold']).correct) for x in r['drafts']) for r in recs if r['gold'])}")
    yes_missing = sum(Flag.SELF_REFLECTION_YES_NOT_IN_TOP_K in x["flags"] for _, x in drafts)
    no_missing = sum(Flag.SELF_REFLECTION_NO_NOT_IN_TOP_K in x["flags"] for _, x in drafts)
    print(f"Yes not in top-20: {yes_missing} drafts; No not in top-20: {no_missing} drafts")
    for mode in ("paper", "contrast"):
        sc = [sr_value(x, mode) for _, x in drafts]
        auc, ci = auroc_ci(right, sc)
        r_mean = np.mean([s for s, ok in zip(sc, right) if ok]) if any(right) else float("nan")
        w_mean = np.mean([s for s, ok in zip(sc, right) if not ok]) if not all(right) else float("nan")
        full, alone, n_rows = 0, 0, 0
        for r in recs:
            vd = [x for x in r["drafts"] if x["logprob_yes"] is not None and x["score_draft"] is not None
                  and x["score_self_consistency"] is not None]
            if r["error"] is not None or not r["gold"] or not vd:
                continue
            n_rows += 1
            best = max(vd, key=lambda x: x["score_draft"] + x["score_self_consistency"] + sr_value(x, mode))
            only = max(vd, key=lambda x: sr_value(x, mode))
            full += bool(score_row(r["task"], best["answer"], r["gold"]).correct)
            alone += bool(score_row(r["task"], only["answer"], r["gold"]).correct)
        print(f"{mode:8s} AUROC {auc:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]  mean log ρ_SR right {r_mean:.3f} "
              f"wrong {w_mean:.3f}  selection ρ_draft·ρ_SC·ρ_SR {full}/{n_rows}  ρ_SR alone {alone}/{n_rows}")
    base = 0
    n_rows = 0
    for r in recs:
        vd = [x for x in r["drafts"] if x["score_draft"] is not None and x["score_self_consistency"] is not None]
        if r["error"] is not None or not r["gold"] or not vd:
            continue
        n_rows += 1
        best = max(vd, key=lambda x: x["score_draft"] + x["score_self_consistency"])
        base += bool(score_row(r["task"], best["answer"], r["gold"]).correct)
    print(f"without ρ_SR: selection {base}/{n_rows}")


if __name__ == "__main__":
    main()
