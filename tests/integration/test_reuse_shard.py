"""Reuse at the shard (issue 52), without Prefect: rows searched in an index are keyed after
retrieval (before drafting) and reused; rows the fallback pass re-answered are reused with the
fallback's answer (the pass kept in ``reused_answer_source``) and equal their recomputation;
error rows are computed again. One shard per "night" on the fake engine, with the product's
shard job, key index and done markers."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.run import resume
from specrag_batch.run.shard_job import ShardJob, StorageIO, process_shard

from ..conftest import sample_rows
from ..fakes import FakeEngine
from ..pipeline_runs import TABLE, config
from .test_fallback import index, tau  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration
OWN = ("run_id", "source_file", "answer_source", "reused_from", "reused_answer_source")


def _night(tmp_path, name: str, table: pa.Table, cfg, engine=None) -> list[dict]:
    """One shard answered into ``<tmp>/<name>`` and marked done, as the flow does."""
    (tmp_path / f"in-{name}").mkdir()
    pq.write_table(table, tmp_path / f"in-{name}" / "s.parquet")
    job = ShardJob(str(tmp_path / f"in-{name}"), str(tmp_path / name), str(tmp_path / f"in-{name}" / "s.parquet"),
                   cfg.model_dump_json(), f"run-{name}", {"size": 1})
    engine = engine or FakeEngine()
    res = process_shard(job, StorageIO(), drafter=engine, verifier=engine)
    assert res.status == "ok", res.error
    resume.mark_done(job.output_prefix, job.output_file, cfg.config_hash(), {"size": 1}, job.run_id, res.as_dict())
    return pq.read_table(job.output_file).to_pylist()


def _reusing(cfg, *sources):
    return cfg.model_copy(update={"reuse": cfg.reuse.model_copy(update={"sources": [str(s) for s in sources]})})


def _check_equal(reused: list[dict], fresh: list[dict]) -> None:
    for r, f in zip(reused, fresh, strict=True):
        assert r["query_id"] == f["query_id"]
        if r["answer_source"] == "reused":
            assert r["reused_answer_source"] == f["answer_source"]
            assert {k: v for k, v in r.items() if k not in OWN} == {k: v for k, v in f.items() if k not in OWN}
        else:  # computed: the same but for the run and its input file (named in row errors)
            assert r == {**f, "run_id": r["run_id"], "source_file": r["source_file"],
                         "error": f["error"] and f["error"].replace(f["source_file"], r["source_file"])}


def test_rows_searched_in_the_index_are_keyed_after_retrieval_and_reused(index, tmp_path):
    rows = [{**r, "documents": None} for r in sample_rows("popqa", 4).to_pylist()]
    table = pa.Table.from_pylist(rows, schema=TABLE.schema)
    cfg = config(**{"retrieval.index": index, "retrieval.top_n": 3})
    first = _night(tmp_path, "n1", table, cfg)
    assert all(r["error"] is None for r in first)
    engine = FakeEngine()
    again = _night(tmp_path, "n2", table, _reusing(cfg, tmp_path / "n1"), engine)
    assert [r["answer_source"] for r in again] == ["reused"] * 4
    assert engine.calls == []  # retrieval only: no engine call for a reused row
    _check_equal(again, first)


def test_rows_the_fallback_answered_are_reused_and_error_rows_computed(tau, tmp_path):
    cfg = config(**{"selection.tau_min": tau, "selection.fallback": "standard"})
    first = _night(tmp_path, "n1", TABLE, cfg)
    assert any(r["answer_source"] == "fallback_standard" for r in first)
    again = _night(tmp_path, "n2", TABLE, _reusing(cfg, tmp_path / "n1"))
    reused = [r for r in again if r["answer_source"] == "reused"]
    assert {r["reused_answer_source"] for r in reused} == {"first", "fallback_standard"}
    assert all(r["error"] is not None for r in again if r["answer_source"] != "reused")  # only error rows computed
    fresh = _night(tmp_path, "fresh", TABLE, cfg)
    _check_equal(again, fresh)


def test_a_changed_gold_is_graded_tonight(tmp_path):
    cfg = config()
    first = _night(tmp_path, "n1", TABLE, cfg)
    regolded = TABLE.set_column(TABLE.schema.get_field_index("gold"), "gold",
                                pa.array([["no such answer"]] * TABLE.num_rows, TABLE.schema.field("gold").type))
    again = _night(tmp_path, "n2", regolded, _reusing(cfg, tmp_path / "n1"))
    fresh = _night(tmp_path, "fresh", regolded, cfg)
    assert sum(r["answer_source"] == "reused" for r in again) == sum(r["error"] is None for r in first)
    _check_equal(again, fresh)
