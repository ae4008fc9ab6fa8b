"""Odd shard names on the moto S3 server: the listing/naming/read/write round trip without an
engine, and one end-to-end flow run (real vLLM, SmolLM2) over such names, with shards written
by Polars and pandas, a decoy ``ns`` and console-made directory markers (zero-byte keys ending
in ``/``), which are not files: neither listed as skipped nor failing."""

import json

import boto3
import pandas as pd
import polars as pl
import pytest

from specrag_batch.core import storage
from specrag_batch.run.manifest import MANIFEST
from specrag_batch.run.planning import plan_shards

from ..conftest import sample_rows, small_config
from ..unit.test_planning_shard_names import DECOY, check_round_trip, expected_output_name, write_odd_inputs

MARKERS = ["sub dir/", "empty folder/"]


def put_markers(bucket_uri: str, prefix: str) -> None:
    """What the S3 console's "Create folder" does: a zero-byte object whose key ends in ``/``."""
    s3 = boto3.client("s3", endpoint_url=storage.storage_options(bucket_uri)["client_kwargs"]["endpoint_url"])
    for m in MARKERS:
        s3.put_object(Bucket=bucket_uri[len("s3://"):], Key=f"{prefix}/{m}", Body=b"")


def test_s3_odd_names_round_trip_and_directory_markers(s3_bucket):
    inp, out = f"{s3_bucket}/in", f"{s3_bucket}/out"
    write_odd_inputs(inp)
    put_markers(s3_bucket, "in")
    fs, path = storage.filesystem(inp)
    assert fs.find(path)  # the markers are there ...
    assert not [f for f in storage.list_files(inp) if f.endswith("/")]  # ... but not files
    check_round_trip(inp, out)


def test_s3_version_mark_in_a_key_is_skipped_not_misread(s3_bucket):
    """s3fs reads ``?versionId=`` in a path as an object version, so such a key cannot be
    read as itself: it is reported as skipped, never read as the object before the mark."""
    inp = f"{s3_bucket}/in"
    write_odd_inputs(inp)
    s3 = boto3.client("s3", endpoint_url=storage.storage_options(inp)["client_kwargs"]["endpoint_url"])
    s3.put_object(Bucket=s3_bucket[5:], Key="in/ns?versionId=1.parquet", Body=b"x")
    shards, skipped = plan_shards(inp)
    assert f"{inp}/ns?versionId=1.parquet" not in shards
    assert {"input": f"{inp}/ns?versionId=1.parquet",
            "reason": "key contains '?versionId=', which the S3 client reads as an object version"} in skipped


@pytest.mark.slow
def test_flow_over_odd_s3_names_polars_and_pandas_shards(prefect_harness, s3_bucket):
    """One real run: every input row comes out exactly once, under its own shard's output,
    the decoy is the only skipped file, and no shard is ``ok`` for rows it did not write."""
    from flows.speculative_rag import speculative_rag_flow

    inp, out = f"{s3_bucket}/in", f"{s3_bucket}/out"
    fs, _ = storage.filesystem(inp)
    base = sample_rows("popqa", 6)
    names = {"ns::part-0.parquet": base.slice(0, 2), "ns::part-1.parquet": base.slice(2, 2),
             "sub dir/ünï #?%*[x].parquet": base.slice(4, 2)}
    # Polars (string columns as large_string, lists as large_list) and pandas with a category
    # column (dictionary<string>), written straight to the bucket by the tools themselves
    with fs.open(storage.split_uri(f"{inp}/ns::part-0.parquet")[1], "wb") as f:
        pl.from_arrow(names["ns::part-0.parquet"]).write_parquet(f)
    df = names["ns::part-1.parquet"].to_pandas()
    df["task"] = df["task"].astype("category")
    with fs.open(storage.split_uri(f"{inp}/ns::part-1.parquet")[1], "wb") as f:
        df.to_parquet(f, engine="pyarrow")
    storage.write_parquet_atomic(f"{inp}/sub dir/ünï #?%*[x].parquet", names["sub dir/ünï #?%*[x].parquet"])
    storage.write_parquet_atomic(f"{inp}/{DECOY}", sample_rows("climate_fever", 1))
    put_markers(s3_bucket, "in")

    cfg = small_config(**{"sampling.num_drafts": 2, "drafter.max_tokens": 24, "verifier.max_tokens": 24})
    m = speculative_rag_flow(inp, out, cfg.model_dump(mode="json"))

    assert m["failed_shards"] == 0 and m["rows_in"] == m["rows_out"] == 6
    assert m["skipped_files"] == [{"input": f"{inp}/{DECOY}", "reason": "not a .parquet file"}]
    by_input = {s["input"]: s for s in m["shards"]}
    assert set(by_input) == {f"{inp}/{n}" for n in names}
    for name, table in names.items():
        s = by_input[f"{inp}/{name}"]
        assert s["status"] == "ok" and s["output"] == f"{out}/{expected_output_name(name)}"
        rows = storage.read_parquet(s["output"]).to_pylist()
        assert [r["query_id"] for r in rows] == table.column("query_id").to_pylist()
        assert all(r["source_file"] == f"{inp}/{name}" and r["error"] is None for r in rows)
    assert json.loads(storage.read_bytes(f"{out}/{MANIFEST}"))["rows_out"] == 6
