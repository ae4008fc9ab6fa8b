"""benchmarks/shard_overhead.py: both layouts hold the same 800 distinct rows, its config turns
off the encoder and nothing else, and the overhead figures follow from the runs' seconds."""

from __future__ import annotations

import pyarrow.parquet as pq
import yaml

import shard_overhead


def test_layouts_hold_the_same_distinct_rows(tmp_path):
    rows = shard_overhead.demo_rows()
    ids = rows.column("query_id").to_pylist()
    assert len(ids) == shard_overhead.ROWS == len(set(ids))
    seen = {}
    for name, (shards, per) in shard_overhead.LAYOUTS.items():
        shard_overhead.write_layout(rows, tmp_path / name, shards, per)
        files = sorted((tmp_path / name).glob("*.parquet"))
        assert len(files) == shards and all(pq.read_metadata(f).num_rows == per for f in files)
        seen[name] = [q for f in files for q in pq.read_table(f).column("query_id").to_pylist()]
    assert seen["400x2"] == seen["8x100"] == ids


def test_config_differs_from_the_test_config_only_in_the_sampling_strategy(tmp_path):
    base = yaml.safe_load(shard_overhead.CONFIG.read_text())
    mine = yaml.safe_load(shard_overhead.write_config(tmp_path).read_text())
    assert mine.pop("sampling") == {**base.pop("sampling", {}), "strategy": "random"}
    assert mine == base


def test_overhead_per_shard_is_the_wall_difference_over_the_shard_difference():
    run = lambda wall, inside: {"wall_s": wall, "shard_seconds_sum": inside, "load_before": 0, "shards": 0,  # noqa: E731
                                "rows_out": 800, "failed_shards": 0}
    data = {"rows": 800, "runs": {"400x2": [run(60.0, 30.0), run(70.0, 40.0)], "8x100": [run(20.8, 5.6)] * 2},
            "median_wall_s": {"400x2": 65.0, "8x100": 20.8}, "overhead_per_shard_s": round((65.0 - 20.8) / 392, 3),
            "host": {"cpus": 2, "machine": "x", "date": "d"}}
    assert data["overhead_per_shard_s"] == 0.113 and shard_overhead._inside(data) == 0.075
    assert "**Overhead per shard: 0.113 s**" in shard_overhead.tables(data)
