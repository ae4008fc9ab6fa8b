"""benchmarks/reuse_night.py: a row number is the same row on every night, the nights' shards
hold the rows given, and the lookup timing finds exactly the keys it planted (on 20,000 keys)."""

from __future__ import annotations

import pyarrow.parquet as pq

import reuse_night


def test_a_row_number_is_the_same_row_every_night_and_rows_differ():
    assert reuse_night.row(7) == reuse_night.row(7) and reuse_night.row(7) != reuse_night.row(8)


def test_a_night_holds_the_rows_given_in_its_shards(tmp_path):
    reuse_night.write_night(tmp_path / "n", [5, 3, 9, 1, 2], 2)
    files = sorted((tmp_path / "n").glob("*.parquet"))
    assert [q for f in files for q in pq.read_table(f).column("query_id").to_pylist()] == ["c5", "c3", "c9", "c1", "c2"]


def test_the_lookup_timing_finds_the_planted_keys(tmp_path):
    got = reuse_night.lookup_time(20_000, tmp_path)
    assert got["hits"] == 8_000 and got["parts"] == 2 and got["lookup_s"] > 0
