"""The check that refuses to replace a file no run wrote, on S3 (moto's server) with keys a
listing returns oddly."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_foreign_output_check_on_s3_with_odd_keys(s3_bucket):
    """The same check against a real S3 server (moto, as s3fs's tests), one non-recursive
    listing of the output prefix: keys with spaces, ``[1]``, ``*``, ``?``, ``#`` and ``%20`` are
    names, never patterns; a key in a deeper "folder" is no shard output; a marker makes a key
    the pipeline's."""
    from specrag_batch.run import resume
    from specrag_batch.core import storage
    from specrag_batch.run.planning import InputLayoutError, check_foreign_outputs

    inp, out = f"{s3_bucket}/in put [1]", f"{s3_bucket}/out #%20 [x]"
    shards = [f"{inp}/a*b? [1].parquet", f"{inp}/sub/c%20.parquet"]
    check_foreign_outputs(inp, out, shards)  # nothing there yet
    storage.write_bytes_atomic(f"{out}/deeper/sub__c%20.parquet", b"not a shard output")
    storage.write_bytes_atomic(f"{out}/a*b [1].parquet", b"a glob would match a*b? [1]")
    check_foreign_outputs(inp, out, shards)
    storage.write_bytes_atomic(f"{out}/sub__c%20.parquet", b"another tool's")
    with pytest.raises(InputLayoutError, match=r"already holds 's3://.*/sub__c%20\.parquet'"):
        check_foreign_outputs(inp, out, shards)
    resume.mark_done(out, f"{out}/sub__c%20.parquet", "h", {}, "r", {"status": "ok"})
    check_foreign_outputs(inp, out, shards)


def test_an_output_bucket_that_is_not_there_is_named_before_the_run(s3_bucket, tmp_path):
    """``run -o s3://no-such-bucket/out`` is refused naming the bucket and that it is the
    output's, not only with S3's "The specified bucket does not exist"."""
    from specrag_batch.run import orchestration
    from specrag_batch.core import storage

    from ..conftest import sample_rows

    storage.write_parquet_atomic(str(tmp_path / "in" / "a.parquet"), sample_rows("popqa", 1))
    with pytest.raises(FileNotFoundError, match="output: bucket 'no-such-bucket' does not exist"):
        orchestration.run_batch(str(tmp_path / "in"), "s3://no-such-bucket/out")
    storage.require_bucket(f"{s3_bucket}/out", "output")  # the fixture's bucket is there
