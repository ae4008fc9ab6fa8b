"""Each engine's dtype is recorded with the shards it computed and in the run manifest.

On CPU the dtype is chosen per host (``engines.cpu_dtype``: bfloat16 with native bf16 units,
float32 otherwise) unless the config pins it, and it is not in the config hash: outputs of
two hosts differ in numerics and speed (4x) with the same config. The shard tasks here are the
flow's own (``orchestration.process_shard_task`` / ``draft_shard_task`` / ``verify_shard_task``
bodies, their ``_finish`` and done markers by ``resume.mark_done``) with tests/fakes.py's
FakeEngine as the engine; only Prefect's task wrapping and retrying I/O are left out (the CLI
end to end, with the same fakes, is tests/unit/test_run_costs.py)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from specrag_batch import engines, orchestration, resume
from specrag_batch.engine_usage import EngineStats, merge_dtypes
from specrag_batch.engines import dtype_name, engine_dtype, used_dtypes
from specrag_batch.manifest import build_manifest, output_dtypes
from specrag_batch.shard import ShardJob, ShardResult, StorageIO

from ..conftest import sample_rows, small_config
from ..fakes import FakeEngine


def test_the_dtype_is_read_from_the_loaded_vllm_engine():
    """vLLM 0.32 keeps the resolved dtype (a ``torch.dtype``) in ``LLM.llm_engine.model_config``
    (``LLM.model_config`` is the same object)."""
    import torch

    llm = SimpleNamespace(llm_engine=SimpleNamespace(model_config=SimpleNamespace(dtype=torch.bfloat16)))
    assert engine_dtype(llm) == "bfloat16"
    assert engine_dtype(SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float32))) == "float32"
    assert dtype_name("torch.float16") == "float16" and dtype_name("float32") == "float32"


def test_an_engine_without_a_readable_dtype_is_unknown_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="specrag_batch.engines"):
        assert engine_dtype(SimpleNamespace()) is None
    assert "dtype is not readable" in caplog.text


def test_dtypes_merge_per_model_and_only_for_engines_that_were_called():
    assert merge_dtypes([{"m": "float32"}, {"m": "bfloat16", "v": None}, None, {"m": "float32+bfloat16"}]) \
        == {"m": "bfloat16+float32"}  # v unknown: left out, never guessed
    d, v = FakeEngine(name="d", dtype="bfloat16"), FakeEngine(name="v", dtype="float32")
    assert used_dtypes([d, v, None], {"v": {"calls": 2}}) == {"v": "float32"}  # d passed, never called


def _shard(name: str, dtypes: dict | None, status: str = "ok") -> dict:
    s = ShardResult(name, name + ".out", status, rows_out=2, engines={"m": EngineStats(calls=1).as_dict()}).as_dict()
    if dtypes is None:  # a done marker written before the field existed
        del s["engine_dtypes"]
    else:
        s["engine_dtypes"] = dtypes
    return s


def test_the_outputs_dtypes_name_hosts_that_differ_and_shards_that_recorded_none():
    assert output_dtypes([_shard("a", {"m": "float32"}), _shard("b", {"m": "float32"})]) == {"m": "float32"}
    assert output_dtypes([_shard("a", {"m": "float32"}), _shard("b", {"m": "bfloat16"})]) == {"m": "bfloat16+float32"}
    assert output_dtypes([_shard("a", {"m": "float32"}), _shard("b", None)]) == {"m": "float32+unknown"}
    assert output_dtypes([_shard("a", None)]) == {"m": "unknown"}
    assert output_dtypes([_shard("a", {"m": "float32"}), _shard("b", {"m": "bfloat16"}, "failed")]) == {"m": "float32"}


def test_the_manifest_carries_the_dtypes_of_the_output_and_of_each_shard(tmp_path):
    cfg = small_config()
    results = [ShardResult(**_shard("a", {"m": "bfloat16"})), ShardResult(**_shard("b", {"m": "float32"}))]
    m = build_manifest(cfg, "r1", str(tmp_path / "in"), str(tmp_path / "out"), results, [], seconds=1.0,
                       engines=engines.EngineUsage(), engine_load_seconds=0.0, execution={})
    assert m["engine_dtypes"] == m["cost"]["output"]["engine_dtypes"] == {"m": "bfloat16+float32"}
    assert [s["engine_dtypes"] for s in m["shards"]] == [{"m": "bfloat16"}, {"m": "float32"}]
    assert m["cost"]["output"]["engines"]["m"]["calls"] == 2  # the usage sums as before, dtype beside it


@pytest.fixture()
def flow_parts(tmp_path, monkeypatch):
    """The flow's shard tasks on local storage: ``get_engine`` hands out ``current["engine"]``
    (a FakeEngine; usage snapshots see it), Prefect's logger and retrying I/O replaced."""
    current: dict = {}
    monkeypatch.setattr(orchestration, "get_engine", lambda cfg, seed=0: current["engine"])
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
