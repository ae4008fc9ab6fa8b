"""Scale-out benchmark: the same job on every execution topology, side by side in one run.

Variants (each in a fresh process, so every one pays its own engine loads):

* ``threads-fused``           single process, one engine per model (the default);
* ``threads-disaggregated``   single process, drafting tasks -> draft Parquet -> verification;
* ``ray-fused``               local Ray with ``--workers`` CPUs, one shard task per CPU, each
                              Ray worker loads its own engines; Ray's thread default
                              (OMP_NUM_THREADS = num_cpus = 1 per task);
* ``ray-fused-same-threads``  the same with every engine using the driver's thread count
                              (bit-identical results, oversubscribed cores);
* ``ray-disaggregated``       local Ray, drafting and verification tasks.

Prints wall seconds, rows/s, the ratio to ``threads-fused``, engine seconds summed over
workers, and how many output rows are identical to ``threads-fused`` (answer, rationale,
scores, flags). On a 2-core machine there is no spare hardware to scale onto: the figures
show the overhead of the distributed path (worker start, per-worker engine loads, task
hand-off), not a speed-up; run it on a multi-core or GPU cluster to see that.

    python benchmarks/scaleout.py --config configs/test-smollm2.yaml --shards 6 --rows 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = ("threads-fused", "threads-disaggregated", "ray-fused", "ray-fused-same-threads",
            "ray-disaggregated")


def execution(variant: str, workers: int) -> dict:
    """ExecutionConfig mapping of a variant (a local Ray started in-process for ray-*)."""
    if variant.startswith("threads"):
        return {"stages": variant.split("-", 1)[1]}
    res: dict = {"num_cpus": 1}
    if variant == "ray-fused-same-threads":
        import torch

        res["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": str(torch.get_num_threads())}}
    return {"task_runner": "ray", "stages": "fused" if "fused" in variant else "disaggregated",
            "ray_init_kwargs": {"num_cpus": workers, "include_dashboard": False},
            "shard_resources": res, "drafter_resources": res, "verifier_resources": res}


def make_inputs(dst: Path, shards: int, rows: int) -> int:
    """``shards`` Parquet files of ``rows`` real rows each (bundled PopQA and Climate-FEVER)."""
    import pyarrow.parquet as pq

    dst.mkdir(parents=True, exist_ok=True)
    n = 0
    for i in range(shards):
        name = ("popqa", "climate_fever")[i % 2]
        t = pq.read_table(ROOT / "samples" / "demo" / f"{name}.parquet").slice((i // 2) * rows, rows)
        pq.write_table(t, dst / f"part-{i:03d}.parquet")
        n += t.num_rows
    return n


def run_variant(variant: str, inp: str, out: str, config: str, workers: int) -> dict:
    """Child process: one run, returns figures (wall seconds include engine loads)."""
    from flows.speculative_rag import run_flow
    from specrag_batch.config import load_config

    t0 = time.perf_counter()
    m = run_flow(inp, out, load_config(config).model_dump(mode="json"),
                 execution=execution(variant, workers))
    wall = time.perf_counter() - t0
    return {"variant": variant, "wall_seconds": round(wall, 2), "rows": m["rows_out"],
            "failed_shards": m["failed_shards"], "stage_seconds": m["stage_seconds"],
            "engine_seconds": round(sum(e["seconds"] for e in m["engines"].values()), 2),
            "workers": sorted({s.get("worker") for s in m["shards"]} | {s.get("draft_worker") for s in m["shards"]} - {None})}


def rows_of(prefix: Path) -> dict[str, dict]:
    import pyarrow.parquet as pq

    keep = ("answer", "rationale", "score", "score_draft", "score_self_consistency",
            "score_self_reflection", "flags", "error")
    out = {}
    for f in sorted(prefix.glob("*.parquet")):
        for r in pq.read_table(f).to_pylist():
            out[r["query_id"]] = {k: r[k] for k in keep}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "test-smollm2.yaml"))
    ap.add_argument("--shards", type=int, default=6)
    ap.add_argument("--rows", type=int, default=2, help="rows per shard")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="Ray CPUs = workers")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("--child", nargs=4, metavar=("VARIANT", "IN", "OUT", "RESULT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        variant, inp, out, result = a.child
        Path(result).write_text(json.dumps(run_variant(variant, inp, out, a.config, a.workers)))
        return

    work = Path(tempfile.mkdtemp(prefix="specrag-scaleout-"))
    n = make_inputs(work / "in", a.shards, a.rows)
    env = {**os.environ, "SPECRAG_PROGRESS": "0", "PREFECT_HOME": str(work / "prefect-home"),
           "RAY_USAGE_STATS_ENABLED": "0"}
    results = []
    for v in a.variants.split(","):
        res_file = work / f"{v}.json"
        print(f"running {v} ...", flush=True)
        subprocess.run([sys.executable, __file__, "--config", a.config, "--workers", str(a.workers),
                        "--child", v, str(work / "in"), str(work / v), str(res_file)],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        results.append(json.loads(res_file.read_text()))
    base = rows_of(work / results[0]["variant"])
    print(f"\n{a.shards} shards x {a.rows} rows = {n} rows, config {Path(a.config).name}, "
          f"{a.workers} Ray CPUs, {os.cpu_count()} cores\n")
    hdr = f"{'variant':26s} {'wall s':>8s} {'rows/s':>7s} {'x base':>7s} {'engine s':>9s} {'procs':>5s} {'same rows':>9s}"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        mine = rows_of(work / r["variant"])
        r["identical_rows"] = sum(mine.get(k) == v for k, v in base.items())
        r["identical_answers"] = sum(mine.get(k, {}).get("answer") == v["answer"] for k, v in base.items())
        r["ratio_to_base"] = round(r["wall_seconds"] / results[0]["wall_seconds"], 2)
        print(f"{r['variant']:26s} {r['wall_seconds']:8.1f} {r['rows'] / r['wall_seconds']:7.3f} "
              f"{r['ratio_to_base']:7.2f} {r['engine_seconds']:9.1f} {len(r['workers']):5d} "
              f"{r['identical_rows']:>4d}/{len(base)}")
    if a.out:
        Path(a.out).write_text(json.dumps({"rows": n, "shards": a.shards, "workers": a.workers,
                                           "cores": os.cpu_count(), "config": a.config,
                                           "results": results}, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
