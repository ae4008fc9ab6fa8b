"""A shard that fails on an exception without a message still says why (issue 47 item 3): the
failed-shard line of the manifest and the summary ended in an empty reason when FAISS's
``assert d == self.d`` failed every shard (``AssertionError()`` has no message). Real Prefect
flow run, real Parquet; the shard's work is replaced by that FAISS search (queries of another
width than the index's)."""

from __future__ import annotations

import numpy as np
import pytest

from specrag_batch.run import orchestration
from specrag_batch.core import storage
from specrag_batch.run.planning import exception_reason

from ..conftest import sample_rows, small_config

pytestmark = pytest.mark.integration

FAISS_ASSERT = "faiss/class_wrappers.py:"


def _search_of_another_width():
    import faiss

    faiss.IndexFlatIP(16).search(np.zeros((1, 384), np.float32), 2)  # raises AssertionError()


def test_an_exception_without_a_message_gives_its_type_and_where_it_was_raised():
    with pytest.raises(AssertionError) as raised:
        _search_of_another_width()
    assert str(raised.value) == ""  # what FAISS gives
    reason = exception_reason(raised.value)
    assert reason.startswith(f"AssertionError at {FAISS_ASSERT}") and reason.endswith(": assert d == self.d"), reason
    assert exception_reason(AssertionError()) == "AssertionError"  # never raised: no frame to name
    assert exception_reason(ValueError("bad row")) == "bad row"


def test_a_shard_failing_on_a_bare_assert_names_the_assert(prefect_harness, tmp_path, monkeypatch):
    monkeypatch.setattr(orchestration, "process_shard", lambda job, io, **kw: _search_of_another_width())
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    storage.write_parquet_atomic(storage.join(inp, "a.parquet"), sample_rows("popqa", 2))
    m = orchestration.flow_manifest(orchestration.speculative_rag_flow(
        inp, out, small_config().model_dump(mode="json"), return_state=True))
    [shard] = m["shards"]
    assert shard["status"] == "failed" and m["failed_shards"] == 1
    head = f"AssertionError: {storage.join(inp, 'a.parquet')}: AssertionError at {FAISS_ASSERT}"
    assert shard["error"].startswith(head) and shard["error"].endswith(": assert d == self.d"), shard
