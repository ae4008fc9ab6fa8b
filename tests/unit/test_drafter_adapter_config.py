"""``drafter.adapter`` (issue 40 item 1): a LoRA adapter served unmerged on the drafter's base.
A config without it keeps its hash (runs made before the key resume), one with it hashes
apart; it is a drafter key only; a run checks it before anything loads (adapter files there,
trained on ``drafter.model``), and the run manifest names the adapter. Serving it:
tests/engine/test_drafter_training.py."""

from __future__ import annotations

import json

import pytest

from specrag_batch.config import RunConfig
from specrag_batch.identity import drafter_identity
from specrag_batch.models import ModelNameError, check_config_models


def test_adapter_is_a_drafter_key_hashed_only_when_set():
    base = RunConfig()
    assert base.drafter.adapter is None
    data = base.model_dump(mode="json")
    del data["drafter"]["adapter"]  # a config dumped before the key existed
    assert RunConfig.model_validate(data).config_hash() == base.config_hash()
    # recorded at fa4b01a (test_config_drafter_prompt.py), long before the key
    assert RunConfig.model_validate({"verifier": {"deduplicate_drafts": False}, "sampling": {"adaptive": False},
                                     "selection": {"use_self_consistency": True, "use_self_reflection": True}}
                                    ).config_hash() == "420716c9f187c07c"
    tuned = RunConfig.model_validate({"drafter": {"adapter": "drafters/x/adapter"}})
    assert tuned.config_hash() != base.config_hash()
    assert tuned.config_hash() != RunConfig.model_validate({"drafter": {"adapter": "drafters/y/adapter"}}).config_hash()
    for bad in ({"verifier": {"adapter": "a"}}, {"drafter": {"adapter": ""}}, {"drafter": {"adaptor": "a"}}):
        with pytest.raises(ValueError):
            RunConfig.model_validate(bad)


def tuned_dir(tmp_path, base="smollm2-135m-instruct"):
    d = tmp_path / "tuned"
    (d / "adapter").mkdir(parents=True)
    (d / "adapter" / "adapter_config.json").write_text(json.dumps({"r": 16, "peft_type": "LORA"}))
    (d / "adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    (d / "training_manifest.json").write_text(json.dumps({"manifest_id": "abc123", "base_model": base,
                                                          "base_path": "/cache/" + base}))
    return d


def test_a_run_checks_the_adapter_before_anything_loads(tmp_path):
    d = tuned_dir(tmp_path)
    cfg = lambda **kw: RunConfig.model_validate({"drafter": {"model": "smollm2-135m-instruct", **kw},  # noqa: E731
                                                 "verifier": {"model": "smollm2-135m-instruct"}})
    assert check_config_models(cfg(adapter=str(d / "adapter")))["drafter.adapter"] == "local"
    with pytest.raises(ModelNameError, match="not a LoRA adapter directory"):
        check_config_models(cfg(adapter=str(d)))  # the tuned dir itself, not its adapter/
    other = tuned_dir(tmp_path / "o", base="qwen2.5-coder-0.5b-instruct")
    with pytest.raises(ModelNameError, match="trained on 'qwen2.5-coder-0.5b-instruct'"):
        check_config_models(cfg(adapter=str(other / "adapter")))


def test_the_run_manifest_names_the_adapter(tmp_path):
    d = tuned_dir(tmp_path)
    ident = drafter_identity("smollm2-135m-instruct", str(d / "adapter"))
    assert ident["adapter"]["training_manifest_id"] == "abc123"
    assert len(ident["adapter"]["weights_sha256"]) == 64
    assert "adapter" not in drafter_identity("smollm2-135m-instruct")
