"""A mode per task on the product's own data (issue 49 item 3), in one command:

1. ``specrag-batch tune`` on the decision benchmark's tuning split (rows 0..TUNING_ROWS-1 of each
   dataset, never reported: ``decision.TUNING_ROWS``) chooses the mode per task by its rule and
   writes ``<out>/tune/tuned.yaml``;
2. that config and Standard RAG (the same config, ``--mode standard``) run over the reported rows
   (``decision.reported_rows``: ``--rows`` per dataset from ``decision.REPORT_START``, inside the
   benchmark reserve), in shards of ``--shard-rows`` rows of one dataset, both resumable;
3. per dataset and pooled (datasets as strata): the paired accuracy difference with its bootstrap
   95% interval, McNemar's exact p, and the seconds ratio over shard pairs with its interval
   (``specrag_batch.core.stats``); ``<out>/results.json`` and ``<out>/results.md``, and the verdict:
   not worse on any dataset (interval above -``--margin`` points) and cheaper pooled (ratio
   interval below 1), or by how much it misses.

Every step resumes (the runs are the product's resumable runs). The full measurement (404 reported
rows with configs/bench.yaml's models) takes hours on 2 cores; ``--rows 2 --tuning-rows 10
--min-rows 2`` is a slice that proves the command in minutes::

    SPECRAG_PROGRESS=0 .venv/bin/python benchmarks/mode_per_task.py --config configs/bench.yaml --out bench-out/mode-per-task
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import decision  # noqa: E402
from specrag_batch.core import stats  # noqa: E402
from specrag_batch.core.datasets import BENCHMARK_DATASETS, INPUT_SCHEMA  # noqa: E402


def write_shards(rows_by_ds: dict[str, list[dict]], out: Path, shard_rows: int) -> None:
    """``<out>/<dataset>-<k>.parquet``, ``shard_rows`` rows each (an existing file is kept: resume)."""
    out.mkdir(parents=True, exist_ok=True)
    for ds, rows in rows_by_ds.items():
        for k, start in enumerate(range(0, len(rows), shard_rows)):
            path = out / f"{ds}-{k:03d}.parquet"
            if not path.exists():
                pq.write_table(pa.Table.from_pylist(rows[start:start + shard_rows], schema=INPUT_SCHEMA), path)


def product(cli: list[str], *args: str) -> None:
    """Run a product command; its failure ends this script with the command's exit code."""
    r = subprocess.run([*cli, *args], cwd=ROOT)
    if r.returncode:
        sys.exit(f"{' '.join(args[:1])} exited {r.returncode}")


def read_run(out: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """(query_id -> row, shard input name -> manifest shard entry) of a finished run."""
    m = json.loads((out / "_manifest.json").read_text())
    rows = {r["query_id"]: r for s in m["shards"] if s["status"] == "ok"
            for r in pq.read_table(s["output"]).select(["query_id", "correct", "error", "mode"]).to_pylist()}
    return rows, {Path(s["input"]).name: s for s in m["shards"] if s["status"] == "ok"}


def compare(tuned: Path, standard: Path, datasets: list[str], reps: int) -> dict:
    """Per dataset and ``pooled``: n, the two accuracies, the paired difference [95% CI],
    McNemar p, the seconds ratio tuned / standard [95% CI] over shard pairs, the modes used."""
    (a_rows, a_sh), (b_rows, b_sh) = read_run(tuned), read_run(standard)
    graded = [q for q, r in a_rows.items() if r["correct"] is not None and (b_rows.get(q) or {}).get("correct") is not None]
    ds_of = lambda name: name.rsplit("-", 1)[0]  # noqa: E731
    shard_of = {q: name for name in a_sh for q in pq.read_table(a_sh[name]["output"]).column("query_id").to_pylist()}
    out = {}
    for ds in [*datasets, "pooled"]:
        ids = [q for q in graded if ds == "pooled" or ds_of(shard_of[q]) == ds]
        units = [n for n in a_sh if n in b_sh and (ds == "pooled" or ds_of(n) == ds)]
        a, b = [bool(a_rows[q]["correct"]) for q in ids], [bool(b_rows[q]["correct"]) for q in ids]
        strata = [ds_of(shard_of[q]) for q in ids] if ds == "pooled" else None
        ratio = stats.ratio_bootstrap([a_sh[n]["seconds"] for n in units], [b_sh[n]["seconds"] for n in units], reps=reps,
                                      strata=[ds_of(n) for n in units] if ds == "pooled" else None)
        out[ds] = {**stats.paired_bootstrap(a, b, reps=reps, strata=strata),
                   "accuracy_tuned": sum(a) / len(a) if a else None, "accuracy_standard": sum(b) / len(b) if b else None,
                   "mcnemar_p": stats.mcnemar_exact(a, b)["p"], "seconds_ratio": ratio["ratio"],
                   "seconds_ratio_ci95": ratio["ci95"], "shard_pairs": ratio["n"],
                   "modes": sorted({a_rows[q]["mode"] for q in ids})}
    return out


def verdict(res: dict, margin: float) -> str:
    """The issue's bar: every dataset's interval above -margin points, the pooled ratio's below 1."""
    worse = {ds: r["ci95"][0] for ds, r in res.items() if ds != "pooled" and not r["ci95"][0] > -margin / 100}
    hi = res["pooled"]["seconds_ratio_ci95"][1]
    parts = [f"{ds}: interval reaches {100 * lo:+.1f} points ({100 * lo + margin:+.1f} past the -{margin:g} bar)"
             for ds, lo in worse.items()]
    if not hi < 1:
        parts.append(f"pooled seconds ratio interval reaches {hi:.2f} (not below 1)")
    return "meets the bar: not worse on any dataset and cheaper pooled" if not parts else "misses: " + "; ".join(parts)


def markdown(res: dict, v: str, tuned_cfg: str) -> str:
    pct = lambda x: "–" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"  # noqa: E731
    lines = [f"Tuned config: `{tuned_cfg}`", "",
             "| dataset | n | modes | tuned % | standard % | diff, points [95% CI] | McNemar p | s ratio [95% CI] |",
             "|---|---|---|---|---|---|---|---|"]
    for ds, r in res.items():
        lines.append(f"| {ds} | {r['n']} | {', '.join(r['modes'])} | {pct(r['accuracy_tuned'])} | {pct(r['accuracy_standard'])} | "
                     f"{pct(r['diff'])} [{pct(r['ci95'][0])}, {pct(r['ci95'][1])}] | {r['mcnemar_p']:.2g} | "
                     f"{r['seconds_ratio']:.2f} [{r['seconds_ratio_ci95'][0]:.2f}, {r['seconds_ratio_ci95'][1]:.2f}] |")
    return "\n".join([*lines, "", v, ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="the run config (configs/bench.yaml)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--datasets", default=",".join(BENCHMARK_DATASETS))
    ap.add_argument("--rows", type=int, default=100, help="reported rows per dataset (fewer where the file has fewer)")
    ap.add_argument("--tuning-rows", type=int, default=decision.TUNING_ROWS, help="tuning rows per dataset (rows 0..)")
    ap.add_argument("--shard-rows", type=int, default=10)
    ap.add_argument("--margin", type=float, default=2.0)
    ap.add_argument("--min-rows", type=int, default=10, help="tune's --min-rows")
    ap.add_argument("--reps", type=int, default=stats.REPS)
    ap.add_argument("--cli", default=f"{sys.executable} -m specrag_batch.cli.commands",
                    help="the product's command (the tests: python -m tests.fake_engine_cli)")
    a = ap.parse_args(argv)
    if a.tuning_rows > decision.TUNING_ROWS:
        ap.error(f"--tuning-rows {a.tuning_rows}: the tuning split is rows 0..{decision.TUNING_ROWS - 1}")
    datasets, cli = a.datasets.split(","), a.cli.split()
    tuning = {ds: list(decision.CONVERTERS[ds](a.shared))[:a.tuning_rows] for ds in datasets}
    write_shards(tuning, a.out / "tuning_sample", a.tuning_rows)
    product(cli, "tune", str(a.out / "tuning_sample"), "-o", str(a.out / "tune"), "-c", a.config,
            "--margin", str(a.margin), "--min-rows", str(a.min_rows))
    write_shards({ds: decision.reported_rows(ds, a.shared, a.rows) for ds in datasets}, a.out / "reported", a.shard_rows)
    tuned_cfg = str(a.out / "tune" / "tuned.yaml")
    product(cli, "run", "-i", str(a.out / "reported"), "-o", str(a.out / "runs" / "tuned"), "-c", tuned_cfg)
    product(cli, "run", "-i", str(a.out / "reported"), "-o", str(a.out / "runs" / "standard"), "-c", a.config,
            "--mode", "standard")
    res = compare(a.out / "runs" / "tuned", a.out / "runs" / "standard", datasets, a.reps)
    v = verdict(res, a.margin)
    (a.out / "results.json").write_text(json.dumps({"results": res, "verdict": v}, indent=2))
    (a.out / "results.md").write_text(markdown(res, v, tuned_cfg))
    print(markdown(res, v, tuned_cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
