"""Which models a run loads, on real runs (real vLLM SmolLM2 engine, real Prefect flow runs): a
packaged model with a bad pin or a missing package is a clear exit 2, and selection by the
draft score alone never loads the verifier."""

from __future__ import annotations

import pytest

from ..conftest import sample_rows, small_config
from .test_flow import read_outputs, write_inputs

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fault", ["sha256", "not_installed"])
def test_packaged_model_bad_pin_or_missing_package_is_a_clear_exit_2(prefect_harness, tmp_path, monkeypatch, fault):
    """A packaged model whose assembled GGUF does not match its sha256 pin, or whose package
    is not installed: `specrag-batch run` stops with the reason and exit code 2, no
    traceback, nothing converted into the model cache. (In-process CLI: the fake entry is
    added to this process's model registry; the SmolLM2 package is the real one.)"""
    from dataclasses import replace

    from typer.testing import CliRunner

    from specrag_batch.engines import models
    from specrag_batch.cli.commands import app

    real = models.PACKAGED_MODELS["smollm2-135m-instruct"]
    fake = replace(real, name="fake-model", sha256="0" * 64) if fault == "sha256" else \
        replace(real, name="fake-model", files=(("specrag-no-such-package", "x/model.gguf"),))
    monkeypatch.setitem(models.PACKAGED_MODELS, "fake-model", fake)
    monkeypatch.setenv("SPECRAG_MODEL_CACHE", str(tmp_path / "cache"))
    write_inputs(str(tmp_path / "in"), {"a.parquet": sample_rows("popqa", 1)})
    from ..conftest import ROOT
    r = CliRunner().invoke(app, ["run", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"),
                                 "-c", str(ROOT / "configs" / "test-smollm2.yaml"),
                                 "--drafter", "fake-model", "--verifier", "fake-model"])
    why = {"sha256": "sha256", "not_installed": "are not installed: specrag-no-such-package"}[fault]
    text = " ".join(r.output.split())  # the console wraps long lines
    # (Prefect's own log of the failed flow run may carry a traceback; the CLI's answer is the code)
    assert r.exit_code == 2 and why in text, (r.exit_code, text[-2000:], r.exception)
    assert not [p for p in (tmp_path / "cache").glob("*") if p.is_dir()]  # nothing half-converted


def test_selection_by_draft_score_alone_never_loads_the_verifier(prefect_harness, tmp_path):
    """Speculative RAG selecting by log ρ_draft alone (``selection.use_self_consistency`` and
    ``use_self_reflection`` false, no fallback: ``RunConfig.uses_verifier`` is False) runs no
    verifier pass and never loads or even checks the verifier: a ``verifier.model`` that does
    not exist is never opened, every row is answered from its drafts, and no draft carries a
    verifier score. The same config with log ρ_SR back on refuses that model before the run."""
    from flows.speculative_rag import run_flow
    from specrag_batch.engines.models import ModelNameError

    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_inputs(inp, {"a.parquet": sample_rows("popqa", 2, skip=2)})
    over = {"sampling.num_drafts": 2, "drafter.max_tokens": 24, "selection.use_self_consistency": False,
            "selection.use_self_reflection": False, "verifier.model": str(tmp_path / "no-such-verifier")}
    cfg = small_config(**over)
    assert not cfg.uses_verifier
    m = run_flow(inp, out, cfg.model_dump(mode="json"))
    rows = read_outputs(out)[0]
    assert m["failed_shards"] == 0 and len(rows) == 2
    for r in rows:
        assert r["drafts"] and r["error"] is None
        assert all(d["score_self_reflection"] is None and d["score_self_consistency"] is None for d in r["drafts"])
    with_sr = small_config(**{**over, "selection.use_self_reflection": True})
    assert with_sr.uses_verifier
    with pytest.raises(ModelNameError, match="verifier.model"):
        run_flow(inp, str(tmp_path / "out2"), with_sr.model_dump(mode="json"))
