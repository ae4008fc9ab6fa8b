"""The fallback pass (``selection.fallback``, stage ``Fallback``) on the FAKE engine
(tests/fakes.py; real SmolLM2 tokenizer, real rows, real Parquet and a real FAISS index for
``wider``): rows selection flags low-confidence are answered again within the shard and come
out with both answers and ``answer_source``; every other row is the record of a run without
the fallback. Its config rules: tests/unit/test_fallback.py."""

from __future__ import annotations

import statistics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.run import pipeline
from specrag_batch.stages.evaluation import summarize
from specrag_batch.index import build_index
from specrag_batch.run.manifest import merge_summaries
from specrag_batch.run.shard_job import ShardJob, StorageIO, draft_shard, process_shard, verify_shard

from ..conftest import ROOT, sample_rows
from ..fakes import FakeCall, FakeEngine
from ..pipeline_runs import INFO, TABLE, config, fresh_rows, fused

pytestmark = pytest.mark.integration


NEW = ("answer_source", "first_answer", "first_score", "first_correct", "fallback_error")
"""Output columns the fallback fills."""


@pytest.fixture(scope="module")
def tau():
    """τ_min at the median log ρ of the rows the verifier scored, so some fall below it."""
    scores = [r["score"] for r in fused(config()) if r["error"] is None and not r["fast_path"]]
    return statistics.median(scores)


def test_flagged_rows_carry_both_answers_and_the_others_are_unchanged(tau):
    first_drafter, first_verifier = FakeEngine(), FakeEngine()
    first = fused(config(**{"selection.tau_min": tau}), first_drafter, first_verifier)
    drafter, verifier = FakeEngine(), FakeEngine()
    records = fused(config(**{"selection.tau_min": tau, "selection.fallback": "standard"}), drafter, verifier)
    standard = {r["query_id"]: r for r in pipeline.process_rows(
        fresh_rows(), config(mode="standard"), drafter=None, verifier=FakeEngine(), info=INFO)}
    flagged = [r["query_id"] for r in first if r["low_confidence"]]
    assert 0 < len(flagged) < sum(r["error"] is None for r in first)
    for before, rec in zip(first, records):
        if not before["low_confidence"]:
            assert rec == before  # unflagged rows (and error rows): the record without fallback
            assert rec["answer_source"] == ("first" if rec["error"] is None else None)
            continue
        std = standard[rec["query_id"]]
        assert rec["answer_source"] == "fallback_standard" and rec["low_confidence"] is True
        assert (rec["first_answer"], rec["first_score"], rec["first_correct"]) == (
            before["answer"], before["score"], before["correct"])
        for key in ("answer", "rationale", "score", "score_draft", "drafts", "num_documents",
                    "correct", "exact_match", "f1"):
            assert rec[key] == std[key], key  # Standard RAG's answer from all N documents
        assert set(before["flags"]) | set(std["flags"]) == set(rec["flags"])
        assert rec["fallback_error"] is None
    # the first pass's calls, then one batched Standard RAG call on the verifier engine for
    # the flagged rows only
    assert drafter.calls == first_drafter.calls
    assert verifier.calls == [*first_verifier.calls, FakeCall("generate", len(flagged), "standard RAG")]
    summary = summarize(records)
    assert summary["fallback"] == len(flagged) and summary["fallback_failed"] == 0
    assert summary["low_confidence"] == len(flagged)
    assert merge_summaries([summary, summary])["fallback"] == 2 * len(flagged)


def test_fallback_off_leaves_the_new_columns_empty():
    records = fused(config())
    assert all(r[k] is None for r in records for k in NEW if k != "answer_source")
    assert summarize(records)["fallback"] == 0


def test_chunked_fallback_gives_the_same_records(tau):
    cfg = {"selection.tau_min": tau, "selection.fallback": "standard"}
    assert fused(config(chunk_rows=2, **cfg)) == fused(config(**cfg))


def test_a_fallback_without_an_answer_keeps_the_first_one(tau):
    """The Standard RAG prompt cannot fit a verifier window of 256 tokens with 250 of them
    reserved for the answer: the flagged rows keep their first answer, flag
    ``fallback_failed``, and say why in ``fallback_error``."""
    over = {"selection.tau_min": tau, "verifier.max_model_len": 256, "verifier.max_tokens": 250}
    first = fused(config(**over))
    records = fused(config(**over, **{"selection.fallback": "standard"}))
    failed = [r for r in records if r["fallback_error"] is not None]
    assert failed and len(failed) == sum(bool(r["low_confidence"]) for r in first)
    for before, rec in zip(first, records):
        if rec["fallback_error"] is None:
            assert rec == before
            continue
        assert "fallback_failed" in rec["flags"] and rec["answer_source"] == "first"
        assert "field 'query'" in rec["fallback_error"]
        assert {**rec, "flags": before["flags"], "fallback_error": None} == before
    assert summarize(records)["fallback_failed"] == len(failed) and summarize(records)["fallback"] == 0


def _write_shard(tmp_path, table, name="shard-0.parquet") -> ShardJob:
    (tmp_path / "in").mkdir(exist_ok=True)
    pq.write_table(table, tmp_path / "in" / name)
    return ShardJob(str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "in" / name),
                    "", "run-1", {"size": 1})


def _shard_runs(tmp_path, cfg, table, drafter_for_verify=None):
    """(fused output records, disaggregated output records) of one shard written to disk."""
    job = _write_shard(tmp_path, table)
    job = ShardJob(**{**job.__dict__, "config_json": cfg.model_dump_json()})
    res = process_shard(job, StorageIO(), drafter=FakeEngine(), verifier=FakeEngine())
    assert res.status == "ok", res.error
    fused_records = pq.read_table(job.output_file).to_pylist()
    drafted = draft_shard(job, StorageIO(), drafter=FakeEngine())
    res = verify_shard(job, StorageIO(), verifier=FakeEngine(), drafted=drafted.as_dict(),
                       drafter=drafter_for_verify)
    assert res.status == "ok", res.error
    return fused_records, pq.read_table(job.output_file).to_pylist()


def test_disaggregated_fallback_reads_the_documents_again_and_equals_fused(tau, tmp_path):
    """The draft Parquet holds no documents; the verifier side reads them from the input
    shard for the fallback, so both topologies give the same records."""
    cfg = config(**{"selection.tau_min": tau, "selection.fallback": "standard"})
    fused_records, split_records = _shard_runs(tmp_path, cfg, TABLE)
    assert any(r["answer_source"] == "fallback_standard" for r in fused_records)
    assert split_records == fused_records


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A real FAISS index over 40 passages of the bundled PopQA corpus."""
    root = tmp_path_factory.mktemp("index")
    corpus = pq.read_table(ROOT / "samples" / "corpus" / "popqa_passages.parquet").slice(0, 40)
    pq.write_table(corpus, root / "corpus.parquet")
    build_index(str(root / "corpus.parquet"), str(root / "index"))
    return str(root / "index")


def test_wider_fallback_drafts_from_more_documents(index, tmp_path):
    """``wider``: flagged rows are drafted again from their own documents followed by the
    index's, up to N' = fallback_top_n; a row without documents gets the index's top N'."""
    rows = [{**r, "documents": r["documents"][:3]} for r in sample_rows("popqa", 4).to_pylist()]
    rows[3] = {**rows[3], "documents": None}  # retrieved from the index in both passes
    table = pa.Table.from_pylist(rows, schema=TABLE.schema)
    base = {"retrieval.index": index, "retrieval.top_n": 3, "selection.tau_min": 0.0}
    cfg = config(**base, **{"selection.fallback": "wider", "retrieval.fallback_top_n": 8})
    fused_records, split_records = _shard_runs(tmp_path, cfg, table, drafter_for_verify=FakeEngine())
    assert split_records == fused_records  # the verifier side drafts again with its drafter
    wider = [r for r in fused_records if r["answer_source"] == "fallback_wider"]
    assert wider, "τ = 0 flags every row not on the fast path"
    corpus_ids = set(pq.read_table(ROOT / "samples" / "corpus" / "popqa_passages.parquet")
                     .slice(0, 40).column("doc_id").to_pylist())
    for rec in wider:
        assert rec["num_documents"] == 8 and rec["first_answer"] is not None
        used = {i for d in rec["drafts"] for i in d["doc_ids"]}
        own = {d["doc_id"] for d in next(r for r in rows if r["query_id"] == rec["query_id"])["documents"] or []}
        if own:
            assert used & (corpus_ids - own)  # subsets reach passages the first pass did not have
        else:
            assert used <= corpus_ids
    assert summarize(fused_records)["fallback"] == len(wider)
