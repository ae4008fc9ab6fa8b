"""The redaction rule (specrag_batch/core/redaction.py): which keys and values are secrets, the
hash kept for comparison, and that harmless settings stay readable."""

import hashlib
import logging

from specrag_batch.config import RunConfig
from specrag_batch.config.execution import ExecutionConfig
from specrag_batch.core.redaction import RedactingFilter, fingerprint, is_secret_key, redact, redact_text


def _h(v: str) -> str:
    return f"<redacted sha256:{hashlib.sha256(v.encode()).hexdigest()[:12]}>"


def test_secret_keys_by_whole_word():
    for k in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "aws_session_token", "AWS_REGION",
              "HF_TOKEN", "GITHUB_TOKEN", "api_key", "apiKey", "OPENAI_API_KEY", "_redis_password",
              "DB_PASSWD", "client_secret", "credentials", "Authorization", "private_key_path"):
        assert is_secret_key(k), k
    for k in ("max_tokens", "top_k", "top_n", "keep_drafts", "kmeans_n_init", "monkey", "OMP_NUM_THREADS",
              "num_cpus", "runtime_env", "env_vars", "ray_address", "tokenizer", "max_doc_tokens"):
        assert not is_secret_key(k), k


def test_redact_keeps_structure_and_a_comparable_hash():
    ex = ExecutionConfig(ray_address="ray://admin:hunter2@head:10001",
                         ray_init_kwargs={"_redis_password": "r3dis", "namespace": "specrag"},
                         shard_resources={"num_cpus": 1, "runtime_env": {"env_vars": {
                             "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI", "OMP_NUM_THREADS": "2"}}})
    r = redact(ex.model_dump(mode="json"))
    assert r["ray_address"] == f"ray://admin:{_h('hunter2')}@head:10001"
    assert r["ray_init_kwargs"] == {"_redis_password": _h("r3dis"), "namespace": "specrag"}
    assert r["shard_resources"]["runtime_env"]["env_vars"] == {
        "AWS_SECRET_ACCESS_KEY": _h("wJalrXUtnFEMI"), "OMP_NUM_THREADS": "2"}
    assert r["shard_resources"]["num_cpus"] == 1 and r["stages"] == "fused"
    assert redact(r) == r  # idempotent: a redacted manifest written again stays the same
    assert redact(ex.model_dump(mode="json")) == r  # same secrets, same hashes (runs compare)
    assert ex.shard_resources["runtime_env"]["env_vars"]["AWS_SECRET_ACCESS_KEY"] == "wJalrXUtnFEMI"


def test_run_config_secrets_and_harmless_settings():
    cfg = RunConfig.model_validate({"drafter": {"model": "m", "engine_kwargs": {"hf_token": "hf_abc", "dtype": "bfloat16"}},
                                    "retrieval": {"index": "sftp://svc:pa55@host/index"}})
    r = redact(cfg.model_dump(mode="json"))
    assert r["drafter"]["engine_kwargs"] == {"hf_token": _h("hf_abc"), "dtype": "bfloat16"}
    assert r["retrieval"]["index"] == f"sftp://svc:{_h('pa55')}@host/index"
    assert r["drafter"]["max_tokens"] == 160 and r["sampling"] == cfg.model_dump(mode="json")["sampling"]


def test_secret_looking_values_under_any_key():
    key_id, hf = "AKIAIOSFODNN7EXAMPLE", "hf_" + "a1B2" * 8
    text = f"failed with id {key_id}, header Bearer eyJhbGciOi.x.y and {hf}"
    assert redact_text(text) == f"failed with id {_h(key_id)}, header {_h('Bearer eyJhbGciOi.x.y')} and {_h(hf)}"
    assert redact_text("s3://bucket/a:b/c@d.parquet") == "s3://bucket/a:b/c@d.parquet"  # no userinfo
    assert redact({"n": None, "token": None, "k": 3}) == {"n": None, "token": None, "k": 3}
    assert fingerprint({"a": 1}) == _h('{"a": 1}')


def test_log_filter_redacts_formatted_messages():
    rec = logging.LogRecord("prefect.flow_runs", logging.INFO, __file__, 1, "reading %s: %s", ("s3://u:pw@h/b", 3), None)
    assert RedactingFilter().filter(rec) is True
    assert rec.getMessage() == f"reading s3://u:{_h('pw')}@h/b: 3"
