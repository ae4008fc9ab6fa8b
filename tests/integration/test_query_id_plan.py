"""Which shard answers a query id held by several shards, across failed shards and re-runs, and
runs without any shard.

Each "run" here is the flow's own planning (``planning.plan_shards``, ``planning.read_all_ids``,
``run.plan_run``) and shard path (``shard.process_shard`` on real Parquet with
``StorageIO``, done markers by ``resume.mark_done``), Standard RAG with the FakeEngine as the
verifier; only Prefect's task wrapping is left out (the flow runs in tests/flows)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.run import resume
from specrag_batch.core import storage
from specrag_batch.run.planning import plan_shards, shard_output_uri
from specrag_batch.run.shard_job import ShardJob, StorageIO, draft_shard, process_shard

from ..conftest import small_config
from ..fakes import FakeEngine
from ..shard_inputs import CFG, planned_run, shard, write
from ..unit.test_schema_invalid_utf8 import _strings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def verifier():
    return FakeEngine()


def run(inp, out, verifier) -> dict[str, tuple[str, str | None]]:
    """One run, as the flow plans and runs it: {shard name: (status, error)}."""
    return planned_run(inp, out, CFG, verifier)


def outcomes(inp, out) -> dict[str, list[tuple[str, str | None]]]:
    """query id -> [(shard name, error_reason)] over the outputs of the shards now in ``inp``
    that are marked done."""
    got: dict[str, list] = {}
    inp, out = str(inp), str(out)
    for s in plan_shards(inp)[0]:
        o = shard_output_uri(inp, s, out)
        if not storage.exists(resume.marker_uri(out, o)):
            continue
        t = pq.read_table(o, columns=["query_id", "error_reason"]).to_pylist()
        for r in t:
            got.setdefault(r["query_id"], []).append((s.rsplit("/", 1)[-1], r["error_reason"]))
    return got


def answered(got, qid) -> list[str]:
    return [s for s, why in got.get(qid, []) if why != "duplicate_query_id"]


def test_a_shard_failing_planning_claims_no_id(tmp_path, verifier):
    """``a`` has no ``query`` column: it fails before any engine loads, with the message its
    task would give, and its ids are not "seen": ``b`` answers them (they came out as
    ``duplicate_query_id``, duplicates of nothing)."""
    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "a.parquet", shard("x1", "x2").drop_columns(["query"]))
    write(inp, "b.parquet", shard("x1", "x2"))
    st = run(inp, out, verifier)
    got = outcomes(inp, out)
    assert answered(got, "x1") == answered(got, "x2") == ["b.parquet"]
    assert st["a.parquet"][0] == "failed at planning"
    later = process_shard(ShardJob(str(inp), str(out), str(inp / "a.parquet"), CFG.model_dump_json(),
                                   "run", {}), StorageIO(), drafter=None, verifier=verifier)
    assert st["a.parquet"][1] == later.error  # the same error the shard's task gives
    assert "a.parquet: column 'query': required column missing" in later.error
    assert st["b.parquet"] == ("ok", None)


def test_wrong_types_and_not_parquet_fail_at_planning(tmp_path, verifier):
    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "ints.parquet", pa.table({"query_id": [1.0, 2.0], "query": ["q?", "r?"], "task": ["qa", "qa"]}))
    (inp / "csv.parquet").write_text("query_id,query\nx,y\n")
    write(inp, "ok.parquet", shard("ok"))
    st = run(inp, out, verifier)
    assert st["ok.parquet"] == ("ok", None)
    assert st["ints.parquet"][0] == st["csv.parquet"][0] == "failed at planning"
    assert st["ints.parquet"][1].startswith(f"InputSchemaError: {inp / 'ints.parquet'}: column 'query_id': row 0: "
                                            "1.0 is a double value")  # float ids; integer ids are read as strings
    assert str(inp / "csv.parquet") in st["csv.parquet"][1]


def test_a_link_to_nothing_and_a_fifo_fail_their_shard_only(tmp_path, verifier):
    """A ``.parquet`` symbolic link to nothing (an unfetched git-annex or DVC file) and a FIFO
    named ``.parquet`` each fail their own shard at planning, naming it (no traceback, no wait
    for ever); the shard beside them is answered."""
    import os

    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "ok.parquet", shard("ok"))
    (inp / "annexed.parquet").symlink_to(tmp_path / "not-fetched")
    os.mkfifo(inp / "pipe.parquet")
    st = run(inp, out, verifier)
    assert st["ok.parquet"] == ("ok", None)
    assert st["annexed.parquet"] == ("failed at planning", f"FileNotFoundError: {inp / 'annexed.parquet'}: a symbolic "
                                     f"link to {str(tmp_path / 'not-fetched')!r}, which does not exist")
    assert st["pipe.parquet"] == ("failed at planning", f"OSError: {inp / 'pipe.parquet'}: a FIFO, not a regular "
                                  "file (not read)")
    from specrag_batch.run.planning import footer_rows

    assert footer_rows(str(inp / "pipe.parquet")) is None  # the manifest's rows_in: unknown, not a wait


def test_a_shard_failing_at_run_time_then_deleted_or_fixed(tmp_path, verifier):
    """``a`` passes planning (footer and ids are fine) but fails reading its ``query`` (not
    UTF-8): in that run its ids were claimed, so ``b``'s copies say ``duplicate_query_id``.
    Deleted, the next run recomputes ``b``, which answers them; fixed instead, ``a`` answers
    them and ``b`` stays done. Either way each id is answered exactly once."""
    for fix in ("delete", "repair"):
        inp, out = tmp_path / fix / "in", tmp_path / fix / "out"
        write(inp, "a.parquet", shard("x1", "x2", query=_strings(b"ok?", b"bad \xff?")))
        write(inp, "b.parquet", shard("x1", "x2", "y"))
        st = run(inp, out, verifier)
        assert st["a.parquet"][0] == "failed" and "not valid UTF-8" in st["a.parquet"][1]
        got = outcomes(inp, out)
        assert got["x1"] == [("b.parquet", "duplicate_query_id")] and answered(got, "y") == ["b.parquet"]
        if fix == "delete":
            (inp / "a.parquet").unlink()
            assert run(inp, out, verifier) == {"b.parquet": ("ok", None)}  # recomputed, not "done"
            got = outcomes(inp, out)
            assert answered(got, "x1") == answered(got, "x2") == answered(got, "y") == ["b.parquet"]
        else:
            write(inp, "a.parquet", shard("x1", "x2"))
            assert run(inp, out, verifier) == {"a.parquet": ("ok", None), "b.parquet": ("done", None)}
            got = outcomes(inp, out)
            assert answered(got, "x1") == answered(got, "x2") == ["a.parquet"]
            assert answered(got, "y") == ["b.parquet"]


def test_a_new_shard_sorting_first_does_not_answer_a_finished_id_again(tmp_path, verifier):
    """``b`` answered ``x``; then ``0.parquet`` (sorts first) arrives holding ``x`` and ``z``:
    the finished ``b`` keeps ``x``, the newcomer's ``x`` is the duplicate."""
    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "b.parquet", shard("x"))
    assert run(inp, out, verifier) == {"b.parquet": ("ok", None)}
    write(inp, "0.parquet", shard("x", "z"))
    assert run(inp, out, verifier) == {"0.parquet": ("ok", None), "b.parquet": ("done", None)}
    got = outcomes(inp, out)
    assert answered(got, "x") == ["b.parquet"] and got["x"] == [("0.parquet", "duplicate_query_id"),
                                                              ("b.parquet", None)]
    assert answered(got, "z") == ["0.parquet"]
    dup = pq.read_table(out / "0.parquet").to_pylist()[0]["error"]
    assert dup.endswith(f"field 'query_id': duplicate id 'x', held by {inp / 'b.parquet'}")
    assert run(inp, out, verifier) == {"0.parquet": ("done", None), "b.parquet": ("done", None)}


def test_two_finished_shards_answering_one_id_are_repaired(tmp_path, verifier):
    """Outputs written before this rule can answer an id twice (``0.parquet`` finished, then
    ``b.parquet`` finished without seeing it): the next run keeps the first finished shard's
    answer and recomputes the other, whose row becomes the duplicate."""
    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "b.parquet", shard("x", "y"))
    assert run(inp, out, verifier) == {"b.parquet": ("ok", None)}
    write(inp, "0.parquet", shard("x"))  # finished the old way: nothing seen before it
    job = ShardJob(str(inp), str(out), str(inp / "0.parquet"), CFG.model_dump_json(), "old",
                   resume.input_fingerprint(str(inp / "0.parquet")))
    res = process_shard(job, StorageIO(), drafter=None, verifier=verifier)
    resume.mark_done(str(out), res.output, CFG.config_hash(), job.fingerprint, "old", res.as_dict())
    assert answered(outcomes(inp, out), "x") == ["0.parquet", "b.parquet"]
    assert run(inp, out, verifier) == {"0.parquet": ("done", None), "b.parquet": ("ok", None)}
    got = outcomes(inp, out)
    assert answered(got, "x") == ["0.parquet"] and answered(got, "y") == ["b.parquet"]


def test_drafts_made_with_other_duplicates_are_not_reused(tmp_path, verifier):
    """Disaggregated: a draft shard holds its rows' errors, ``duplicate_query_id`` among them.
    When the plan changed since it was drafted (the shard that held ``x`` is gone), its done
    marker no longer counts and the shard is drafted again."""
    inp, out, spec = tmp_path / "in", tmp_path / "out", small_config()
    write(inp, "b.parquet", shard("x", "y"))
    fp = resume.input_fingerprint(str(inp / "b.parquet"))
    then = ShardJob(str(inp), str(out), str(inp / "b.parquet"), spec.model_dump_json(), "r", fp,
                    {"x": str(inp / "a.parquet")})
    res = draft_shard(then, StorageIO(), drafter=verifier)
    resume.mark_done(then.drafts_prefix, res.output, spec.config_hash(), fp, "r", res.as_dict())
    now = ShardJob(**{**then.__dict__, "seen_before": {}})
    assert resume.completed_shard(then.drafts_prefix, then.draft_file, spec.config_hash(), fp,
                                  then.claims_digest) is not None
    assert resume.completed_shard(now.drafts_prefix, now.draft_file, spec.config_hash(), fp,
                                  now.claims_digest) is None
