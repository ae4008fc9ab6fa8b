"""A drafter's LoRA adapter that cannot be served is refused by ``specrag-batch run`` before
any engine loads (issue 47 items 1 and 2): exit 2, one line naming the adapter and what does
not fit, nothing written. The real CLI process (tests/fake_engine_cli.py: the FakeEngine in
place of vLLM, so a run that got past the check would exit 0). The check itself:
tests/unit/test_drafter_adapter_config.py."""

from __future__ import annotations

import subprocess
import sys
import typing

import pyarrow.parquet as pq
import pytest

from specrag_batch.engines.lora import VLLM_LORA_RANKS

from ..conftest import ROOT, sample_rows, subprocess_env
from ..unit.test_drafter_adapter_config import base_dir, write_adapter

pytestmark = pytest.mark.integration


def _run(tmp_path, adapter, drafter) -> subprocess.CompletedProcess:
    inp = tmp_path / "in"
    inp.mkdir(exist_ok=True)
    pq.write_table(sample_rows("climate_fever", 2), inp / "s0.parquet")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"drafter: {{model: '{drafter}', adapter: '{adapter}'}}\n")
    return subprocess.run([sys.executable, "-m", "tests.fake_engine_cli", "run", "-i", str(inp), "-o",
                           str(tmp_path / "out"), "-c", str(cfg)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, env=subprocess_env(tmp_path))


@pytest.mark.parametrize("case", ["another_base", "rank_1024"])
def test_run_refuses_an_adapter_it_cannot_serve_before_anything_loads(tmp_path, case):
    drafter = base_dir(tmp_path, "qwen05", 896)
    if case == "another_base":
        adapter = write_adapter(tmp_path / "adapter", base="HuggingFaceTB/SmolLM2-135M-Instruct", hidden=576)
        want = ["HuggingFaceTB/SmolLM2-135M-Instruct", "hidden size 576", "hidden size 896", drafter]
    else:
        adapter = write_adapter(tmp_path / "adapter", r=1024, hidden=896, layers=1)
        want = ["LoRA rank 1024", "limit 512"]
    r = _run(tmp_path, adapter, drafter)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(adapter) in lines[0] and all(w in lines[0] for w in want), lines[0]
    assert not (tmp_path / "out").exists()


def test_the_ranks_the_engine_is_given_are_those_vllm_accepts():
    lora = pytest.importorskip("vllm.config.lora")
    assert VLLM_LORA_RANKS == tuple(sorted(typing.get_args(lora.MaxLoRARanks)))
