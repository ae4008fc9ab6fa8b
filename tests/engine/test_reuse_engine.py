"""Reuse with the real vLLM engine (issue 52 item 3; SmolLM2-135M-Instruct on CPU, greedy
decoding): rows copied from an earlier night equal the rows a recomputation of that night
writes, on a few real rows (the fake engine checks many: tests/integration/test_reuse*.py)."""

import pyarrow.parquet as pq
import pytest

from specrag_batch.run import resume
from specrag_batch.engines.engine import get_engine
from specrag_batch.run.shard_job import ShardJob, StorageIO, process_shard

from ..conftest import sample_rows, small_config

pytestmark = pytest.mark.slow
OWN = ("run_id", "source_file", "answer_source", "reused_from", "reused_answer_source")


def _night(tmp_path, name, table, cfg, engine):
    (tmp_path / f"in-{name}").mkdir()
    pq.write_table(table, tmp_path / f"in-{name}" / "s.parquet")
    job = ShardJob(str(tmp_path / f"in-{name}"), str(tmp_path / name), str(tmp_path / f"in-{name}" / "s.parquet"),
                   cfg.model_dump_json(), f"run-{name}", {"size": 1})
    res = process_shard(job, StorageIO(), drafter=engine, verifier=engine)
    assert res.status == "ok", res.error
    resume.mark_done(job.output_prefix, job.output_file, cfg.config_hash(), {"size": 1}, job.run_id, res.as_dict())
    return pq.read_table(job.output_file).to_pylist()


def test_reused_rows_equal_their_recomputation_on_the_real_engine(tmp_path):
    cfg = small_config(**{"sampling.num_drafts": 2, "sampling.strategy": "random"})
    engine = get_engine(cfg.drafter, cfg.seed)
    table = sample_rows("climate_fever", 3)
    first = _night(tmp_path, "n1", table, cfg, engine)
    assert all(r["error"] is None for r in first)
    fresh = _night(tmp_path, "fresh", table, cfg, engine)
    reusing = cfg.model_copy(update={"reuse": cfg.reuse.model_copy(update={"sources": [str(tmp_path / "n1")]})})
    again = _night(tmp_path, "n2", table, reusing, engine)
    assert [r["answer_source"] for r in again] == ["reused"] * 3
    for r, f in zip(again, fresh, strict=True):
        assert r["reused_answer_source"] == f["answer_source"]
        assert {k: v for k, v in r.items() if k not in OWN} == {k: v for k, v in f.items() if k not in OWN}
