"""Promises of the docs (docs/operations.md, docs/data-contract.md, docs/deploying.md) checked
on real runs (real vLLM SmolLM2 engine, real Prefect flow runs, the moto S3 server process, real
Parquet). Runs are grouped: one run sets up several conditions
and each promise is asserted separately on its output."""

from __future__ import annotations

import json
import uuid

import pytest

from specrag_batch import storage
from specrag_batch.redaction import fingerprint
from specrag_batch.records import is_valid_draft

from ..conftest import sample_rows, small_config
from .test_flow import read_outputs, write_inputs

pytestmark = pytest.mark.slow


def _all_objects(prefix: str) -> dict[str, bytes]:
    fs, path = storage.filesystem(prefix)
    return {f: fs.cat_file(f) for f in fs.find(path)}


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
    index = f"sftp://svc:{secrets['index']}@index-host/idx"  # never opened: every row has documents
    cfg = small_config(**{"sampling.num_drafts": 2, "retrieval.index": index})
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


# --- one grouped set of in-process runs: chunks, consensus fast path, tau_min, choice task,
# --- empty passages, a prompt that cannot fit, topology switch on resume -------------------

class CountingEngine:
    """The real engine, counting the prompts of each call kind (a test instrument: results are
    the engine's, untouched). ``generate`` is drafting, ``prompt_*`` verification."""

    def __init__(self, engine):
        self._engine, self.prompts = engine, {}

    def __getattr__(self, name):
        attr = getattr(self._engine, name)
        if name not in ("generate", "prompt_logprobs", "prompt_and_next_logprobs"):
            return attr

        def call(prompts, *a, **k):
            self.prompts.setdefault(name, []).append(len(prompts))
            return attr(prompts, *a, **k)
        return call

    def verified(self) -> int:
        return sum(sum(self.prompts.get(n, [])) for n in ("prompt_logprobs", "prompt_and_next_logprobs"))


def _run_counted(inp, out, cfg, execution=None):
    """run_flow with every engine the flow's tasks get wrapped in one CountingEngine each."""
    import flows.speculative_rag as fsr

    counters: dict[int, CountingEngine] = {}
    import specrag_batch.orchestration as orchestration
    real = orchestration.get_engine

    def counted(model_cfg, seed=0):
        e = real(model_cfg, seed)
        return counters.setdefault(id(e), CountingEngine(e))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(orchestration, "get_engine", counted)
        m = fsr.run_flow(inp, out, cfg.model_dump(mode="json"), execution=execution)
    [engine] = counters.values()  # SmolLM2 serves drafter and verifier: one engine
    return m, engine


def _by_id(prefix: str) -> dict[str, dict]:
    rows, _ = read_outputs(prefix)
    return {r["query_id"]: r for r in rows}


CHOICE_DOCS = [{"doc_id": "m1", "title": "Mars", "text": "Mars is called the Red Planet because iron oxide on its surface makes it look reddish."},
               {"doc_id": "m2", "title": "Venus", "text": "Venus is the hottest planet and is covered in thick clouds."},
               {"doc_id": "m3", "title": "Jupiter", "text": "Jupiter is the largest planet and has a Great Red Spot, a storm."},
               {"doc_id": "empty", "title": "Blank", "text": "   "}]


def _mixed_shard():
    import pyarrow as pa

    qa = sample_rows("popqa", 1, skip=4)
    dt = qa.schema.field("documents").type
    return pa.table({
        "query_id": ["choice-1", "too-long"],
        "query": ["Which planet is known as the Red Planet?", "Why? " * 2500],  # ~5000 tokens > 2048
        "task": ["choice", "qa"],
        "documents": pa.array([CHOICE_DOCS, qa.column("documents")[0].as_py()], dt),
        "choices": pa.array([["Venus", "Mars", "Jupiter", "Saturn"], None], pa.list_(pa.string())),
        "gold": pa.array([["Mars"], ["x"]], pa.list_(pa.string()))})


GROUP_CFG = {"sampling.num_drafts": 3, "selection.consensus_min": 2}


@pytest.fixture(scope="module")
def grouped(prefect_harness, tmp_path_factory):
    """Run 1: fused, chunk_rows 256, consensus c = 2 of m = 3. Run 2: the same with
    chunk_rows = 2 (4-row shard in 2 chunks) and tau_min = the median verified score of run 1."""
    import statistics

    tmp = tmp_path_factory.mktemp("grouped")
    inp = str(tmp / "in")
    write_inputs(inp, {"qa.parquet": sample_rows("popqa", 4, skip=4), "mixed.parquet": _mixed_shard()})
    cfg1 = small_config(**GROUP_CFG)
    m1, eng1 = _run_counted(inp, str(tmp / "o1"), cfg1)
    rows1 = _by_id(str(tmp / "o1"))
    verified = [r["score"] for r in rows1.values() if r["error"] is None and not r["fast_path"]
                and r["score_self_consistency"] is not None]
    tau = statistics.median(verified) if verified else 0.0
    cfg2 = small_config(**GROUP_CFG, chunk_rows=2, **{"selection.tau_min": tau})
    m2, eng2 = _run_counted(inp, str(tmp / "o2"), cfg2)
    return {"tmp": tmp, "inp": inp, "cfg1": cfg1, "m1": m1, "eng1": eng1, "rows1": rows1, "tau": tau,
            "m2": m2, "eng2": eng2, "rows2": _by_id(str(tmp / "o2"))}


SAME = ("answer", "rationale", "score", "score_draft", "score_self_consistency", "score_self_reflection",
        "fast_path", "drafts", "error", "correct")


BATCH_VARIANCE = ("vLLM CPU outputs depend on what else is in the batch: a 4-row shard in 2 chunks "
                  "gives other draft scores (seen: up to 2 nats) and answers than the one-chunk run "
                  "(vLLM's batch-invariant mode does not run on its CPU build; docs/operations.md, Determinism)")


def test_large_shard_goes_through_chunks(grouped):
    """docs/operations.md: a shard larger than ``chunk_rows`` is handed to the engines in chunks."""
    g = grouped
    assert g["m1"]["failed_shards"] == g["m2"]["failed_shards"] == 0
    # one drafting call per chunk: run 1 = 1 chunk per shard; run 2 = qa 4 rows / 2 + mixed 2 rows / 2
    assert len(g["eng1"].prompts["generate"]) == 2 and len(g["eng2"].prompts["generate"]) == 3
    assert max(g["eng2"].prompts["generate"]) <= 2 * 3  # never more than chunk_rows x m prompts
    assert sorted(g["rows2"]) == sorted(g["rows1"])


@pytest.mark.xfail(strict=True, reason=BATCH_VARIANCE)
def test_large_shard_in_chunks_gives_the_one_chunk_output(grouped):
    g = grouped
    for qid, r in g["rows1"].items():
        assert {k: g["rows2"][qid][k] for k in SAME} == {k: r[k] for k in SAME}, qid


def test_consensus_fast_path_skips_the_verifier_for_those_rows(grouped):
    rows, eng = grouped["rows1"], grouped["eng1"]
    answered = [r for r in rows.values() if r["error"] is None]
    fast = [r for r in answered if r["fast_path"]]
    slow = [r for r in answered if not r["fast_path"]]
    assert fast and slow, "this input must give both fast-path and verified rows"
    for r in fast:  # c = 2 of 3 drafts agree; the verifier scored none of its drafts
        assert all(d["score_self_consistency"] is None for d in r["drafts"])
    # verifier prompts = the drafts of the rows that were not on the fast path, no more
    expected = sum(1 for r in slow for d in r["drafts"] if d["score_self_consistency"] is not None
                   or "verifier_input_too_long" in d["flags"])
    assert eng.verified() == expected and expected > 0
    assert grouped["m1"]["metrics"]["fast_path"] == len(fast)


SELECTION_FLAGS = {"no_valid_draft", "selected_draft_missing_score"}  # low confidence whatever tau_min


def test_tau_min_flags_exactly_the_rows_below_it(grouped):
    tau, rows = grouped["tau"], grouped["rows2"]
    flagged = [q for q, r in rows.items() if r["low_confidence"]]
    expected = [q for q, r in rows.items() if r["error"] is None and not r["fast_path"]
                and (r["score"] is None or r["score"] < tau or SELECTION_FLAGS & set(r["flags"]))]
    assert sorted(flagged) == sorted(expected) and flagged
    assert not [q for q, r in rows.items() if r["fast_path"] and r["low_confidence"]]
    assert [q for q, r in rows.items() if r["score"] is not None and r["score"] >= tau]  # some above
    assert not any(r["low_confidence"] for r in grouped["rows1"].values()
                   if not SELECTION_FLAGS & set(r["flags"]))  # no tau_min in run 1: no flag


def test_choice_task_and_empty_passage(grouped):
    r = grouped["rows1"]["choice-1"]
    assert r["error"] is None and r["task"] == "choice"
    assert r["answer"] in ["Venus", "Mars", "Jupiter", "Saturn"] or "answer_not_a_choice" in r["flags"]
    assert r["correct"] is (r["answer"] == "Mars")
    assert "empty_documents_removed" in r["flags"] and r["num_documents"] == 3
    assert all("empty" not in d["doc_ids"] for d in r["drafts"])
    by_task = grouped["m1"]["metrics"]["by_task"]
    assert by_task["choice"]["n_with_gold"] == 1 and by_task["choice"]["accuracy"] == float(r["correct"])


def test_prompt_too_long_is_a_row_error_naming_file_row_and_field(grouped):
    long = grouped["rows1"]["too-long"]
    assert long["answer"] is None and long["drafts"] == []
    assert long["error"].startswith(f"{grouped['inp']}/mixed.parquet: row 1 (query_id='too-long'): field 'query': ")


def test_resume_across_topologies_into_the_same_output(grouped):
    """Started fused, resumed disaggregated (and the reverse): same output, finished shards
    kept, the missing one recomputed by the other topology."""
    import shutil
    from pathlib import Path

    from flows.speculative_rag import run_flow

    g = grouped
    out = g["tmp"] / "topo"
    shutil.copytree(g["tmp"] / "o1", out)
    cfg = g["cfg1"].model_dump(mode="json")
    for shard, stages in (("qa.parquet", "disaggregated"), ("mixed.parquet", "fused")):
        (out / shard).unlink()
        (out / "_shards" / f"{shard}.json").unlink()
        m = run_flow(g["inp"], str(out), cfg, execution={"stages": stages})
        assert m["resumed_shards"] == 1 and m["failed_shards"] == 0, stages
        done = [s for s in m["shards"] if not s["resumed"]]
        assert [Path(s["output"]).name for s in done] == [shard]
        rows = _by_id(str(out))
        for qid, r in g["rows1"].items():
            assert {k: rows[qid][k] for k in SAME} == {k: r[k] for k in SAME}, (stages, qid)
    assert not (out / "_drafts" / "qa.parquet").exists()  # drafts removed once the output is done


# --- S3: resume keyed on the input version, input conflicts, the product's own retries ------

def test_same_size_edit_on_s3_is_recomputed_and_another_input_is_refused(prefect_harness, s3_bucket):
    """docs/operations.md: a shard whose input changed (size + ETag) is recomputed, even when its size did
    not change; an output holding results of another *input* (same config) is refused."""
    import pyarrow as pa

    from flows.speculative_rag import run_flow
    from specrag_batch import resume

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
    from specrag_batch.orchestration import flow_manifest
    m = flow_manifest(state)
    assert state.is_failed()  # a shard failed: the flow run is Failed, its manifest written
    assert sorted(proxy.failed) == sorted(("PUT", t) for t in targets)
    assert m["rows_out"] == 1 and m["failed_shards"] == 1
    runs = _task_runs(state.state_details.flow_run_id)
    assert runs["write-shard"] == [2] and runs["mark-shard-done"] == [2]  # product retries ran
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
        return subprocess.run([sys.executable, "-m", "specrag_batch.cli", *args], capture_output=True,
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


# --- row flags that normal runs do not produce ----------------------------------------------

class NonFiniteFirstToken:
    """FAKE at the vLLM boundary (a wrapper around the real ``vllm.LLM``): the real outputs,
    except that the first sampled token of the first request of each sampling call gets
    log-prob -inf. A small real model never yields a non-finite log-prob on its own; this
    is the only way to show what the product does with one."""

    def __init__(self, llm):
        self._llm, self.injected = llm, 0

    def __getattr__(self, name):
        return getattr(self._llm, name)

    def generate(self, prompts, sp, **kw):
        from vllm.logprobs import Logprob

        outs = self._llm.generate(prompts, sp, **kw)
        if sp.logprobs is not None and sp.prompt_logprobs is None and outs and outs[0].outputs[0].token_ids:
            o = outs[0].outputs[0]
            lps = [dict(o.logprobs[i]) for i in range(len(o.token_ids))]
            lps[0] = {o.token_ids[0]: Logprob(logprob=float("-inf"), rank=1, decoded_token=None)}
            o.logprobs = lps
            self.injected += 1
        return outs


def test_truncated_drafts_no_valid_draft_and_non_finite_logprob(prefect_harness, tmp_path):
    """drafter.max_tokens = 6 cuts every draft before its answer: drafts are flagged
    ``truncated_at_max_tokens``, the row ``no_valid_draft`` (low confidence, no verifier call).
    A -inf log-prob injected at the vLLM boundary (see NonFiniteFirstToken) is replaced by the
    floor and flagged ``non_finite_logprob`` on that draft and its row only."""
    import dataclasses

    import flows.speculative_rag as fsr
    from specrag_batch.engines import NON_FINITE_FLOOR

    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_inputs(inp, {"a.parquet": sample_rows("popqa", 2, skip=14)})
    cfg = small_config(**{"sampling.num_drafts": 2, "drafter.max_tokens": 6})
    fakes = {}
    import specrag_batch.orchestration as orchestration
    real = orchestration.get_engine

    def with_fake(model_cfg, seed=0):
        e = real(model_cfg, seed)
        return fakes.setdefault(id(e), dataclasses.replace(e, llm=NonFiniteFirstToken(e.llm)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(orchestration, "get_engine", with_fake)
        m = fsr.run_flow(inp, out, cfg.model_dump(mode="json"))
    [fake] = fakes.values()
    assert fake.llm.injected == 1  # one drafting call (one chunk), first request
    rows = sorted(read_outputs(out)[0], key=lambda r: r["query_id"])
    first_id = sample_rows("popqa", 1, skip=14).column("query_id")[0].as_py()
    assert m["failed_shards"] == 0 and len(rows) == 2
    for r in rows:
        assert all("truncated_at_max_tokens" in d["flags"] for d in r["drafts"]) and len(r["drafts"]) == 2
        assert "no_valid_draft" in r["flags"] and r["low_confidence"] is True
        assert all(d["score_self_consistency"] is None for d in r["drafts"])  # never verified
        injected = r["query_id"] == first_id
        assert ("non_finite_logprob" in r["flags"]) is injected
        assert ["non_finite_logprob" in d["flags"] for d in r["drafts"]] == [injected, False]
        if injected:
            assert r["drafts"][0]["score_draft"] <= NON_FINITE_FLOOR < r["drafts"][1]["score_draft"]


def test_verifier_input_too_long(prefect_harness, tmp_path):
    """A verifier with a shorter context (max_model_len 256) than the drafter's: a ~300-token
    question fits the drafter, not the verifier; its drafts are flagged
    ``verifier_input_too_long`` with null verifier scores, and so is the row."""
    import pyarrow as pa

    from flows.speculative_rag import run_flow

    t = sample_rows("popqa", 2, skip=16)
    pre = "Answer the question below using the documents given; think about every document. " * 20
    t = t.set_column(t.schema.get_field_index("query"), "query",
                     pa.array([pre + q for q in t.column("query").to_pylist()]))
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_inputs(inp, {"a.parquet": t})
    cfg = small_config(**{"sampling.num_drafts": 2, "verifier.max_model_len": 256,
                          "selection.consensus_enabled": False})
    m = run_flow(inp, out, cfg.model_dump(mode="json"))
    rows, _ = read_outputs(out)
    assert m["failed_shards"] == 0 and all(r["error"] is None for r in rows)
    # the product's own validity rule (records.is_valid_draft): only valid drafts go to the verifier
    valid = [d for r in rows for d in r["drafts"] if is_valid_draft(d["flags"])]
    assert valid, "SmolLM2 wrote no valid draft for these rows: pick other rows"
    for r in rows:
        for d in r["drafts"]:
            assert d["score_self_consistency"] is None and d["score_self_reflection"] is None
        if any(d in valid for d in r["drafts"]):
            assert "verifier_input_too_long" in r["flags"]
    assert all("verifier_input_too_long" in d["flags"] for d in valid)


@pytest.mark.parametrize("fault", ["sha256", "not_installed"])
def test_packaged_model_bad_pin_or_missing_package_is_a_clear_exit_2(prefect_harness, tmp_path, monkeypatch, fault):
    """A packaged model whose assembled GGUF does not match its sha256 pin, or whose package
    is not installed: `specrag-batch run` stops with the reason and exit code 2, no
    traceback, nothing converted into the model cache. (In-process CLI: the fake entry is
    added to this process's model registry; the SmolLM2 package is the real one.)"""
    from dataclasses import replace

    from typer.testing import CliRunner

    from specrag_batch import models
    from specrag_batch.cli import app

    real = models.PACKAGED_MODELS["smollm2-135m-instruct"]
    fake = replace(real, name="fake-model", sha256="0" * 64) if fault == "sha256" else \
        replace(real, name="fake-model", files=(("specrag-no-such-package", "x/model.gguf"),))
    monkeypatch.setitem(models.PACKAGED_MODELS, "fake-model", fake)
    monkeypatch.setenv("SPECRAG_MODEL_CACHE", str(tmp_path / "cache"))
    write_inputs(str(tmp_path / "in"), {"a.parquet": sample_rows("popqa", 1)})
    from ..conftest import ROOT
    r = CliRunner().invoke(app, ["run", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"),
                                 "-c", str(ROOT / "configs" / "test-smollm2.yaml"),
                                 "--drafter", "fake-model", "--verifier", "fake-model"])
    why = {"sha256": "sha256", "not_installed": "are not installed: specrag-no-such-package"}[fault]
    text = " ".join(r.output.split())  # the console wraps long lines
    # (Prefect's own log of the failed flow run may carry a traceback; the CLI's answer is the code)
    assert r.exit_code == 2 and why in text, (r.exit_code, text[-2000:], r.exception)
    assert not [p for p in (tmp_path / "cache").glob("*") if p.is_dir()]  # nothing half-converted


# --- determinism: seeded sampling against recorded values ----------------------------------

EXPECTED_SEEDED = __import__("pathlib").Path(__file__).with_name("expected_seeded_sampling.json")
SEEDED = {"sampling.num_drafts": 2, "drafter.temperature": 0.8, "drafter.top_p": 0.95}  # seed 0: the
# cached engine (the seed is part of an engine's key)


def _seeded_values(rows: list[dict]) -> list[dict]:
    return [{"query_id": r["query_id"], "answer": r["answer"],
             "drafts": [{"doc_ids": d["doc_ids"], "answer": d["answer"], "rationale": d["rationale"],
                         "score_draft": round(d["score_draft"], 4)} for d in r["drafts"]]}
            for r in sorted(rows, key=lambda r: r["query_id"])]


def test_seeded_sampling_gives_the_recorded_drafts(prefect_harness, tmp_path):
    """docs/operations.md: the same input, config and seed give identical answers and scores, also with
    sampling (temperature > 0). Compared with values recorded from a run of this tree
    (``expected_seeded_sampling.json``). Prompts, parsing, model or vLLM changes change them:
    regenerate with ``SPECRAG_RECORD_EXPECTED=1 .venv/bin/python -m pytest
    tests/flows/test_promises.py -k seeded`` and review the diff."""
    import os

    from flows.speculative_rag import run_flow

    inp = str(tmp_path / "in")
    write_inputs(inp, {"a.parquet": sample_rows("popqa", 2, skip=18)})
    run_flow(inp, str(tmp_path / "o1"), small_config(**SEEDED).model_dump(mode="json"))
    got = _seeded_values(read_outputs(str(tmp_path / "o1"))[0])
    if os.environ.get("SPECRAG_RECORD_EXPECTED") == "1":
        EXPECTED_SEEDED.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
        pytest.skip(f"recorded {EXPECTED_SEEDED}")
    expected = json.loads(EXPECTED_SEEDED.read_text())
    assert [r["query_id"] for r in got] == [r["query_id"] for r in expected]
    for g, e in zip(got, expected):
        assert g["answer"] == e["answer"]
        for gd, ed in zip(g["drafts"], e["drafts"], strict=True):
            assert {k: gd[k] for k in ("doc_ids", "answer", "rationale")} == \
                {k: ed[k] for k in ("doc_ids", "answer", "rationale")}
            assert gd["score_draft"] == pytest.approx(ed["score_draft"], abs=1e-3)


def test_selection_by_draft_score_alone_never_loads_the_verifier(prefect_harness, tmp_path):
    """Speculative RAG selecting by log ρ_draft alone (``selection.use_self_consistency`` and
    ``use_self_reflection`` false, no fallback: ``RunConfig.uses_verifier`` is False) runs no
    verifier pass and never loads or even checks the verifier: a ``verifier.model`` that does
    not exist is never opened, every row is answered from its drafts, and no draft carries a
    verifier score. The same config with log ρ_SR back on refuses that model before the run."""
    from flows.speculative_rag import run_flow
    from specrag_batch.models import ModelNameError

    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_inputs(inp, {"a.parquet": sample_rows("popqa", 2, skip=2)})
    over = {"sampling.num_drafts": 2, "drafter.max_tokens": 24, "selection.use_self_consistency": False,
            "selection.use_self_reflection": False, "verifier.model": str(tmp_path / "no-such-verifier")}
    cfg = small_config(**over)
    assert not cfg.uses_verifier
    m = run_flow(inp, out, cfg.model_dump(mode="json"))
    rows = read_outputs(out)[0]
    assert m["failed_shards"] == 0 and len(rows) == 2
    for r in rows:
        assert r["drafts"] and r["error"] is None
        assert all(d["score_self_reflection"] is None and d["score_self_consistency"] is None for d in r["drafts"])
    with_sr = small_config(**{**over, "selection.use_self_reflection": True})
    assert with_sr.uses_verifier
    with pytest.raises(ModelNameError, match="verifier.model"):
        run_flow(inp, str(tmp_path / "out2"), with_sr.model_dump(mode="json"))
