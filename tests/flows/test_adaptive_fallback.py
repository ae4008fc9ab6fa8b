"""Adaptive drafting and the fallback pass in real flow runs (Prefect, real vLLM with
SmolLM2-135M, real Parquet). The bookkeeping (same drafts, call counts, disaggregated runs,
the wider pass) is tested on the fake engine in tests/integration/test_adaptive_drafting.py and
tests/integration/test_fallback.py; here the real model's drafts and scores go through them."""

from __future__ import annotations

import statistics

import pytest

from specrag_batch.run import pipeline
from specrag_batch.core.parsing import normalize_answer
from specrag_batch.core.schema import validate_table

from ..conftest import sample_rows, small_config
from .test_flow import read_outputs, run_flow, write_inputs

pytestmark = pytest.mark.slow
SHARD = "mixed.parquet"


@pytest.fixture(scope="module")
def table():
    import pyarrow as pa

    return pa.concat_tables([sample_rows("popqa", 3), sample_rows("climate_fever", 3)])


def _by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["query_id"]: r for r in rows}


def test_adaptive_run_stops_agreeing_rows_and_counts_rounds(prefect_harness, tmp_path, table):
    """Rows with one round hold sampling.first_round agreeing drafts and took the fast path;
    rows with two hold the m subsets multi-perspective sampling draws (in order); the
    manifest counts rows per number of rounds."""
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_inputs(inp, {SHARD: table})
    cfg = small_config(**{"sampling.adaptive": True})
    manifest = run_flow(inp, out, cfg)
    rows, _ = read_outputs(out)
    answered = [r for r in rows if r["error"] is None]
    assert len(answered) == len(rows) == 6
    # the subsets a non-adaptive run drafts (retrieval and sampling need no LLM)
    validated = validate_table(table, SHARD)
    subsets = pipeline.multi_perspective_subsets(validated, pipeline.retrieve(validated, cfg), cfg)
    first, m = cfg.sampling.first_round, cfg.sampling.num_drafts
    counts = {"1": 0, "2": 0}
    for position, row in enumerate(validated):
        rec = _by_id(rows)[row.query_id]
        counts[str(rec["draft_rounds"])] += 1
        expected = [[row.top_documents[j].doc_id for j in s] for s in subsets[position]]
        assert [d["doc_ids"] for d in rec["drafts"]] == expected[:len(rec["drafts"])]
        if rec["draft_rounds"] == 1:
            assert len(rec["drafts"]) == first and rec["fast_path"] is True
            assert len({normalize_answer(d["answer"]) for d in rec["drafts"]}) == 1
            assert rec["score_self_consistency"] is None and rec["low_confidence"] is False
        else:
            assert rec["draft_rounds"] == 2 and len(rec["drafts"]) == m
    assert manifest["metrics"]["draft_rounds"] == {k: v for k, v in counts.items() if v}


def test_fallback_run_answers_low_confidence_rows_again_and_resumes(prefect_harness, tmp_path, table):
    """τ_min at the median log ρ of a run without it: the rows below carry the first answer
    and the Standard RAG fallback's, with answer_source; the other rows are the first run's;
    the manifest counts the fallback rows; a re-run resumes the finished shard."""
    inp = str(tmp_path / "in")
    write_inputs(inp, {SHARD: table})
    run_flow(inp, str(tmp_path / "first"), small_config())
    first, _ = read_outputs(str(tmp_path / "first"))
    tau = statistics.median(r["score"] for r in first
                            if r["error"] is None and not r["fast_path"] and r["score"] is not None)

    out = str(tmp_path / "out")
    cfg = small_config(**{"selection.tau_min": tau, "selection.fallback": "standard"})
    manifest = run_flow(inp, out, cfg)
    rows, _ = read_outputs(out)
    before = _by_id(first)
    below = [r for r in rows if r["low_confidence"]]
    assert below and len(below) < len(rows)
    for rec in rows:
        ref = before[rec["query_id"]]
        if not rec["low_confidence"]:
            assert {**rec, "run_id": None} == {**ref, "run_id": None}  # unchanged
            continue
        assert ref["score"] is None or ref["score"] < tau
        assert rec["answer_source"] == "fallback_standard" and rec["fallback_error"] is None
        assert (rec["first_answer"], rec["first_score"], rec["first_correct"]) == (
            ref["answer"], ref["score"], ref["correct"])
        assert rec["answer"] and len(rec["drafts"]) == 1  # the verifier model's one answer
        assert rec["num_documents"] == ref["num_documents"]  # from all N documents
    assert manifest["metrics"]["fallback"] == len(below) and manifest["failed_shards"] == 0

    again = run_flow(inp, out, cfg)
    assert again["resumed_shards"] == 1 and again["metrics"]["fallback"] == len(below)
    assert read_outputs(out)[0] == rows
