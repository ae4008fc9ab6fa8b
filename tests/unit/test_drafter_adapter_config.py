"""``drafter.adapter`` (issue 40 item 1): a LoRA adapter served unmerged on the drafter's base.
A config without it keeps its hash (runs made before the key resume), one with it hashes
apart; it is a drafter key only; a run checks it before anything loads (adapter files there,
trained on ``drafter.model``), and the run manifest names the adapter. Serving it:
tests/engine/test_drafter_training.py."""

from __future__ import annotations

import json

import pytest

from specrag_batch.config import RunConfig
from specrag_batch.engines.weights import drafter_identity
from specrag_batch.engines.lora import VLLM_LORA_RANKS, AdapterError, engine_lora_rank, read_adapter
from specrag_batch.engines.models import ModelNameError, check_adapter, check_config_models


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


def write_adapter(d, base=None, r=16, hidden=576, layers=2, config=None):
    """A PEFT LoRA directory ``d`` as ``save_pretrained`` writes it: ``adapter_config.json``
    and ``adapter_model.safetensors`` holding q_proj and o_proj's A and B of each layer (rank
    ``r``, hidden size ``hidden``; zeros, a few KB)."""
    import numpy as np
    from safetensors.numpy import save_file

    d.mkdir(parents=True, exist_ok=True)
    (d / "adapter_config.json").write_text(json.dumps(config or {
        "r": r, "peft_type": "LORA", "lora_alpha": 32, "target_modules": ["q_proj", "o_proj"],
        **({"base_model_name_or_path": base} if base else {})}))
    pre = "base_model.model.model.layers.{}.self_attn.{}.lora_{}.weight"
    save_file({pre.format(i, m, ab): np.zeros(shape, np.float32) for i in range(layers)
               for m, ab, shape in (("q_proj", "A", (r, hidden)), ("q_proj", "B", (hidden, r)),
                                    ("o_proj", "A", (r, hidden)), ("o_proj", "B", (hidden, r)))},
              str(d / "adapter_model.safetensors"))
    return d


def tuned_dir(tmp_path, base="smollm2-135m-instruct"):
    d = tmp_path / "tuned"
    write_adapter(d / "adapter")
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


def base_dir(tmp_path, name, hidden, layers=24, model_type="qwen2"):
    """A local model directory as ``drafter.model`` names one (``config.json`` only)."""
    d = tmp_path / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": hidden,
                                               "num_hidden_layers": layers, "intermediate_size": 4 * hidden}))
    return str(d)


def test_the_adapter_is_read_from_its_config_and_safetensors_header(tmp_path):
    a = write_adapter(tmp_path / "a", base="some/base", r=8, hidden=64, layers=3)
    info = read_adapter(str(a))
    assert (info.base, info.rank, sorted(info.hidden), info.layers) == ("some/base", 8, [64], 3)
    cfg = {"r": 8, "rank_pattern": {"q_proj": 32}}  # a per-module rank above r counts
    assert read_adapter(str(write_adapter(tmp_path / "b", r=8, config=cfg))).rank == 32
    (tmp_path / "b" / "adapter_model.safetensors").write_bytes(b"weights")
    with pytest.raises(AdapterError, match="not a readable safetensors file"):
        read_adapter(str(tmp_path / "b"))
    assert engine_lora_rank(16) == 16 and engine_lora_rank(300) == 320 and engine_lora_rank(1) == 1


def test_an_adapter_for_another_base_is_refused_naming_both(tmp_path):
    """Issue 47 item 1: an adapter of SmolLM2-135M (hidden size 576) on a 0.5B drafter (896)
    was served to exit 0; refused before any engine loads, one line naming both bases and
    both sizes."""
    drafter = base_dir(tmp_path, "qwen05", 896)
    unresolved = write_adapter(tmp_path / "a1", base="HuggingFaceTB/SmolLM2-135M-Instruct", hidden=576)
    with pytest.raises(ModelNameError) as e:
        check_adapter(str(unresolved), drafter)
    msg = str(e.value)
    assert "\n" not in msg and str(unresolved) in msg and "HuggingFaceTB/SmolLM2-135M-Instruct" in msg
    assert "hidden size 576" in msg and f"drafter.model {drafter!r} has hidden size 896" in msg
    # its base resolves locally: refused on the two configs, naming both bases
    smol = base_dir(tmp_path, "smol", 576, layers=30, model_type="llama")
    with pytest.raises(ModelNameError, match=r"trained on '.*smol', another model than drafter.model '.*qwen05' "
                                             r"\(model_type llama against qwen2; hidden_size 576 against 896"):
        check_adapter(str(write_adapter(tmp_path / "a2", base=smol, hidden=576)), drafter)
    # a packaged drafter is checked before its conversion (its pinned hidden size)
    with pytest.raises(ModelNameError, match="'qwen2.5-coder-0.5b-instruct' has hidden size 896"):
        check_adapter(str(unresolved), "qwen2.5-coder-0.5b-instruct")
    # more layers than the drafter has
    with pytest.raises(ModelNameError, match="tensors for 30 layers, drafter.model .* has 24"):
        check_adapter(str(write_adapter(tmp_path / "a3", hidden=896, layers=30)), drafter)
    # the right base passes, named by path or not at all
    assert check_adapter(str(write_adapter(tmp_path / "ok", base=drafter, hidden=896)), drafter) == "local"
    assert check_adapter(str(write_adapter(tmp_path / "ok2", hidden=896)), drafter) == "local"


def test_an_adapter_of_too_high_a_rank_is_refused_naming_the_limit(tmp_path):
    """Issue 47 item 2: rank 1024 failed a minute into the engine's start with "min() arg is
    an empty sequence"; refused before any engine loads, naming the adapter, rank and limit."""
    drafter = base_dir(tmp_path, "qwen05", 896)
    high = write_adapter(tmp_path / "high", r=1024, hidden=896, layers=1)
    with pytest.raises(ModelNameError, match=rf"{high}'\S*: LoRA rank 1024 is above the engine's limit "
                                             rf"{VLLM_LORA_RANKS[-1]} \(vLLM's max_lora_rank is one of 1, 8,"):
        check_adapter(str(high), drafter)
    mid = write_adapter(tmp_path / "mid", r=64, hidden=896, layers=1)
    assert check_adapter(str(mid), drafter) == "local"
    with pytest.raises(ModelNameError, match=r"LoRA rank 64 is above the engine's limit 32 \(drafter.engine_kwargs.max_lora_rank\)"):
        check_adapter(str(mid), drafter, {"max_lora_rank": 32})
    cfg = RunConfig.model_validate({"drafter": {"model": drafter, "adapter": str(high)}, "verifier": {"model": drafter}})
    with pytest.raises(ModelNameError, match="LoRA rank 1024"):
        check_config_models(cfg)


@pytest.mark.parametrize("case", ["rank_pattern_list", "no_weights", "manifest_not_json", "manifest_a_list"])
def test_a_malformed_adapter_directory_is_refused_naming_the_file(tmp_path, case):
    """Hostile adapter directories a user may hand over (issue 47, the new user's twenty): a
    ``rank_pattern`` that is a list raised AttributeError (a traceback, exit 1); a directory
    with a config but no weight file passed the check and failed only once vLLM had started
    ("doesn't contain tensors"); a ``training_manifest.json`` beside the adapter that is not
    JSON gave ``error: Expecting value ...`` naming no file, one that is a list a traceback."""
    a = write_adapter(tmp_path / "t" / "adapter", hidden=576)
    want = {"rank_pattern_list": "rank_pattern must be an object", "no_weights": "holds no adapter weights",
            "manifest_not_json": "training_manifest.json: not readable JSON",
            "manifest_a_list": "training_manifest.json: not a JSON object"}[case]
    if case == "rank_pattern_list":
        (a / "adapter_config.json").write_text(json.dumps({"r": 8, "rank_pattern": [32]}))
    elif case == "no_weights":
        (a / "adapter_model.safetensors").unlink()
    else:
        (tmp_path / "t" / "training_manifest.json").write_text("not json" if case == "manifest_not_json" else "[]")
    with pytest.raises(ModelNameError, match=want) as e:
        check_adapter(str(a), "smollm2-135m-instruct")
    assert "\n" not in str(e.value)
    (a / "adapter_model.safetensors").unlink(missing_ok=True)
    (a / "adapter_model.bin").write_bytes(b"torch pickle")  # saved without safetensors: read for its config
    if case == "no_weights":
        assert read_adapter(str(a)).rank == 16
