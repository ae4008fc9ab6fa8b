"""Input and output URIs normalised once, and the input layouts a run plans shards from or
refuses (``storage.normalize_uri``, ``planning.check_layout``, ``planning.plan_shards``)."""

from __future__ import annotations

import pyarrow as pa
import pytest


def test_normalized_uris_and_layout_checks(tmp_path, monkeypatch):
    from specrag_batch.core import storage
    from specrag_batch.run.planning import InputLayoutError, check_layout, plan_shards, shard_output_uri

    monkeypatch.chdir(tmp_path)
    assert storage.normalize_uri("in/") == storage.normalize_uri("./in") == str(tmp_path / "in")
    assert storage.normalize_uri("file://" + str(tmp_path / "in") + "/") == str(tmp_path / "in")
    assert storage.normalize_uri("s3://b/q//") == "s3://b/q"
    t = pa.table({"query_id": ["a"], "query": ["q"], "task": ["qa"]})
    for rel in ("x/a.parquet", "y/a.parquet", "_temporary/0/part.parquet", ".hidden/b.parquet",
                "_SUCCESS", "notes.txt"):
        (tmp_path / "in" / rel).parent.mkdir(parents=True, exist_ok=True)
        import pyarrow.parquet as pq
        pq.write_table(t, tmp_path / "in" / rel) if rel.endswith(".parquet") else \
            (tmp_path / "in" / rel).write_text("x")
    inp, out = storage.normalize_uri("in/"), storage.normalize_uri("out")
    shards, skipped = plan_shards(inp)
    assert [s[len(inp) + 1:] for s in shards] == ["x/a.parquet", "y/a.parquet"]
    assert sorted((s["input"][len(inp) + 1:], s["reason"]) for s in skipped) == [
        (".hidden/b.parquet", "inside a hidden or temporary directory (. or _)"),
        ("_temporary/0/part.parquet", "inside a hidden or temporary directory (. or _)"),
        ("notes.txt", "not a .parquet file")]
    names = [shard_output_uri(inp, s, out).rsplit("/", 1)[-1] for s in shards]
    assert names == ["x__a.parquet", "y__a.parquet"]  # the same base name in two folders
    check_layout(inp, out, shards)
    with pytest.raises(InputLayoutError, match="overlap"):
        check_layout(inp, inp + "/out", shards)
    with pytest.raises(InputLayoutError, match="overlap"):
        check_layout(inp + "/x", inp, shards)
    pq.write_table(t, tmp_path / "in" / "x__a.parquet")
    shards, _ = plan_shards(inp)
    with pytest.raises(InputLayoutError, match=r"x/a.parquet' and .*x__a.parquet' would both be written"):
        check_layout(inp, out, shards)
