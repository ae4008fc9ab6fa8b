"""The key index of issue 52 (:mod:`specrag_batch.run.reuse.index`): which rows it holds (the
reuse rule), and which parts a lookup trusts: written by the run its shard's done marker
names, under this config; a part of a night still running, of a shard recomputed since, of
another config, or damaged is not used (damaged: one warning line, once per process)."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from specrag_batch.run import resume
from specrag_batch.core import storage
from specrag_batch.core.records import Flag
from specrag_batch.run.reuse import index
from specrag_batch.run.reuse.index import fetch_rows, key_index_uri, lookup, reusable, write_key_index

K = [bytes([i]) * 32 for i in range(4)]


def _records():
    return [{"query_id": "a", "error": None, "flags": []},
            {"query_id": "b", "error": "row 1: field 'query': null", "flags": []},
            {"query_id": "c", "error": None, "flags": [Flag.FALLBACK_FAILED]},
            {"query_id": "d", "error": None, "flags": ["low_confidence"], "answer_source": "fallback_standard"}]


def test_the_rule_error_and_fallback_failed_rows_are_not_reusable():
    assert [reusable(r) for r in _records()] == [True, False, False, True]


@pytest.fixture
def source(tmp_path):
    """An earlier output: one shard of 4 rows, its key index and its done marker (run r1)."""
    out = str(tmp_path / "night1")
    shard = storage.join(out, "a.parquet")
    storage.write_parquet_atomic(shard, pa.Table.from_pylist(_records()))
    write_key_index(out, shard, K, _records(), run_id="r1", config_hash="h", seconds_per_row=2.5)
    resume.mark_done(out, shard, "h", {"size": 1, "tag": "x"}, "r1", {"status": "ok"})
    index._warned.clear()
    return out, shard


def test_a_lookup_finds_the_reusable_rows_and_fetches_them(source):
    out, shard = source
    hits = lookup([out], set(K), "h")
    assert set(hits) == {K[0], K[3]} and hits[K[3]].row == 3 and hits[K[0]].seconds_per_row == 2.5
    assert {k: r["query_id"] for k, r in fetch_rows(hits).items()} == {K[0]: "a", K[3]: "d"}


def test_a_part_of_another_config_or_run_or_without_marker_is_not_trusted(source, caplog):
    out, shard = source
    with caplog.at_level(logging.WARNING):
        assert lookup([out], set(K), "other") == {}
    assert len(caplog.records) == 1 and "not 'other'" in caplog.records[0].getMessage()
    resume.mark_done(out, shard, "h", {"size": 1, "tag": "x"}, "r2", {"status": "ok"})  # recomputed by r2
    assert lookup([out], set(K), "h") == {}
    resume._remove(resume.marker_uri(out, shard))  # a night still running: no marker yet
    assert lookup([out], set(K), "h") == {}


def test_a_damaged_part_is_one_warning_line(source, caplog):
    out, shard = source
    storage.write_bytes_atomic(key_index_uri(out, shard), b"\x00garbage")
    with caplog.at_level(logging.WARNING):
        assert lookup([out], set(K), "h") == {} and lookup([out], set(K), "h") == {}
    assert len(caplog.records) == 1 and "is not a key index" in caplog.records[0].getMessage()


def test_a_replaced_output_gives_no_rows(source, caplog):
    out, shard = source
    hits = lookup([out], set(K), "h")
    storage.write_parquet_atomic(shard, pa.Table.from_pylist(_records()[::-1]))  # same count, other rows
    with caplog.at_level(logging.WARNING):
        assert fetch_rows(hits) == {}
    assert "does not hold the rows its key index names" in caplog.text


def test_a_missing_source_finds_nothing(tmp_path):
    assert lookup([str(tmp_path / "nowhere")], set(K), "h") == {}
