"""Rows, the test config and pipeline runs on tests/fakes.py's FakeEngine, shared by
tests/unit (the rows and config only) and tests/integration (the runs).

The rows are real (the bundled demo shards) plus rows that must come out with an error; a run
is :func:`fused` (one worker) or :func:`disaggregated` (drafter side, the intermediate draft
Parquet on disk, verifier side)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from specrag_batch.run import intermediate, pipeline
from specrag_batch.core.schema import validate_table

from .conftest import sample_rows, small_config
from .fakes import FakeEngine

SHARD = "s3://bucket/in/shard-0.parquet"
INFO = pipeline.RunInfo(run_id="run-1", source_file=SHARD)


def _shard() -> pa.Table:
    """Real QA and claim rows, a choice row, and rows that must come out with an error:
    null query, duplicate id, no documents, only blank passages, choice without options."""
    good = sample_rows("popqa", 3).to_pylist() + sample_rows("climate_fever", 3).to_pylist()
    docs = good[0]["documents"]
    bad = [
        {"query_id": "q-null", "query": None, "task": "qa", "documents": docs},
        {"query_id": good[1]["query_id"], "query": "again?", "task": "qa", "documents": docs},
        {"query_id": "q-nodocs", "query": "Who?", "task": "qa", "documents": []},
        {"query_id": "q-blank", "query": "Who?", "task": "qa",
         "documents": [{"doc_id": "b", "title": "", "text": " \u200b "}]},
        {"query_id": "q-nochoices", "query": "Which?", "task": "choice", "documents": docs},
        {"query_id": "q-choice", "query": "Which city is the capital of France?", "task": "choice",
         "documents": docs, "choices": ["Paris", "Lyon", "Nice"], "gold": ["Paris"]},
    ]
    recs = good[:2] + bad[:3] + good[2:4] + bad[3:] + good[4:]
    return pa.Table.from_pylist(recs, schema=sample_rows("popqa", 1).schema)


TABLE = _shard()
ERRORS = {"q-null": "field 'query'", "q-nodocs": "field 'documents'", "q-blank": "field 'documents'",
          "q-nochoices": "field 'choices'"}
REASONS = {"q-null": "empty_query", "q-nodocs": "no_documents", "q-blank": "no_documents",
           "q-nochoices": "no_choices"}
"""The ``error_reason`` code of each error row (the duplicate id: ``duplicate_query_id``)."""


def config(**over):
    """The SmolLM2 test config with random subsets (no encoder, no K-Means: the fast default
    here); :func:`test_chunking_with_clustered_subsets` runs the paper's clustering."""
    return small_config(**{"sampling.strategy": "random", **over})


CLUSTERED = {"sampling.strategy": "cluster", "sampling.kmeans_n_init": 1}
"""The paper's clustering; one K-Means start per row keeps the CPU cost small (the subsets
are still the clustered ones)."""


def fresh_rows():
    """Validated rows (stages change rows in place, so every run gets its own)."""
    return validate_table(TABLE, SHARD)


def fused(cfg, drafter=None, verifier=None):
    drafter = drafter or FakeEngine()
    return pipeline.process_rows(fresh_rows(), cfg, drafter=drafter, verifier=verifier or drafter, info=INFO)


def disaggregated(cfg, tmp_path, drafter=None, verifier=None):
    """Drafter side, intermediate draft Parquet on disk, verifier side (as run.draft_shard /
    run.verify_shard hand over)."""
    rows = fresh_rows()
    drafts = pipeline.draft_stage(rows, cfg, drafter=drafter or FakeEngine())
    path = tmp_path / "_drafts" / "shard-0.parquet"
    path.parent.mkdir(exist_ok=True)
    pq.write_table(intermediate.to_table(rows, drafts, documents=cfg.verifier_reads_documents), path)
    rows2, drafts2 = intermediate.from_table(pq.read_table(path), str(path))
    return pipeline.verify_stage(rows2, drafts2, cfg, verifier=verifier or FakeEngine(), info=INFO)
