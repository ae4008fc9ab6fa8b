"""Engines start only when a row needs them (real Prefect flow runs, real Parquet; the engine
start itself is replaced, as no model may load here: a run that tried would fail the test)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from specrag_batch.engines import engine as engines
from specrag_batch.run import resume
from specrag_batch.core import storage
from specrag_batch.engines.models import ModelNotInstalledError

from ..conftest import sample_rows, small_config

pytestmark = pytest.mark.integration


def _invalid_rows(n: int) -> pa.Table:
    """Rows that fail validation: a blank query each (their documents are real)."""
    t = sample_rows("popqa", n)
    return t.set_column(t.schema.get_field_index("query"), "query", pa.array([" "] * n, pa.string()))


def _run(inp, out, cfg):
    from specrag_batch.run.orchestration import flow_manifest, speculative_rag_flow

    return flow_manifest(speculative_rag_flow(inp, out, cfg.model_dump(mode="json"), return_state=True))


def test_a_run_whose_every_row_is_invalid_starts_no_engine(prefect_harness, tmp_path, monkeypatch):
    """Every row is answered with its error, and neither the drafter nor the verifier starts
    (a start took most of a minute for no answer)."""
    monkeypatch.setattr(engines, "get_engine", lambda *a, **k: pytest.fail("an engine started"))
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    storage.write_parquet_atomic(storage.join(inp, "a.parquet"), _invalid_rows(3))
    m = _run(inp, out, small_config())
    assert (m["rows_in"], m["rows_out"], m["metrics"]["answered"], m["metrics"]["errors"]) == (3, 3, 0, 3)
    assert m["failed_shards"] == 0 and m["engine_load_seconds"] == 0.0


def test_an_engine_that_cannot_start_is_the_runs_error_and_leaves_no_run_key(prefect_harness, tmp_path, monkeypatch):
    """The first shard with a valid row starts the engines; when that fails, the other shards
    fail at once with the same error (no second start), the run raises it, and the ``_run.json``
    it wrote is removed (nothing was computed), so a corrected command is not refused."""
    calls = []

    def broken(*a, **k):
        calls.append(a)
        raise ModelNotInstalledError("package 'x' is not installed")

    monkeypatch.setattr(engines, "get_engine", broken)
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    for i, name in enumerate(("a.parquet", "b.parquet")):
        storage.write_parquet_atomic(storage.join(inp, name), sample_rows("popqa", 2, skip=2 * i))
    cfg = small_config()
    with pytest.raises(ModelNotInstalledError, match="not installed"):
        _run(inp, out, cfg)
    assert len(calls) == 1
    assert not (tmp_path / "out" / resume.RUN_FILE).exists()
    other = cfg.model_copy(update={"seed": 7})
    assert resume.check_output(out, inp, other.config_hash()) is None  # not refused


def test_a_shard_leaves_its_engines_start_out_of_its_seconds(tmp_path, monkeypatch):
    """The shard starts its lazy engines after validation; the start is the run's engine load,
    not the shard's task time (which the output cost sums), so it is not counted twice."""
    import time

    from specrag_batch.engines.lazy import LazyEngine
    from specrag_batch.run.resume import input_fingerprint
    from specrag_batch.run.shard_job import ShardJob, StorageIO, process_shard

    from ..fakes import FakeEngine
    from ..shard_inputs import CFG, shard, write

    fake = FakeEngine()

    def slow_start(cfg, seed=0):
        time.sleep(2.0)  # stands in for a model's start
        return fake

    monkeypatch.setattr(engines, "get_engine", slow_start)
    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "a.parquet", shard("q1", "q2"))
    path = str(inp / "a.parquet")
    job = ShardJob(str(inp), str(out), path, CFG.model_dump_json(), "run", input_fingerprint(path), {}, False)
    t0 = time.perf_counter()
    res = process_shard(job, StorageIO(), drafter=None, verifier=LazyEngine(CFG.verifier, CFG.seed))
    elapsed = time.perf_counter() - t0
    assert res.status == "ok" and res.rows_out == 2
    assert elapsed - res.seconds >= 2.0  # the start is left out of the shard's seconds
