"""Each engine's dtype recorded with the shards it computed: the flow's own shard tasks on
real Parquet with the FakeEngine (tests/fakes.py, real SmolLM2 tokenizer), done markers, and
resume across hosts. Reading and merging dtypes: tests/unit/test_engine_dtypes.py."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
import pytest

from specrag_batch.engines import engine as engines
from specrag_batch.run import orchestration, resume
from specrag_batch.engines.usage import merge_dtypes
from specrag_batch.engines.engine import used_dtypes
from specrag_batch.run.shard_job import ShardJob, ShardResult, StorageIO

from ..conftest import sample_rows, small_config
from ..fakes import FakeEngine

pytestmark = pytest.mark.integration


def test_dtypes_merge_per_model_and_only_for_engines_that_were_called():
    assert merge_dtypes([{"m": "float32"}, {"m": "bfloat16", "v": None}, None, {"m": "float32+bfloat16"}]) \
        == {"m": "bfloat16+float32"}  # v unknown: left out, never guessed
    d, v = FakeEngine(name="d", dtype="bfloat16"), FakeEngine(name="v", dtype="float32")
    assert used_dtypes([d, v, None], {"v": {"calls": 2}}) == {"v": "float32"}  # d passed, never called


@pytest.fixture()
def flow_parts(tmp_path, monkeypatch):
    """The flow's shard tasks on local storage: ``get_engine`` hands out ``current["engine"]``
    (a FakeEngine; usage snapshots see it), Prefect's logger and retrying I/O replaced."""
    current: dict = {}
    monkeypatch.setattr(engines, "get_engine", lambda cfg, seed=0: current["engine"])
    monkeypatch.setattr(engines, "loaded_engines", lambda: [current["engine"]])
    monkeypatch.setattr(orchestration, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(orchestration, "IO", StorageIO())
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    pq.write_table(sample_rows("popqa", 2), inp / "a.parquet")
    cfg = small_config(**{"sampling.num_drafts": 2,
                          "selection.consensus_enabled": False})  # the verifier is always called
    job = ShardJob(str(inp), str(out), str(inp / "a.parquet"), cfg.model_dump_json(), "run-1",
                   resume.input_fingerprint(str(inp / "a.parquet")))
    return current, job


def _marker(job: ShardJob, prefix: str, file: str) -> dict:
    done = resume.completed_shard(prefix, file, job.config.config_hash(), job.fingerprint)
    assert done is not None, f"{file} not marked done"
    return done["result"]


def test_a_fused_shard_records_its_engines_dtype_in_its_done_marker(flow_parts):
    current, job = flow_parts
    current["engine"] = FakeEngine(dtype="bfloat16")
    res = orchestration.process_shard_task.fn(job)
    assert res["status"] == "ok", res["error"]
    marker = _marker(job, job.output_prefix, job.output_file)
    assert marker["engine_dtypes"] == {current["engine"].name: "bfloat16"} == res["engine_dtypes"]
    assert set(marker["engine_dtypes"]) == set(marker["engines"])  # beside the usage, per model
    # a resumed shard reports the dtype its marker recorded, not this process's
    current["engine"] = FakeEngine(dtype="float32")
    again = orchestration.process_shard_task.fn(job)
    assert again["resumed"] and again["engine_dtypes"] == {current["engine"].name: "bfloat16"}


def test_a_shard_drafted_and_verified_on_two_kinds_of_host_records_both(flow_parts):
    """Disaggregated: the drafting task ran on a bfloat16 host, verification on a float32 one;
    the shard's done marker names both (one model serves both roles here)."""
    current, job = flow_parts
    current["engine"] = FakeEngine(dtype="bfloat16")
    drafted = orchestration.draft_shard_task.fn(job)
    assert drafted["status"] == "ok" and drafted["engine_dtypes"] == {current["engine"].name: "bfloat16"}
    assert _marker(job, job.drafts_prefix, job.draft_file)["engine_dtypes"] == drafted["engine_dtypes"]
    current["engine"] = FakeEngine(dtype="float32")
    res = orchestration.verify_shard_task.fn(drafted, job)
    assert res["status"] == "ok", res["error"]
    assert current["engine"].calls_to("prompt_and_next_logprobs") or current["engine"].calls_to("prompt_logprobs")
    assert _marker(job, job.output_prefix, job.output_file)["engine_dtypes"] == {
        current["engine"].name: "bfloat16+float32"}


def test_an_engine_of_unknown_dtype_records_none(flow_parts):
    current, job = flow_parts
    current["engine"] = FakeEngine(dtype=None)
    res = orchestration.process_shard_task.fn(job)
    assert res["status"] == "ok" and res["engine_dtypes"] == {} and res["engines"]


def test_a_marker_restored_with_its_machine_resumes_instead_of_failing(flow_parts):
    """The decision benchmark's cell archive restores a done marker whose result also names the
    machine that computed the shard (``cell_archive.RESTORED_KEY``, ``"machine"``). The flow
    built ``ShardResult(**result)`` from it, and every restored shard of a partly restored cell
    failed ("unexpected keyword argument 'machine'"; seen 2026-12-02 on Climate-FEVER). The
    flow now takes the fields it knows; the marker keeps the machine for the analysis."""
    current, job = flow_parts
    current["engine"] = FakeEngine(dtype="bfloat16")
    assert orchestration.process_shard_task.fn(job)["status"] == "ok"
    marker = _marker(job, job.output_prefix, job.output_file)
    machine = {"id": "aaaaaaaaaaaa", "cpu_model": "CPU A", "cpus": 2}
    resume.mark_done(job.output_prefix, job.output_file, job.config.config_hash(), job.fingerprint,
                     "run-0", {**marker, "machine": machine})
    again = orchestration.process_shard_task.fn(job)
    assert again["resumed"] and again["machine"] == machine
    with pytest.raises(TypeError, match="machine"):
        ShardResult(**again)  # the old conversion: the shard failed
    r = ShardResult.from_dict(again)
    assert (r.status, r.resumed, r.rows_out, r.engine_dtypes) == ("ok", True, 2, marker["engine_dtypes"])
    assert _marker(job, job.output_prefix, job.output_file)["machine"] == machine
