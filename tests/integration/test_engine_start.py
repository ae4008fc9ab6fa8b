"""Engines start only when a row needs them (real Prefect flow runs, real Parquet; the engine
start itself is replaced, as no model may load here: a run that tried would fail the test)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from specrag_batch import engines, resume, storage
from specrag_batch.models import ModelNotInstalledError

from ..conftest import sample_rows, small_config

pytestmark = pytest.mark.integration


def _invalid_rows(n: int) -> pa.Table:
    """Rows that fail validation: a blank query each (their documents are real)."""
    t = sample_rows("popqa", n)
    return t.set_column(t.schema.get_field_index("query"), "query", pa.array([" "] * n, pa.string()))


def _run(inp, out, cfg):
    from specrag_batch.orchestration import flow_manifest, speculative_rag_flow

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
