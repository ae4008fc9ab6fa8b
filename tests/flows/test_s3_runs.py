"""Runs on S3 (the moto S3 server process; real vLLM SmolLM2 engine, real Prefect flow runs): an
input edited to the same size is recomputed and another input refused, storage tasks retry
transient errors but not bad data, a config loaded from S3, and ``index build`` / ``claims`` on
S3 with their exit codes and ``--overwrite`` (docs/operations.md, docs/deploying.md)."""

from __future__ import annotations

import pytest

from specrag_batch.core import storage

from ..conftest import sample_rows, small_config
from .test_flow import read_outputs, write_inputs

pytestmark = pytest.mark.slow


def _all_objects(prefix: str) -> dict[str, bytes]:
    fs, path = storage.filesystem(prefix)
    return {f: fs.cat_file(f) for f in fs.find(path)}


# --- S3: resume keyed on the input version, input conflicts, the product's own retries ------

def test_same_size_edit_on_s3_is_recomputed_and_another_input_is_refused(prefect_harness, s3_bucket):
    """docs/operations.md: a shard whose input changed (size + ETag) is recomputed, even when its size did
    not change; an output holding results of another *input* (same config) is refused."""
    import pyarrow as pa

    from flows.speculative_rag import run_flow
    from specrag_batch.run import resume

    inp, out = f"{s3_bucket}/in", f"{s3_bucket}/out"
    t = sample_rows("popqa", 1, skip=9)
    write_inputs(inp, {"a.parquet": t})
    fs, path = storage.filesystem(f"{inp}/a.parquet")
    before = fs.info(path)
    cfg = small_config(**{"sampling.num_drafts": 2}).model_dump(mode="json")
    first = run_flow(inp, out, cfg)
    q = t.column("query")[0].as_py()
    edited = t.set_column(t.schema.get_field_index("query"), "query", pa.array([q[:-1] + "!"]))
    write_inputs(inp, {"a.parquet": edited})
    after = fs.info(path)
    assert after["size"] == before["size"] and after["ETag"] != before["ETag"]  # same-size edit
    m = run_flow(inp, out, cfg)
    assert m["resumed_shards"] == 0 and m["shards"][0]["run_id"] == m["run_id"] != first["run_id"]
    again = run_flow(inp, out, cfg)
    assert again["resumed_shards"] == 1  # unchanged since: skipped
    # another input into the same output, same config: refused, nothing written
    write_inputs(f"{s3_bucket}/other", {"a.parquet": t})
    objects = _all_objects(out)
    with pytest.raises(resume.RunConflictError, match=f"holds results of input '{inp}'.* this run is input '{s3_bucket}/other'"):
        run_flow(f"{s3_bucket}/other", out, cfg)
    assert _all_objects(out) == objects


def _task_runs(flow_run_id) -> dict[str, list[int]]:
    """Task name (without Prefect's suffix) -> run_count of each of its runs in that flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        trs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    out: dict[str, list[int]] = {}
    for tr in trs:
        out.setdefault(tr.name.rsplit("-", 1)[0], []).append(tr.run_count)
    return out


def test_storage_tasks_retry_transient_errors_not_bad_data(prefect_harness, s3_bucket, monkeypatch):
    """With the S3 client's own retries turned off (botocore max attempts 1, s3fs 1 try), the
    first upload of the output and of its done marker answer 503 SlowDown: the run completes
    because the product's Prefect task retries run (run_count 2). A corrupt shard fails when
    the run is planned (its footer is read then), so no read task retries it."""
    import s3fs

    from flows.speculative_rag import speculative_rag_flow

    from .faulty_s3 import FaultProxy

    inp, out = f"{s3_bucket}/rin", f"{s3_bucket}/rout"
    write_inputs(inp, {"a.parquet": sample_rows("popqa", 1, skip=3)})
    fs, path = storage.filesystem(inp)
    fs.pipe_file(f"{path}/bad.parquet", b"PAR1 not parquet at all")
    targets = {f"/{out[5:]}/a.parquet", f"/{out[5:]}/_shards/a.parquet.json"}

    def first_upload(method, p, n):
        return method == "PUT" and p in targets and n == 0
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    import os
    with FaultProxy(os.environ["SPECRAG_S3_ENDPOINT_URL"], rule=first_upload) as proxy:
        monkeypatch.setenv("SPECRAG_S3_ENDPOINT_URL", proxy.url)  # a new client (new options)
        state = speculative_rag_flow(inp, out, small_config(**{"sampling.num_drafts": 2}).model_dump(mode="json"),
                                     return_state=True)
    from specrag_batch.run.orchestration import flow_manifest
    m = flow_manifest(state)
    assert state.is_failed()  # a shard failed: the flow run is Failed, its manifest written
    assert sorted(proxy.failed) == sorted(("PUT", t) for t in targets)
    assert m["rows_out"] == 1 and m["failed_shards"] == 1
    runs = _task_runs(state.state_details.flow_run_id)
    # product retries ran: the output's write (2 runs); the reuse key index part's write ran once
    assert sorted(runs["write-shard"]) == [1, 2] and runs["mark-shard-done"] == [2]
    assert runs["read-shard"] == [1]  # a.parquet's; the corrupt shard never reached a read task
    bad = [s for s in m["shards"] if s["status"] == "failed"][0]
    assert bad["input"].endswith("bad.parquet") and bad["error"].startswith("ArrowInvalid")


def test_config_loaded_from_s3(s3_bucket):
    from specrag_batch.config import load_config

    from ..conftest import ROOT
    text = (ROOT / "configs" / "test-smollm2.yaml").read_bytes()
    fs, path = storage.filesystem(f"{s3_bucket}/configs/run.yaml")
    fs.pipe_file(path, text + b"seed: 7\n")
    cfg = load_config(f"{s3_bucket}/configs/run.yaml", {"sampling.num_drafts": 2})
    assert cfg.seed == 7 and cfg.sampling.num_drafts == 2 and cfg.drafter.model == "smollm2-135m-instruct"


# --- the command line: exit codes, --overwrite, --index on S3, claims -----------------------

def test_cli_index_on_s3_exit_codes_overwrite_and_claims(prefect_harness, s3_bucket, tmp_path):
    """docs/cli.md through the CLI (fresh processes): `index build` to S3 and `run --index` from it;
    a failed shard exits 1; another config into the same output exits 2 with the conflict;
    `claims --overwrite` replaces those results (exit 0, label counts printed). Determinism
    across processes: the CLI's answers and scores equal this process's run of the same job."""
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from ..conftest import ROOT, SAMPLES, subprocess_env

    env = subprocess_env(tmp_path)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", *args], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=900)
    corpus = SAMPLES / "corpus" / "popqa_passages.parquet"
    idx, inp, out = f"{s3_bucket}/index", f"{s3_bucket}/in", f"{s3_bucket}/out"
    r = cli("index", "build", "--corpus", str(corpus), "--output", idx)
    assert r.returncode == 0, r.stderr[-3000:]
    q = sample_rows("popqa", 1, skip=11).drop_columns(["documents"])
    claim = sample_rows("climate_fever", 1, skip=11)
    write_inputs(inp, {"q.parquet": q, "c.parquet": claim})
    fs, path = storage.filesystem(inp)
    fs.pipe_file(f"{path}/z.parquet", b"PAR1 corrupt")
    config = str(ROOT / "configs" / "test-smollm2.yaml")
    r = cli("run", "-i", inp, "-o", out, "-c", config, "--index", idx, "-m", "2")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-3000:]  # docs/operations.md: a failed shard exits 1
    rows, m = read_outputs(out)
    assert m["failed_shards"] == 1 and m["rows_out"] == 2
    [qr] = [x for x in rows if x["query_id"] == q.column("query_id")[0].as_py()]
    corpus_ids = set(pq.read_table(corpus, columns=["doc_id"]).column("doc_id").to_pylist())
    # top-10 from the index; fewer only when empty or duplicate passages were removed (and flagged)
    removed = {"empty_documents_removed", "duplicate_documents_removed"} & set(qr["flags"])
    assert qr["error"] is None and qr["answer"] is not None
    assert qr["num_documents"] == 10 or (removed and qr["num_documents"] < 10), (qr["num_documents"], qr["flags"])
    assert all(set(d["doc_ids"]) <= corpus_ids for d in qr["drafts"])  # documents from the S3 index
    from flows.speculative_rag import run_flow
    here = f"{s3_bucket}/here"
    run_flow(inp, here, small_config(**{"retrieval.index": idx, "sampling.num_drafts": 2}).model_dump(mode="json"))
    keys = ("query_id", "answer", "rationale", "score", "score_draft", "score_self_consistency",
            "score_self_reflection", "drafts", "flags", "low_confidence", "fast_path")
    same = sorted(read_outputs(here)[0], key=lambda x: x["query_id"])
    assert [{k: x[k] for k in keys} for x in same] == \
        [{k: x[k] for k in keys} for x in sorted(rows, key=lambda x: x["query_id"])]
    before = _all_objects(out)
    r = cli("run", "-i", inp, "-o", out, "-c", config, "--index", idx, "-m", "3")
    assert r.returncode == 2 and "holds results of input" in " ".join(r.stderr.split()), r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stdout + r.stderr and _all_objects(out) == before
    only_claims = f"{s3_bucket}/claims"
    write_inputs(only_claims, {"c.parquet": claim})
    r = cli("claims", "-i", only_claims, "-o", out, "-c", config)
    assert r.returncode == 2 and "holds results of input" in " ".join(r.stderr.split())  # still refused without --overwrite
    r = cli("claims", "-i", only_claims, "-o", out, "-c", config, "--overwrite")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "labels: SUPPORTS" in r.stdout
    rows, m = read_outputs(out)
    assert [x["query_id"] for x in rows] == claim.column("query_id").to_pylist()  # old results gone
    assert m["config"]["task"] == "claim" and m["failed_shards"] == 0
    assert rows[0]["answer"] in m["config"]["claim_labels"] or "answer_not_a_label" in rows[0]["flags"]
