"""Scale-out: shards on a local Ray cluster (2 worker processes, each with its own real vLLM
engine) through prefect-ray, and disaggregated drafting/verification through intermediate
draft Parquet. Both must give exactly the single-process answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specrag_batch.core import storage

from ..conftest import _free_port, sample_rows, small_config, stop_process_group

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).with_name("ray"))


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """`ray start --head --block` with 2 CPUs (2 worker processes for tasks asking 1 CPU each),
    in its own process group and temp dir, so teardown stops this cluster and no other."""
    tmp = tmp_path_factory.mktemp("ray")
    port = _free_port()
    # a loopback test cluster: no token auth (Ray 2.60 turns it on for `ray start` whenever
    # ~/.ray/auth_token exists, e.g. after any local ray.init(); a driver given an explicit
    # address then cannot connect)
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect-home"), "SPECRAG_PROGRESS": "0",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    log = open(tmp / "ray.log", "wb")
    proc = subprocess.Popen([RAY, "start", "--head", "--block", "--port", str(port), "--num-cpus", "2",
                             "--include-dashboard=false", "--disable-usage-stats",
                             "--temp-dir", str(tmp / "r")],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        assert proc.poll() is None, (tmp / "ray.log").read_text()[-3000:]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(1)
    else:
        pytest.fail("ray head did not start: " + (tmp / "ray.log").read_text()[-3000:])
    yield f"127.0.0.1:{port}"
    import ray

    ray.shutdown()
    stop_process_group(proc, 60)
    log.close()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """4 shards of real rows (PopQA questions and Climate-FEVER claims)."""
    d = tmp_path_factory.mktemp("in")
    for i, (name, skip) in enumerate([("popqa", 0), ("popqa", 2), ("climate_fever", 0), ("climate_fever", 2)]):
        pq.write_table(sample_rows(name, 2, skip), d / f"part-{i}.parquet")
    return str(d)


def outputs(prefix: str) -> dict[str, list[dict]]:
    """Output shard name -> rows without run-specific columns."""
    out = {}
    for f in storage.list_files(prefix):
        rel = f[len(prefix):]
        if f.endswith(".parquet") and "/_" not in rel:
            out[f.rsplit("/", 1)[-1]] = pq.read_table(f).drop_columns(["run_id"]).to_pylist()
    return out


def same_threads() -> dict:
    """Ray sets OMP_NUM_THREADS = num_cpus of a task; give each engine this process's thread
    count so float reductions run in the same order (bit-identical scores)."""
    import torch

    return {"num_cpus": 1, "runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(torch.get_num_threads())}}}


@pytest.fixture(scope="module")
def reference(prefect_harness, inputs, tmp_path_factory):
    """The single-process run (threads task runner, fused stages)."""
    from flows.speculative_rag import run_flow

    out = str(tmp_path_factory.mktemp("ref"))
    m = run_flow(inputs, out, small_config().model_dump(mode="json"))
    assert m["failed_shards"] == 0 and m["rows_out"] == 8
    return outputs(out)


def test_disaggregated_threads_same_answers_and_resumes_from_drafts(prefect_harness, inputs, reference, tmp_path):
    from flows.speculative_rag import run_flow

    cfg = small_config().model_dump(mode="json")
    out = str(tmp_path / "out")
    m = run_flow(inputs, out, cfg, execution={"stages": "disaggregated", "keep_drafts": True})
    assert outputs(out) == reference
    assert m["stage_seconds"]["drafting"] > 0
    # the verifier ran: at least one of the 8 rows was not on the consensus fast path
    assert m["metrics"]["fast_path"] < 8 and m["stage_seconds"]["verification"] > 0
    drafts = sorted(os.listdir(tmp_path / "out" / "_drafts"))
    assert drafts == ["_shards"] + [f"part-{i}.parquet" for i in range(4)]
    t = pq.read_table(tmp_path / "out" / "_drafts" / "part-0.parquet")
    assert "documents" not in t.column_names  # the verifier side never gets the documents
    assert t.num_rows == 2 and all(len(d) >= 1 for d in t.column("drafts").to_pylist())
    # crash after drafting, before the shard's output: its drafts are reused, not redrafted
    os.remove(tmp_path / "out" / "part-1.parquet")
    os.remove(tmp_path / "out" / "_shards" / "part-1.parquet.json")
    m2 = run_flow(inputs, out, cfg, execution={"stages": "disaggregated"})
    assert outputs(out) == reference
    assert m2["resumed_shards"] == 3
    # usage names only the engines the run called (the process may hold others from earlier
    # tests); none at all when the recomputed shard needed no verification
    assert set(m2["engines"]) <= {"smollm2-135m-instruct"}, m2["engines"]
    eng = m2["engines"].get("smollm2-135m-instruct", {"calls": 0, "generated_tokens": 0})
    # no drafting call; one verification call for the recomputed shard if the verifier scored
    # any of its drafts in the reference run (none when its rows were on the fast path or had
    # no valid draft: then no engine call at all)
    verified = [d for r in reference["part-1.parquet"] for d in r["drafts"] if d["score_self_consistency"] is not None]
    # without keep_drafts the finished draft shard is removed, its marker first
    assert not os.path.exists(tmp_path / "out" / "_drafts" / "part-1.parquet")
    assert not os.path.exists(tmp_path / "out" / "_drafts" / "_shards" / "part-1.parquet.json")
    assert eng["calls"] == (1 if verified else 0), (eng, len(verified))
    assert eng["generated_tokens"] == len(verified)  # one scored token per verifier prompt


@pytest.mark.parametrize("stages", ["fused", "disaggregated"])
def test_ray_cluster_two_workers_same_answers(prefect_harness, ray_cluster, inputs, reference, tmp_path, stages):
    from flows.speculative_rag import run_flow

    res = same_threads()
    ex = {"task_runner": "ray", "ray_address": ray_cluster, "stages": stages,
          "shard_resources": res, "drafter_resources": res, "verifier_resources": res}
    out = str(tmp_path / "out")
    m = run_flow(inputs, out, small_config().model_dump(mode="json"), execution=ex)
    assert m["failed_shards"] == 0 and m["rows_out"] == 8
    assert outputs(out) == reference
    workers = {s["worker"] for s in m["shards"]} | {s["draft_worker"] for s in m["shards"]} - {None}
    me = f"{socket.gethostname()}:{os.getpid()}"
    # each Ray worker process its own engine; 2 CPUs -> 2 shard tasks at a time on 2 workers
    # (disaggregated: Ray may start another worker process for the verification function)
    assert me not in workers and (len(workers) == 2 if stages == "fused" else len(workers) >= 2), workers
    if stages == "disaggregated":
        assert len({s["draft_worker"] for s in m["shards"]}) >= 2
    assert m["engines"]["smollm2-135m-instruct"]["generated_tokens"] > 0  # summed from workers
    assert json.loads(storage.read_bytes(f"{out}/_manifest.json"))["execution"]["task_runner"] == "ray"


def test_disaggregated_drafting_crash_fails_that_shard_only(prefect_harness, inputs, reference, tmp_path,
                                                            monkeypatch):
    """An unexpected exception in one shard's drafting task: that shard is reported failed
    with the drafting cause (its verification never runs), the others finish; a re-run
    completes it and keeps the others."""
    import flows.speculative_rag as fr
    import specrag_batch.run.orchestration as orchestration

    real = orchestration.draft_shard

    def crash(job, *a, **k):
        if job.shard_file.endswith("part-2.parquet"):
            raise RuntimeError("drafter worker lost")
        return real(job, *a, **k)

    cfg = small_config().model_dump(mode="json")
    out = str(tmp_path / "out")
    monkeypatch.setattr(orchestration, "draft_shard", crash)
    m = fr.run_flow(inputs, out, cfg, execution={"stages": "disaggregated"})
    [bad] = [s for s in m["shards"] if s["status"] != "ok"]
    assert bad["input"].endswith("part-2.parquet") and m["failed_shards"] == 1
    assert bad["error"].endswith("part-2.parquet: drafting: drafter worker lost")
    assert sorted(outputs(out)) == ["part-0.parquet", "part-1.parquet", "part-3.parquet"]
    monkeypatch.setattr(orchestration, "draft_shard", real)
    m = fr.run_flow(inputs, out, cfg, execution={"stages": "disaggregated"})
    assert m["failed_shards"] == 0 and m["resumed_shards"] == 3 and outputs(out) == reference


def test_unreadable_or_swapped_draft_shard_is_discarded_and_redrafted(prefect_harness, inputs, reference, tmp_path):
    """A draft shard replaced after its marker was written (garbage, or another shard's
    drafts): verification refuses it, the shard fails naming the draft file, the draft and its
    marker are discarded, and the next run drafts it again. No row is ever taken from the
    wrong shard."""
    import shutil

    from flows.speculative_rag import run_flow

    cfg = small_config().model_dump(mode="json")
    out = tmp_path / "out"
    ex = {"stages": "disaggregated", "keep_drafts": True}
    run_flow(inputs, str(out), cfg, execution=ex)
    for shard in ("part-1", "part-3"):  # as if the run died after drafting these shards
        os.remove(out / f"{shard}.parquet")
        os.remove(out / "_shards" / f"{shard}.parquet.json")
    (out / "_drafts" / "part-1.parquet").write_bytes(b"garbage")
    shutil.copy(out / "_drafts" / "part-2.parquet", out / "_drafts" / "part-3.parquet")
    m = run_flow(inputs, str(out), cfg, execution=ex)
    failed = {s["input"].rsplit("/", 1)[-1]: s["error"] for s in m["shards"] if s["status"] != "ok"}
    assert sorted(failed) == ["part-1.parquet", "part-3.parquet"]
    assert "_drafts/part-1.parquet" in failed["part-1.parquet"] and "discarded" in failed["part-1.parquet"]
    assert "query ids differ" in failed["part-3.parquet"]
    for shard in ("part-1", "part-3"):
        assert not (out / "_drafts" / f"{shard}.parquet").exists()
        assert not (out / "_drafts" / "_shards" / f"{shard}.parquet.json").exists()
    assert sorted(outputs(str(out))) == ["part-0.parquet", "part-2.parquet"]
    m = run_flow(inputs, str(out), cfg, execution=ex)
    assert m["failed_shards"] == 0 and outputs(str(out)) == reference


def test_ray_workers_reuse_the_rows_of_an_earlier_run(prefect_harness, ray_cluster, inputs, reference, tmp_path):
    """Reuse on the Ray path (issue 52): the trusted sources travel in each shard task's config,
    the Ray workers read the earlier run's key index and copy its rows, starting no engine;
    the rows equal the single-process run's but for where they came from."""
    from flows.speculative_rag import run_flow

    first = str(tmp_path / "first")
    assert run_flow(inputs, first, small_config().model_dump(mode="json"))["rows_out"] == 8
    res = same_threads()
    ex = {"task_runner": "ray", "ray_address": ray_cluster, "stages": "fused", "shard_resources": res}
    out = str(tmp_path / "out")
    m = run_flow(inputs, out, small_config(**{"reuse.sources": [first]}).model_dump(mode="json"), execution=ex)
    assert m["failed_shards"] == 0 and m["reuse"]["rows"] == 8
    assert not any(u.get("generated_tokens") for u in m["engines"].values())  # no engine work on the workers
    own = ("source_file", "answer_source", "reused_from", "reused_answer_source")
    got = {name: [{k: v for k, v in r.items() if k not in own} for r in rows] for name, rows in outputs(out).items()}
    assert got == {name: [{k: v for k, v in r.items() if k not in own} for r in rows] for name, rows in reference.items()}
    assert all(r["answer_source"] == "reused" and r["reused_from"].startswith(first)
               for rows in outputs(out).values() for r in rows)


@pytest.fixture(scope="module")
def mixed_inputs(tmp_path_factory):
    """2 shards, each mixing a PopQA question and a Climate-FEVER claim (issue 49)."""
    import pyarrow as pa

    d = tmp_path_factory.mktemp("mixed")
    for i in range(2):
        pq.write_table(pa.concat_tables([sample_rows("popqa", 1, i), sample_rows("climate_fever", 1, i)]),
                       d / f"mixed-{i}.parquet")
    return str(d)


@pytest.mark.parametrize("stages", ["fused", "disaggregated"])
def test_ray_cluster_mode_per_task_same_rows_as_threads(prefect_harness, ray_cluster, mixed_inputs, tmp_path, stages):
    """A mode per task on the Ray path: every row once, answered by its task's mode, the same
    rows as the single-process run (claims by Speculative RAG, questions by Standard RAG)."""
    from flows.speculative_rag import run_flow

    cfg = small_config(mode={"claim": "speculative", "qa": "standard"}).model_dump(mode="json")
    ref = str(tmp_path / "ref")
    assert run_flow(mixed_inputs, ref, cfg)["failed_shards"] == 0
    res = same_threads()
    ex = {"task_runner": "ray", "ray_address": ray_cluster, "stages": stages,
          "shard_resources": res, "drafter_resources": res, "verifier_resources": res}
    out = str(tmp_path / "out")
    m = run_flow(mixed_inputs, out, cfg, execution=ex)
    assert m["failed_shards"] == 0 and m["rows_out"] == 4
    rows = [r for shard in outputs(out).values() for r in shard]
    assert sorted((r["task"], r["mode"]) for r in rows) == [("claim", "speculative")] * 2 + [("qa", "standard")] * 2
    assert outputs(out) == outputs(ref)
