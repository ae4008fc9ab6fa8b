"""The benchmark scripts' tests (benchmarks/tests; ``make test-bench``), apart from the product's
tests: benchmarks/ on ``sys.path`` so a test imports a script as a module (``import decision``),
the ``bench`` extra (scipy) installed. No vLLM engine runs here; product runs use the product's
fake engine (``benchmarks/tests/fakes.py``) or the product's own writers (``product_runs``);
nothing here imports the product's tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
os.environ.setdefault("SPECRAG_PROGRESS", "0")


def small_config(**over):
    """configs/test-smollm2.yaml (SmolLM2-135M in both roles, short drafts, m/k scaled down) with
    ``over``'s dotted keys set (``small_config(mode="standard", **{"sampling.m": 2})``)."""
    from specrag_batch.config import load_config

    cfg = load_config(ROOT / "configs" / "test-smollm2.yaml")
    data = cfg.model_dump()
    for k, v in over.items():
        node = data
        parts = k.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = v
    return type(cfg).model_validate(data)


def pytest_configure(config):
    config.addinivalue_line("markers", "bench: a test of the benchmark scripts (benchmarks/tests)")


def pytest_collection_modifyitems(config, items):
    """Mark each test here ``bench`` (``-m bench`` / ``-m "not bench"``)."""
    here = BENCHMARKS / "tests"
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.bench)




@pytest.fixture(autouse=True)
def _from_the_repository_root(monkeypatch):
    """Each test runs in the repository root, as the scripts do (``configs/bench.yaml``,
    ``../shared/data`` are relative to it), whether pytest started there or in benchmarks/."""
    monkeypatch.chdir(ROOT)


@pytest.fixture(autouse=True)
def _shipped_packaged_models_count_as_installed(monkeypatch):
    """As in the product's tests: a model of the shipped ``PACKAGED_MODELS`` table counts as
    installed (``models.packaged_missing``), so loading configs/bench.yaml answers the same on a
    machine that installed only the test models."""
    from specrag_batch.engines import models

    real, shipped = models.packaged_missing, frozenset(models.PACKAGED_MODELS)
    monkeypatch.setattr(models, "packaged_missing", lambda name: [] if name in shipped else real(name))
