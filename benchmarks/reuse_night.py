"""Reuse of rows answered on an earlier night (issue 52 item 5): a first night of N rows, then a
second night in which 80% of the rows repeat the first (same query id, query, task and
documents; the other 20% new), run with ``--reuse-from`` the first night's output; its wall
seconds against the first night's, whether every reused row equals the first night's row, and
the key-index lookup time at 1M keys.

The engine is **tests/fakes.py's FakeEngine** (the real tokenizer, canned drafts: no model
compute), run through ``python -m tests.fake_engine_cli run``: the product's CLI, Prefect flow,
storage, done markers, key indexes and manifest. The fake makes a computed row cost only the
product's own work (prompt building, tokenising, parsing, selection, writing), so the ratio is
the least a repeated row saves; with a real engine (3-10 s per row on these hosts) a computed
row costs far more and the ratio approaches the share of new rows. Rows are synthetic claims
(three short passages each), ``--shards`` shards per night; config
``configs/test-smollm2.yaml`` with ``sampling.strategy: random`` (no encoder).

The lookup: ``--keys`` keys in key index parts of 10,000 keys each (as many output shards of
10,000 rows, each with its done marker), looked up with the keys of one shard of tonight
(10,000 keys, 80% present), as :func:`specrag_batch.run.reuse.index.lookup` does for every shard:
it reads every part's key column and matches it (``pyarrow.compute.is_in``).

    .venv/bin/python benchmarks/reuse_night.py                 # 100,000 rows, 1M keys
    .venv/bin/python benchmarks/reuse_night.py --rows 2000 --keys 100000   # a quick check
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
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
CONFIG = ROOT / "configs" / "test-smollm2.yaml"
PER_PART = 10_000


def row(i: int) -> dict:
    """Row number ``i``: the same on every night."""
    return {"query_id": f"c{i}", "query": f"Claim {i}: the sea level at station {i % 977} rose by {i % 89} mm.",
            "task": "claim", "gold": [("SUPPORTS", "REFUTES")[i % 2]],
            "documents": [{"doc_id": f"d{i}-{j}", "title": "Sea level", "text": f"Station {i % 977} note {j}: "
                           f"{(i * 7 + j) % 50} mm over ten years."} for j in range(3)]}


def write_night(directory: Path, numbers: list[int], shards: int) -> None:
    directory.mkdir(parents=True)
    per = -(-len(numbers) // shards)
    for s in range(shards):
        part = numbers[s * per:(s + 1) * per]
        if part:
            pq.write_table(pa.Table.from_pylist([row(i) for i in part]), directory / f"part-{s:04d}.parquet")


def run_night(inputs: Path, out: Path, config: Path, reuse_from: Path | None = None) -> dict:
    """One ``specrag-batch run`` with the fake engine: wall seconds and the manifest's figures."""
    cmd = [sys.executable, "-m", "tests.fake_engine_cli", "run", "-i", str(inputs), "-o", str(out), "-c", str(config)]
    if reuse_from is not None:
        cmd += ["--reuse-from", str(reuse_from)]
    load = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "SPECRAG_PROGRESS": "0"}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr[-3000:]}")
    m = json.loads((out / "_manifest.json").read_text())
    return {"wall_s": round(wall, 2), "load_before": load, "rows_out": m["rows_out"],
            "rows_reused": m["reuse"]["rows"], "seconds_saved_estimate": m["reuse"]["seconds_saved"],
            "shard_seconds_sum": round(sum(s.get("seconds") or 0.0 for s in m["shards"]), 2)}


def same_answers(first: Path, second: Path) -> dict:
    """Reused rows of ``second`` against the rows of ``first`` of the same query id: every
    column but the run's own (``run_id``, ``source_file``, ``answer_source``, ``reused_*``)."""
    own = {"run_id", "source_file", "answer_source", "reused_from", "reused_answer_source"}
    earlier = {r["query_id"]: r for f in sorted(first.glob("*.parquet")) for r in pq.read_table(f).to_pylist()}
    reused = differing = 0
    for f in sorted(second.glob("*.parquet")):
        for r in pq.read_table(f).to_pylist():
            if r["answer_source"] == "reused":
                reused += 1
                e = earlier[r["query_id"]]
                differing += any(r[k] != e[k] for k in r if k not in own)
    return {"reused_rows": reused, "differing": differing}


def lookup_time(n_keys: int, work: Path) -> dict:
    """Seconds of one shard's lookup (10,000 keys, 80% present) in key index parts holding
    ``n_keys`` keys, and of writing those parts."""
    from specrag_batch.run import resume
    from specrag_batch.run.reuse.index import lookup, write_key_index

    src = work / "keys-source"
    keys = [hashlib.sha256(str(i).encode()).digest() for i in range(n_keys)]
    t0 = time.perf_counter()
    for p in range(0, n_keys, PER_PART):
        part = keys[p:p + PER_PART]
        shard = str(src / f"part-{p // PER_PART:05d}.parquet")
        records = [{"query_id": f"q{p + j}", "error": None, "flags": []} for j in range(len(part))]
        write_key_index(str(src), shard, part, records, run_id="r", config_hash="h", seconds_per_row=1.0)
        resume.mark_done(str(src), shard, "h", {}, "r", {"status": "ok"})
    write_s = time.perf_counter() - t0
    rng = random.Random(0)
    wanted = set(rng.sample(keys, 8_000)) | {hashlib.sha256(f"new{i}".encode()).digest() for i in range(2_000)}
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        hits = lookup([str(src)], wanted, "h")
        times.append(time.perf_counter() - t0)
    assert len(hits) == 8_000, len(hits)
    return {"keys": n_keys, "parts": -(-n_keys // PER_PART), "shard_keys": len(wanted), "hits": len(hits),
            "lookup_s": round(sorted(times)[1], 3), "write_parts_s": round(write_s, 2)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows per night")
    ap.add_argument("--shards", type=int, default=20, help="shards per night")
    ap.add_argument("--repeat", type=float, default=0.8, help="share of the second night's rows that repeat the first")
    ap.add_argument("--keys", type=int, default=1_000_000, help="keys in the index for the lookup timing (0: skip)")
    ap.add_argument("--work", type=Path, default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="reuse-night-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg.setdefault("sampling", {})["strategy"] = "random"
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    n = args.rows
    repeated = random.Random(1).sample(range(n), int(n * args.repeat))
    second = repeated + list(range(n, n + n - len(repeated)))
    random.Random(2).shuffle(second)
    write_night(work / "in1", list(range(n)), args.shards)
    write_night(work / "in2", second, args.shards)
    first = run_night(work / "in1", work / "out1", config)
    print(f"first night:  {first}", flush=True)
    again = run_night(work / "in2", work / "out2", config, reuse_from=work / "out1")
    print(f"second night: {again}", flush=True)
    result = {"rows": n, "shards": args.shards, "repeat": args.repeat, "first": first, "second": again,
              "ratio_wall": round(again["wall_s"] / first["wall_s"], 3),
              "ratio_shard_seconds": round(again["shard_seconds_sum"] / first["shard_seconds_sum"], 3),
              "answers": same_answers(work / "out1", work / "out2"),
              "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "node": platform.node(),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}}
    print(f"second / first night: wall {result['ratio_wall']}, shard seconds {result['ratio_shard_seconds']}; "
          f"reused rows {result['answers']['reused_rows']}, differing from the first night {result['answers']['differing']}")
    if args.keys:
        result["lookup"] = lookup_time(args.keys, work)
        print(f"lookup of {result['lookup']['shard_keys']} keys in {result['lookup']['keys']} keys "
              f"({result['lookup']['parts']} parts): {result['lookup']['lookup_s']} s")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
