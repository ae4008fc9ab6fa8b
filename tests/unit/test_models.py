"""Packaged-model resolution without weights (``models.resolve_tokenizer``): which directory a
tokenizer comes from, and a missing package as a clear error that leaves no cache entry."""

from dataclasses import replace

import pytest

from specrag_batch.engines.models import PACKAGED_MODELS, ModelNotInstalledError, resolve_tokenizer


def test_resolve_tokenizer_uses_a_converted_model_and_passes_other_names(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRAG_MODEL_CACHE", str(tmp_path))
    assert resolve_tokenizer("org/any-hf-model") == "org/any-hf-model"
    m = PACKAGED_MODELS["gemma3-270m"]
    full = tmp_path / f"{m.name}-{m.sha256[:12]}"
    full.mkdir()
    (full / "config.json").write_text("{}")
    assert resolve_tokenizer("gemma3-270m") == str(full)  # no second copy of the tokenizer


def test_resolve_tokenizer_missing_package_names_it_and_caches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRAG_MODEL_CACHE", str(tmp_path))
    fake = replace(PACKAGED_MODELS["gemma3-270m"], name="fake-model",
                   files=(("specrag-no-such-package", "x/model.gguf"),))
    monkeypatch.setitem(PACKAGED_MODELS, "fake-model", fake)
    with pytest.raises(ModelNotInstalledError, match="'specrag-no-such-package' is not installed"):
        resolve_tokenizer("fake-model")
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]

