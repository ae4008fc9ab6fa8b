"""How the run report opens shards (no server, no engine): the options polars' native S3
reader gets are the s3fs file system's settings (endpoint, credentials from the environment,
an ``~/.aws`` profile or fsspec's config, region, anonymous), and a protocol other than local
and S3 (fsspec's ``memory://``) is still a lazy scan of the listed key. The S3 read itself
(moto server, odd keys, bytes fetched) is tested in tests/flows/test_report_s3.py."""

from __future__ import annotations

import io
import json

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.core.polars_s3 import polars_s3_options
from specrag_batch.core import storage
from specrag_batch.run.report import load_rows, scan_shard
from specrag_batch.core.schema import OUTPUT_SCHEMA

AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
            "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "SPECRAG_S3_ENDPOINT_URL")


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """No AWS setting from the machine: empty config files, no variables, no metadata service."""
    for v in AWS_VARS:
        monkeypatch.delenv(v, raising=False)
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


def test_s3_options_follow_the_environment(aws_env, monkeypatch):
    monkeypatch.setenv("SPECRAG_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-env")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token-env")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    assert polars_s3_options("s3://b/run/x [1].parquet") == {
        "aws_endpoint_url": "http://127.0.0.1:9", "aws_allow_http": "true", "aws_region": "eu-west-3",
        "aws_access_key_id": "AKIDENV", "aws_secret_access_key": "secret-env", "aws_session_token": "token-env"}


def test_s3_options_take_an_aws_profile_as_s3fs_does(aws_env, monkeypatch):
    """A profile in the shared files (what botocore, hence s3fs, reads; polars' Rust reader
    alone would not): its keys and region reach polars."""
    (aws_env / "credentials").write_text("[nightly]\naws_access_key_id = AKIDPROFILE\n"
                                         "aws_secret_access_key = secret-profile\n")
    (aws_env / "config").write_text("[profile nightly]\nregion = ap-south-1\n")
    monkeypatch.setenv("AWS_PROFILE", "nightly")
    opts = polars_s3_options("s3a://b/run")
    assert opts == {"aws_region": "ap-south-1", "aws_access_key_id": "AKIDPROFILE",
                    "aws_secret_access_key": "secret-profile"}


def test_s3_options_take_fsspec_config(aws_env, monkeypatch):
    """Keys set in fsspec's config win over the environment; ``anon`` reads unsigned."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-env")
    monkeypatch.setitem(fsspec.config.conf, "s3", {"key": "AKIDCONF", "secret": "secret-conf",
                                                  "client_kwargs": {"region_name": "us-west-2"}})
    opts = polars_s3_options("s3://b/run")
    assert opts == {"aws_region": "us-west-2", "aws_access_key_id": "AKIDCONF", "aws_secret_access_key": "secret-conf"}
    monkeypatch.setitem(fsspec.config.conf, "s3", {"anon": True})
    assert polars_s3_options("s3://b/run") == {"aws_skip_signature": "true"}
    with pytest.raises(ValueError, match="not an s3"):
        polars_s3_options("/local/run")


def test_other_fsspec_protocols_scan_the_listed_key_lazily():
    """``memory://`` goes through pyarrow's dataset on the fsspec file system: the key with
    glob characters is read as it is, and the plan projects the selected column."""
    fs = fsspec.filesystem("memory")
    rows = [{"query_id": f"q{i}", "task": "qa", "answer": "x", "score": -1.0, "score_draft": -1.0,
             "low_confidence": False, "fast_path": False, "drafts": [], "flags": [], "mode": "speculative",
             "correct": i % 2 == 0} for i in range(4)]
    for name, n in (("a [x]*.parquet", 4), ("a x1.parquet", 1)):  # the second: what a glob would add
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows[:n], schema=OUTPUT_SCHEMA), buf)
        fs.pipe_file(f"/report-scan/{name}", buf.getvalue())
    manifest = {"shards": [{"status": "ok", "output": "a [x]*.parquet"}]}
    fs.pipe_file("/report-scan/_manifest.json", json.dumps(manifest).encode())
    try:
        data = load_rows("memory://report-scan")
        assert data.rows["query_id"].to_list() == ["q0", "q1", "q2", "q3"]
        assert "PROJECT 1/" in scan_shard(data.shards[0]).select("query_id").explain()
    finally:
        fs.rm("/report-scan", recursive=True)
