"""Known-benign vLLM warnings of an engine start are demoted whichever way the engine is started:
``engines.get_engine`` installs the demotion before vLLM builds the engine (a stand-in
``vllm.LLM``), the drafter data step builds its teacher through it, and ``drafter train``
imports no vLLM (a fresh interpreter). The records and templates: tests/unit/test_quiet_vllm.py."""

from __future__ import annotations

import logging

import pytest

from specrag_batch.core import quiet

from ..unit.test_quiet_vllm import SSM_RESET, vllm_handler  # noqa: F401 - vllm_handler: fixture

pytestmark = pytest.mark.integration


def test_every_engine_start_is_demoted_and_the_drafter_data_teacher_is_such_an_engine(vllm_handler, monkeypatch,
                                                                                        tmp_path):
    """``engines.get_engine`` installs the demotion before vLLM builds the engine: a stand-in
    ``vllm.LLM`` logs the SSM reset from its constructor as vLLM's CPU platform does, and
    nothing reaches vLLM's handler. ``drafter data`` builds its teacher through
    ``engines.get_engine`` (asked for here, then stopped); ``drafter train`` imports no vLLM."""
    import os
    import subprocess
    import sys
    import types

    import pyarrow.parquet as pq

    from specrag_batch.engines import engine as engines
    from specrag_batch.config import ModelConfig
    from specrag_batch.drafter_training.data import build_training_data

    from ..conftest import ROOT, sample_rows, small_config

    class LLM:
        def __init__(self, model, **kwargs):
            logging.getLogger("vllm.platforms.cpu").warning(SSM_RESET, "none")

        def get_tokenizer(self):
            return None

    for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU",
              "VLLM_CPU_KVCACHE_SPACE", "VLLM_LOGGING_LEVEL", "TOKENIZERS_PARALLELISM"):
        if k in os.environ:  # configure_cpu_env sets defaults: restored after the test
            monkeypatch.setenv(k, os.environ[k])
        else:
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    # engines.get_engine also imports vllm.lora.request: a stand-in, so the test does not depend on
    # an earlier test having imported the real one (it failed when run alone)
    monkeypatch.setitem(sys.modules, "vllm.lora", types.SimpleNamespace())
    monkeypatch.setitem(sys.modules, "vllm.lora.request", types.SimpleNamespace(LoRARequest=object))
    monkeypatch.setattr(engines, "_ENGINES", {})
    for name in {n for n, _ in quiet.BENIGN_VLLM}:  # as in a fresh process: no filter installed yet
        logging.getLogger(name).filters[:] = [f for f in logging.getLogger(name).filters
                                              if not isinstance(f, quiet._DemoteBenign)]
    engines.get_engine(ModelConfig(model=str(tmp_path / "model")))
    assert vllm_handler.records == []

    asked = []

    def get_engine(cfg, seed=0):
        asked.append(cfg.model)
        raise RuntimeError("stop: the teacher engine was asked for")

    monkeypatch.setattr(engines, "get_engine", get_engine)
    (tmp_path / "in").mkdir()
    pq.write_table(sample_rows("popqa", 2), tmp_path / "in" / "popqa.parquet")
    cfg = small_config()
    with pytest.raises(RuntimeError, match="stop"):
        build_training_data(str(tmp_path / "in"), str(tmp_path / "out"), cfg)
    assert asked == [cfg.verifier.model]

    code = ("import sys, specrag_batch.drafter_training.train as t; from trl import SFTTrainer; "
            "print('vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
