"""benchmarks/mode_per_task.py (issue 49 item 3): the paired figures per dataset and pooled
from two finished runs, and the verdict against the issue's bar. The whole command on a slice:
benchmarks/README.md, "A mode per task"."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

import mode_per_task


def _run(path, correct: dict[str, list[bool]], seconds: dict[str, float], mode: str) -> None:
    """A finished run as the product leaves it: output shards and a manifest naming them."""
    path.mkdir(parents=True)
    shards = []
    for name, marks in correct.items():
        out = path / name
        pq.write_table(pa.Table.from_pylist([{"query_id": f"{name}:{i}", "correct": c, "error": None, "mode": mode}
                                             for i, c in enumerate(marks)]), out)
        shards.append({"input": f"/in/{name}", "output": str(out), "status": "ok", "seconds": seconds[name]})
    (path / "_manifest.json").write_text(json.dumps({"shards": shards}))


def test_per_dataset_and_pooled_figures_and_the_verdict(tmp_path):
    names = {f"{ds}-{k:03d}.parquet": ds for ds in ("climate_fever", "popqa") for k in range(3)}
    tuned = {n: [True] * 10 if ds == "climate_fever" else [True] * 5 + [False] * 5 for n, ds in names.items()}
    std = {n: [True] * 5 + [False] * 5 for n in names}
    _run(tmp_path / "tuned", tuned, {n: 1.0 if ds == "climate_fever" else 2.0 for n, ds in names.items()}, "speculative")
    _run(tmp_path / "standard", std, {n: 2.0 for n in names}, "standard")
    res = mode_per_task.compare(tmp_path / "tuned", tmp_path / "standard", ["climate_fever", "popqa"], 500)
    assert res["climate_fever"]["diff"] == 0.5 and res["climate_fever"]["seconds_ratio"] == 0.5
    assert res["popqa"]["diff"] == 0 and res["popqa"]["ci95"] == [0, 0] and res["popqa"]["seconds_ratio"] == 1.0
    assert res["pooled"]["n"] == 60 and res["pooled"]["seconds_ratio"] == 0.75 and res["pooled"]["shard_pairs"] == 6
    assert mode_per_task.verdict(res, 2.0) == "meets the bar: not worse on any dataset and cheaper pooled"
    res["popqa"]["ci95"] = [-0.05, 0.01]
    assert mode_per_task.verdict(res, 2.0) == "misses: popqa: interval reaches -5.0 points (-3.0 past the -2 bar)"
