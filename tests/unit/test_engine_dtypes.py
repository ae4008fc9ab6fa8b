"""Each engine's dtype as the run records it: read from the loaded vLLM engine (unknown, with a
warning, when it cannot be read), the output's dtypes naming hosts that differ and shards that
recorded none, and the manifest carrying them.

On CPU the dtype is chosen per host (``engines.cpu_dtype``: bfloat16 with native bf16 units,
float32 otherwise) unless the config pins it, and it is not in the config hash: outputs of
two hosts differ in numerics and speed (4x) with the same config. The shard tasks recording it
in their done markers: tests/integration/test_engine_dtypes.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from specrag_batch.engines import engine as engines
from specrag_batch.engines.usage import EngineStats
from specrag_batch.engines.engine import dtype_name, engine_dtype
from specrag_batch.run.manifest import build_manifest, output_dtypes
from specrag_batch.run.shard_job import ShardResult

from ..conftest import small_config


def test_the_dtype_is_read_from_the_loaded_vllm_engine():
    """vLLM 0.32 keeps the resolved dtype (a ``torch.dtype``) in ``LLM.llm_engine.model_config``
    (``LLM.model_config`` is the same object)."""
    import torch

    llm = SimpleNamespace(llm_engine=SimpleNamespace(model_config=SimpleNamespace(dtype=torch.bfloat16)))
    assert engine_dtype(llm) == "bfloat16"
    assert engine_dtype(SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float32))) == "float32"
    assert dtype_name("torch.float16") == "float16" and dtype_name("float32") == "float32"


def test_an_engine_without_a_readable_dtype_is_unknown_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="specrag_batch.engines.engine"):
        assert engine_dtype(SimpleNamespace()) is None
    assert "dtype is not readable" in caplog.text


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
