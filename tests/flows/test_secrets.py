"""Secrets never reach the output bucket or the logs (docs/operations.md, "Secrets"): credentials in
the environment, in ``execution`` and in the config, on a real run (real vLLM SmolLM2 engine,
real Prefect flow run, the moto S3 server process)."""

from __future__ import annotations

import json
import uuid

import pytest

from specrag_batch.core.redaction import fingerprint

from ..conftest import sample_rows, small_config
from .test_flow import write_inputs
from .test_s3_runs import _all_objects

pytestmark = pytest.mark.slow


def _flow_logs() -> list[str]:
    """Every log message the Prefect API holds (this session's temporary database)."""
    from prefect.client.orchestration import get_client
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)
    with get_client(sync_client=True) as client:
        return [log.message for log in client.read_logs()]


def test_secrets_never_reach_the_output_bucket_or_the_logs(prefect_harness, s3_bucket, monkeypatch):
    """Credentials in the environment, in ``execution`` (runtime_env env vars, ray_init_kwargs,
    a Ray address with a password) and in the config (an index URL with a password) are run
    through a real S3 flow run: no object under the output prefix, no Prefect log line and not
    the returned manifest holds any of them; the manifest keeps their hashes so runs compare."""
    from flows.speculative_rag import run_flow

    tag = uuid.uuid4().hex[:10]
    secrets = {"aws_key_id": "AKIA" + tag.upper().ljust(16, "Q"), "aws": f"awsSecret{tag}",
               "hf": f"hf_{tag}Tok", "redis": f"redisPw{tag}", "ray": f"rayPw{tag}", "index": f"idxPw{tag}"}
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", secrets["aws_key_id"])  # moto takes any credentials
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secrets["aws"])
    env_vars = {"AWS_ACCESS_KEY_ID": secrets["aws_key_id"], "AWS_SECRET_ACCESS_KEY": secrets["aws"],
                "HF_TOKEN": secrets["hf"], "OMP_NUM_THREADS": "2"}
    execution = {"ray_address": f"ray://admin:{secrets['ray']}@head:10001",
                 "ray_init_kwargs": {"_redis_password": secrets["redis"], "runtime_env": {"env_vars": env_vars}},
                 "shard_resources": {"num_cpus": 1, "runtime_env": {"env_vars": env_vars}}}
    inp, out = f"{s3_bucket}/in", f"{s3_bucket}/out"
    write_inputs(inp, {"a.parquet": sample_rows("popqa", 1)})
    index = f"sftp://svc:{secrets['index']}@index-host/idx"  # no SFTP server here: every row has documents
    cfg = small_config(**{"sampling.num_drafts": 2, "retrieval.index": index})
    from specrag_batch.run import orchestration
    from specrag_batch.index import IndexFormatError
    from specrag_batch.index.search import check_index

    with pytest.raises(IndexFormatError) as refused:  # the check a run makes of its index first
        check_index(cfg.retrieval)
    assert secrets["index"] not in str(refused.value) and "index-host/idx" in str(refused.value)
    # a stand-in (named): the run's own index check would refuse this unreachable index
    monkeypatch.setattr(orchestration, "check_index", lambda retrieval, load: None)
    m = run_flow(inp, out, cfg.model_dump(mode="json"), execution=execution)
    assert m["failed_shards"] == 0 and m["rows_out"] == 1

    objects = _all_objects(out)
    names = {k.rsplit("/", 1)[-1] for k in objects}
    assert {"_run.json", "_manifest.json", "a.parquet", "a.parquet.json"} <= names
    logs = _flow_logs()
    assert any("1 rows ->" in line for line in logs)  # the run's own log lines are there
    for name, secret in secrets.items():
        for key, body in objects.items():
            assert secret.encode() not in body, f"{name} secret written to {key}"
        assert secret not in json.dumps(m), f"{name} secret in the returned manifest"
        assert not [line for line in logs if secret in line], f"{name} secret in the Prefect logs"
    written = json.loads(objects[next(k for k in objects if k.endswith("/_manifest.json"))])
    ev = written["execution"]["shard_resources"]["runtime_env"]["env_vars"]
    assert ev == {"AWS_ACCESS_KEY_ID": fingerprint(secrets["aws_key_id"]),
                  "AWS_SECRET_ACCESS_KEY": fingerprint(secrets["aws"]),
                  "HF_TOKEN": fingerprint(secrets["hf"]), "OMP_NUM_THREADS": "2"}
    assert written["execution"]["ray_address"] == f"ray://admin:{fingerprint(secrets['ray'])}@head:10001"
    assert written["config"]["retrieval"]["index"] == f"sftp://svc:{fingerprint(secrets['index'])}@index-host/idx"
    run_file = json.loads(objects[next(k for k in objects if k.endswith("/_run.json"))])
    assert run_file["config"] == written["config"] and run_file["config_hash"] == cfg.config_hash()
    # the same command again resumes: redaction does not change the run key
    again = run_flow(inp, out, cfg.model_dump(mode="json"), execution=execution)
    assert again["resumed_shards"] == 1 and again["execution"] == written["execution"]
