"""A LoRA adapter (``drafter.adapter``) checked against the drafter it is served on, before any
engine loads: its rank against the engine's LoRA rank limit, its base and its tensors' hidden
size against ``drafter.model``'s. Nothing but ``adapter_config.json`` and the safetensors
header (tensor names and shapes, no weight) is read, and the ``config.json`` of both bases
where they resolve locally (:func:`local_config`; packaged models as
:func:`specrag_batch.engines.models.check_adapter` places them).

A PEFT LoRA of rank r on a linear layer ``W`` (out x in) is ``W + B A`` with ``A`` (r x in)
and ``B`` (out x r), saved as ``...<module>.lora_A.weight`` and ``...<module>.lora_B.weight``
(Hu et al. 2021, LoRA §4.1). The modules that read the hidden state (``q_proj``,
``gate_proj``, ...) have ``in`` = hidden size; those that write it (``o_proj``,
``down_proj``) have ``out`` = hidden size.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM's engine accepts (``vllm.config.lora.MaxLoRARanks``,
vLLM 0.32); an adapter of a higher rank cannot be served."""

_READS_HIDDEN = {"q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj",
                 "query_key_value", "W_pack", "c_attn", "lm_head"}
_WRITES_HIDDEN = {"o_proj", "down_proj", "out_proj"}
_TENSOR = re.compile(r"(?:^|\.)(?P<module>[A-Za-z0-9_]+)\.lora_(?P<ab>[AB])(?:\.[A-Za-z0-9_]+)?\.weight$")
_LAYER = re.compile(r"\.layers\.(\d+)\.")
_WEIGHT_FILES = ("safetensors", "bin", "pt")
"""The adapter weight files vLLM loads (``adapter_model.<ext>``); a directory with none cannot be served."""
_ARCH = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size")
"""The base ``config.json`` fields compared when the adapter's base resolves locally."""


class AdapterError(ValueError):
    """A LoRA adapter that cannot be served on the drafter: one line naming the adapter and
    what does not fit (CLI exit 2, through ``models.ModelNameError``)."""


@dataclass(frozen=True)
class AdapterInfo:
    """What a PEFT LoRA directory declares and holds.

    ``base``: ``adapter_config.json``'s ``base_model_name_or_path`` (None when absent);
    ``rank``: the largest of ``r``, ``rank_pattern``'s values and the tensors' ranks (rows of
    ``lora_A``); ``hidden``: hidden sizes its tensors imply, with one tensor name for each
    (see the module docstring); ``layers``: the number of decoder layers its tensors name
    (highest ``layers.<i>`` + 1, 0 when none)."""

    path: str
    base: str | None
    rank: int
    hidden: dict[int, str]
    layers: int


def _json_object(path: Path) -> dict:
    """The JSON object in ``path`` (an adapter's config or its training manifest).

    Raises:
        AdapterError: not readable, not JSON or not an object, naming the file."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AdapterError(f"drafter.adapter: {path}: not readable JSON ({e})") from None
    if not isinstance(value, dict):
        raise AdapterError(f"drafter.adapter: {path}: not a JSON object")
    return value


def read_adapter(adapter: str) -> AdapterInfo:
    """Read ``adapter_config.json`` and the ``adapter_model.safetensors`` header of the LoRA
    directory ``adapter`` (no tensor is loaded: safetensors' header holds names and shapes).
    An adapter saved without safetensors (``adapter_model.bin``) is read for its config only.

    Raises:
        AdapterError: no ``adapter_config.json``, a config that is not a JSON object or whose
            ``r`` is not a positive integer (``rank_pattern`` not an object of them), no weight
            file (``adapter_model.safetensors``, ``.bin`` or ``.pt``), or a safetensors file
            whose header cannot be read."""
    p = Path(adapter)
    cfg_file = p / "adapter_config.json"
    if not cfg_file.is_file():
        raise AdapterError(f"drafter.adapter: {adapter!r} is not a LoRA adapter directory (no adapter_config.json)")
    cfg = _json_object(cfg_file)
    pattern = cfg.get("rank_pattern") or {}
    if not isinstance(pattern, dict):
        raise AdapterError(f"drafter.adapter: {cfg_file}: rank_pattern must be an object of module: rank, "
                           f"got {type(pattern).__name__}")
    ranks = [cfg.get("r", 8), *pattern.values()]
    if not all(isinstance(r, int) and not isinstance(r, bool) and r > 0 for r in ranks):
        raise AdapterError(f"drafter.adapter: {cfg_file}: r / rank_pattern must be positive integers, got {ranks}")
    hidden: dict[int, str] = {}
    layers = 0
    weights = p / "adapter_model.safetensors"
    if not any((p / f"adapter_model.{ext}").is_file() for ext in _WEIGHT_FILES):
        raise AdapterError(f"drafter.adapter: {adapter!r} holds no adapter weights (none of "
                           f"{', '.join('adapter_model.' + e for e in _WEIGHT_FILES)})")
    if weights.is_file():
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(weights), framework="numpy") as f:
                shapes = {k: f.get_slice(k).get_shape() for k in f.keys()}
        except (SafetensorError, OSError) as e:
            raise AdapterError(f"drafter.adapter: {weights}: not a readable safetensors file ({e})") from None
        for name, shape in shapes.items():
            m = _TENSOR.search(name)
            if m is None or len(shape) != 2:
                continue
            module, ab = m["module"], m["ab"]
            if ab == "A":
                ranks.append(shape[0])
                if module in _READS_HIDDEN:
                    hidden.setdefault(shape[1], name)
            elif module in _WRITES_HIDDEN:
                hidden.setdefault(shape[0], name)
            if (lm := _LAYER.search(name)) is not None:
                layers = max(layers, int(lm[1]) + 1)
    base = cfg.get("base_model_name_or_path")
    return AdapterInfo(adapter, base if isinstance(base, str) and base else None, max(ranks), hidden, layers)


def engine_lora_rank(rank: int) -> int:
    """The ``max_lora_rank`` a vLLM engine serving an adapter of rank ``rank`` is started
    with: the smallest of :data:`VLLM_LORA_RANKS` at least ``rank``.

    Raises:
        AdapterError: ``rank`` is above vLLM's largest (:func:`check_adapter_fits` refuses
            such an adapter first, naming it)."""
    fits = [x for x in VLLM_LORA_RANKS if x >= rank]
    if not fits:
        raise AdapterError(f"drafter.adapter: LoRA rank {rank} is above vLLM's limit (max_lora_rank {VLLM_LORA_RANKS[-1]})")
    return fits[0]


def check_adapter_fits(info: AdapterInfo, model: str, model_config: dict | None,
                       base_config: dict | None, engine_kwargs: dict | None = None) -> None:
    """Refuse the adapter ``info`` when it cannot be served on ``drafter.model`` ``model``.

    ``model_config``: ``model``'s ``config.json`` when it resolves locally (None: the size
    checks are skipped); ``base_config``: the same for the adapter's base
    (``info.base``), when it resolves locally; ``engine_kwargs``: ``drafter.engine_kwargs``
    (its ``max_lora_rank``, when set, is the limit; otherwise vLLM's largest,
    :data:`VLLM_LORA_RANKS`).

    Raises:
        AdapterError: one line naming the adapter and, as the case is, the rank and the
            limit; both bases and the fields of their configs that differ; or the hidden size
            (or number of layers) of the adapter's tensors and of ``model``."""
    limit_kw = (engine_kwargs or {}).get("max_lora_rank")
    limit = limit_kw if isinstance(limit_kw, int) else VLLM_LORA_RANKS[-1]
    where = f"drafter.adapter {info.path!r}"
    if info.rank > limit:
        source = "drafter.engine_kwargs.max_lora_rank" if isinstance(limit_kw, int) else \
            f"vLLM's max_lora_rank is one of {', '.join(map(str, VLLM_LORA_RANKS))}"
        raise AdapterError(f"{where}: LoRA rank {info.rank} is above the engine's limit {limit} ({source}); "
                           f"serve an adapter of rank <= {limit}")
    trained = f"trained on {info.base!r}" if info.base else "its base not named in adapter_config.json"
    if model_config is None:
        return
    if base_config is not None:
        differ = [f"{k} {base_config.get(k)} against {model_config.get(k)}" for k in _ARCH
                  if base_config.get(k) is not None and model_config.get(k) is not None
                  and base_config.get(k) != model_config.get(k)]
        if differ:
            raise AdapterError(f"{where} was trained on {info.base!r}, another model than drafter.model "
                               f"{model!r} ({'; '.join(differ)}); set drafter.model to the adapter's base")
    size = model_config.get("hidden_size")
    other = sorted(h for h in info.hidden if h != size)
    if isinstance(size, int) and other:
        raise AdapterError(f"{where} ({trained}) has tensors of hidden size {other[0]} "
                           f"({info.hidden[other[0]]}), drafter.model {model!r} has hidden size {size}; "
                           "set drafter.model to the adapter's base")
    n = model_config.get("num_hidden_layers")
    if isinstance(n, int) and info.layers > n:
        raise AdapterError(f"{where} ({trained}) has tensors for {info.layers} layers, drafter.model "
                           f"{model!r} has {n}; set drafter.model to the adapter's base")


def local_config(name: str, packaged: dict[str, tuple[Path, int]]) -> dict | None:
    """``config.json`` of model ``name`` when it can be read here without converting or the
    network: a packaged model's converted directory (``packaged``: name -> (cache directory,
    pinned hidden size); ``{"hidden_size": ...}`` before its conversion), a local directory,
    or a hub id in the local Hugging Face cache; None otherwise (unreadable JSON too)."""
    cache, size = packaged.get(name, (None, 0))
    path = Path(cache or name) / "config.json"
    if cache is None and not path.is_file() and name.count("/") == 1:
        from huggingface_hub import try_to_load_from_cache

        try:
            found = try_to_load_from_cache(name, "config.json")
        except Exception:  # noqa: BLE001 - a name the cache refuses is one not found here
            found = None
        path = Path(found) if isinstance(found, str) else path
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        return cfg if isinstance(cfg, dict) else None
    except (OSError, ValueError):
        return {"hidden_size": size} if size else None


def check_adapter(adapter: str, model: str, packaged: dict[str, tuple[Path, int]],
                  engine_kwargs: dict | None = None) -> AdapterInfo:
    """Check the LoRA directory ``adapter`` against ``drafter.model`` ``model`` before any
    engine loads: :func:`read_adapter`, :func:`check_adapter_fits` with both bases'
    :func:`local_config`, and, for an adapter inside a tuned drafter's directory
    (``training_manifest.json`` beside it, ``specrag-batch drafter train``), that training
    named ``model`` (its name or resolved path). Returns what was read.

    Raises:
        AdapterError: see :func:`read_adapter` and :func:`check_adapter_fits`, a tuned
            drafter trained on another base, or a ``training_manifest.json`` beside the adapter
            that is not a readable JSON object."""
    info = read_adapter(adapter)
    check_adapter_fits(info, model, local_config(model, packaged),
                       local_config(info.base, packaged) if info.base else None, engine_kwargs)
    trained = Path(adapter).parent / "training_manifest.json"
    if trained.is_file():
        m = _json_object(trained)
        if model not in {m.get("base_model"), m.get("base_path")}:
            raise AdapterError(f"drafter.adapter: {adapter!r} was trained on {m.get('base_model')!r}, "
                               f"not drafter.model {model!r}: set drafter.model: {m.get('base_model')}")
    return info
