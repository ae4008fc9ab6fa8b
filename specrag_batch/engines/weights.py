"""Which model weights a run used, for its manifest: packaged models by their pinned GGUF
sha256, local directories by the sha256 of their weights, tuned drafters (paper §3.1) by their
training manifest's id."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .models import PACKAGED_MODELS

TRAINING_MANIFEST = "training_manifest.json"
"""The file a tuned drafter's directory holds beside its weights (``drafter train``)."""


def sha256_files(paths: list[Path]) -> str:
    """sha256 over the bytes of files, in the given order (model weights, data shards)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


def weights_hash(model_dir: str) -> str:
    """sha256 (hex) of a model directory's ``*.safetensors`` files (sorted by name).

    Raises:
        FileNotFoundError: no ``*.safetensors`` file in ``model_dir``."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors weights")
    return sha256_files(files)


def drafter_identity(model: str, adapter: str | None = None) -> dict:
    """Which drafter a run used, for the run manifest: the name, and for a local directory the
    training manifest id (tuned drafters) or the sha256 of its weights; for packaged models
    their pinned GGUF sha256; with a LoRA ``adapter`` (``drafter.adapter``) also ``adapter``:
    its path, the sha256 of its weights and, inside a tuned drafter's directory, that
    directory's training manifest id. Never raises (unknown -> name only)."""
    out: dict = {"model": model}
    if adapter:
        a = Path(adapter)
        out["adapter"] = {"path": str(a.resolve())}
        try:
            out["adapter"]["weights_sha256"] = weights_hash(str(a))
            if (a.parent / TRAINING_MANIFEST).is_file():
                out["adapter"]["training_manifest_id"] = json.loads((a.parent / TRAINING_MANIFEST).read_text()).get("manifest_id")
        except (OSError, ValueError):
            pass
    if model in PACKAGED_MODELS:
        out["gguf_sha256"] = PACKAGED_MODELS[model].sha256
        return out
    p = Path(model)
    try:
        if (p / TRAINING_MANIFEST).is_file():
            m = json.loads((p / TRAINING_MANIFEST).read_text())
            out.update(path=str(p.resolve()), training_manifest_id=m.get("manifest_id"),
                       base_model=m.get("base_model"), weights_sha256=m.get("weights_sha256"))
        elif p.is_dir():
            out.update(path=str(p.resolve()), weights_sha256=weights_hash(str(p)))
    except (OSError, ValueError):
        pass
    return out
