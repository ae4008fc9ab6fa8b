"""Orchestration overhead per shard (issue 38 item 4): the same 800 rows run as 400 shards of 2
rows and as 8 shards of 100 rows, and the seconds each shard costs beyond its rows' work.

Both layouts hold the same rows (the bundled demo sample, ``samples/demo``, cycled to 800 rows
with the cycle number appended to each ``query_id``), so the rows' work (retrieval given,
subsets, prompt building, parsing, selection) is the same in both. The config is
``configs/test-smollm2.yaml`` with ``sampling.strategy: random``: random subsets need no
encoder, whose time per row (``benchmarks/sampling_scale.md``) would swamp the difference. The engine is **tests/fakes.py's FakeEngine** (the real
tokenizer, canned drafts: no model compute), run through ``python -m tests.fake_engine_cli
run``: the product's CLI, Prefect flow and task runner, storage, done markers and manifest. So
the difference between the layouts is what a shard costs on its own: listing, a Prefect task
run, reading and writing a Parquet file, its done marker and manifest entry, the per-chunk
calls (one encoder call and one drafter call per chunk instead of one per 100 rows).

    overhead per shard = (wall(400 x 2) - wall(8 x 100)) / (400 - 8)

from the wall seconds of the two ``specrag-batch run`` processes (interpreter and Prefect start
included in both, so they cancel). Each layout runs ``--repeats`` times, alternating, and the
median is used; the 1-minute load average before each run is printed (the 2 cores may be shared).

    .venv/bin/python benchmarks/shard_overhead.py          # writes benchmarks/shard_overhead.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "shard_overhead.json"
TABLES = HERE / "shard_overhead.md"
ROWS = 800
LAYOUTS = {"400x2": (400, 2), "8x100": (8, 100)}
CONFIG = ROOT / "configs" / "test-smollm2.yaml"


def demo_rows(n: int = ROWS) -> pa.Table:
    """``n`` rows cycled from ``samples/demo`` (every file, in name order), the cycle number
    appended to each ``query_id`` (``<id>#<cycle>``) so that every row is its own."""
    files = sorted((ROOT / "samples" / "demo").glob("*.parquet"))
    base = pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")
    parts, cycle = [], 0
    while sum(len(p) for p in parts) < n:
        ids = [f"{q}#{cycle}" for q in base.column("query_id").to_pylist()]
        parts.append(base.set_column(base.schema.get_field_index("query_id"), "query_id", pa.array(ids)))
        cycle += 1
    return pa.concat_tables(parts).slice(0, n)


def write_layout(rows: pa.Table, directory: Path, shards: int, per_shard: int) -> None:
    """``shards`` Parquet files of ``per_shard`` consecutive rows each."""
    directory.mkdir(parents=True)
    for i in range(shards):
        pq.write_table(rows.slice(i * per_shard, per_shard), directory / f"part-{i:04d}.parquet")


def write_config(work: Path) -> Path:
    """:data:`CONFIG` with ``sampling.strategy: random`` (no encoder), written under ``work``."""
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg.setdefault("sampling", {})["strategy"] = "random"
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_once(inputs: Path, out: Path, config: Path) -> dict:
    """One ``specrag-batch run`` with the fake engine; wall seconds and the manifest's figures."""
    load = round(os.getloadavg()[0], 2)
    env = {**os.environ, "SPECRAG_PROGRESS": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tests.fake_engine_cli", "run", "-i", str(inputs), "-o", str(out),
                           "-c", str(config)], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr[-3000:]}")
    m = json.loads((out / "_manifest.json").read_text())
    shard_s = [s.get("seconds") or 0.0 for s in m["shards"]]
    return {"wall_s": round(wall, 2), "load_before": load, "rows_out": m["rows_out"], "shards": len(m["shards"]),
            "failed_shards": m.get("failed_shards"), "manifest_seconds": m.get("seconds"),
            "shard_seconds_sum": round(sum(shard_s), 2)}


def measure(repeats: int, work: Path) -> dict:
    """Both layouts, alternating, ``repeats`` times each."""
    work.mkdir(parents=True, exist_ok=True)
    rows = demo_rows()
    config = write_config(work)
    for name, (shards, per) in LAYOUTS.items():
        write_layout(rows, work / f"in-{name}", shards, per)
    runs: dict[str, list] = {name: [] for name in LAYOUTS}
    for r in range(repeats):
        for name in (LAYOUTS if r % 2 == 0 else reversed(list(LAYOUTS))):
            res = run_once(work / f"in-{name}", work / f"out-{name}-{r}", config)
            print(f"[{name} #{r}] {res}", flush=True)
            runs[name].append(res)
    med = {name: statistics.median(x["wall_s"] for x in v) for name, v in runs.items()}
    (sa, _), (sb, _) = LAYOUTS["400x2"], LAYOUTS["8x100"]
    return {"rows": ROWS, "runs": runs, "median_wall_s": med,
            "overhead_per_shard_s": round((med["400x2"] - med["8x100"]) / (sa - sb), 3),
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}}


def _inside(data: dict) -> float:
    """Seconds per shard spent inside the shard tasks beyond the rows' work: the median summed
    shard seconds of the two layouts, their difference over the shards' difference."""
    med = {name: statistics.median(x["shard_seconds_sum"] for x in v) for name, v in data["runs"].items()}
    (sa, _), (sb, _) = LAYOUTS["400x2"], LAYOUTS["8x100"]
    return round((med["400x2"] - med["8x100"]) / (sa - sb), 3)


def tables(data: dict) -> str:
    """The markdown page of :data:`RESULTS`."""
    h = data["host"]
    lines = ["# Orchestration overhead per shard (`benchmarks/shard_overhead.py`)", "",
             "Generated from `shard_overhead.json`. The same "
             f"{data['rows']} rows (`samples/demo` cycled) as 400 shards of 2 rows and as 8 shards of 100, "
             "`specrag-batch run` with **tests/fakes.py's FakeEngine** (real tokenizer and encoder, no model "
             f"compute), `configs/test-smollm2.yaml` with `sampling.strategy: random` (no encoder). Host: {h['cpus']} cores ({h['machine']}), {h['date']}.", "",
             "| layout | run | wall s | load before | shards | rows out | failed shards | sum of shard seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for name, runs in data["runs"].items():
        for i, r in enumerate(runs):
            lines.append(f"| {name} | {i} | {r['wall_s']} | {r['load_before']} | {r['shards']} | {r['rows_out']} | "
                         f"{r['failed_shards']} | {r['shard_seconds_sum']} |")
    med = data["median_wall_s"]
    lines += ["", f"Median wall: 400 x 2 rows {med['400x2']} s, 8 x 100 rows {med['8x100']} s. "
              f"**Overhead per shard: {data['overhead_per_shard_s']} s** "
              "((wall(400 x 2) - wall(8 x 100)) / 392), of which "
              f"{_inside(data)} s inside the shard tasks (reading and writing a shard, its done marker and "
              "per-chunk calls: the difference of the summed shard seconds over 392), the rest scheduling "
              "and collecting the task runs.", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--work", default=None, help="scratch directory (default: a new temporary one)")
    a = p.parse_args()
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="shard-overhead-"))
    data = measure(a.repeats, work)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    TABLES.write_text(tables(data))
    print(tables(data))


if __name__ == "__main__":
    main()
