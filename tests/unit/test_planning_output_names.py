"""Output names a file system cannot hold are refused when the run is planned, not after a
shard was computed (found trying the README on a fresh clone: a legal 215-byte input name, or
a deep directory whose flattened name passes 255 bytes, failed at the write with ENAMETOOLONG,
after every row of the shard had been answered, and again on every re-run)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.run import resume
from specrag_batch.core import storage
from specrag_batch.run.planning import InputLayoutError, check_layout, plan_shards, shard_output_uri

TABLE = pa.table({"query_id": ["q"], "query": ["Who?"], "task": ["qa"]})


def _shard(root, rel):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(TABLE, path)
    return plan_shards(str(root))[0]


def test_longest_name_the_marker_allows_is_written_and_marked(tmp_path):
    """250 bytes + ``.json`` = 255: the data object, its done marker and their temporary files
    (short names, not the target's name plus 38 characters) all fit."""
    name = "ü" * 121 + ".parquet"  # 242 + 8 = 250 bytes in UTF-8
    assert len(name.encode()) == 250
    shards = _shard(tmp_path / "in", name)
    out = str(tmp_path / "out")
    check_layout(str(tmp_path / "in"), out, shards)
    target = shard_output_uri(str(tmp_path / "in"), shards[0], out)
    storage.write_parquet_atomic(target, TABLE)
    resume.mark_done(out, target, "hash", {"size": 1, "tag": "t"}, "run", {"status": "ok"})
    assert resume.completed_shard(out, target, "hash", {"size": 1, "tag": "t"}) is not None


@pytest.mark.parametrize("rel", [
    "x" * 243 + ".parquet",                                    # 251 bytes: marker would be 256
    "/".join(f"level-{i:02d}" for i in range(30)) + "/part-0.parquet",  # flattened: 284 bytes
])
def test_name_too_long_for_the_output_is_refused_at_planning(tmp_path, rel):
    shards = _shard(tmp_path / "in", rel)
    with pytest.raises(InputLayoutError, match=r"too long.*255 bytes"):
        check_layout(str(tmp_path / "in"), str(tmp_path / "out"), shards)


def test_s3_key_too_long_is_refused_at_planning():
    """S3 keys hold at most 1024 bytes: the longest the run writes is the draft marker
    ``<output>/_drafts/_shards/<name>.json``."""
    prefix = "s3://bucket/" + "p" * 900
    shard = "s3://bucket/in/" + "y" * 100 + ".parquet"
    with pytest.raises(InputLayoutError, match="1024 bytes"):
        check_layout("s3://bucket/in", prefix, [shard])
    check_layout("s3://bucket/in", "s3://bucket/" + "p" * 800, [shard])
