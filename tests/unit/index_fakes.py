"""Shared by the index tests: a deterministic stand-in for the sentence encoder (hashed bag of
words, 32 dimensions, L2-normalised) so index builds run without a model, and small corpora."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DIM = 32
TOPICS = ["glacier ice melt arctic", "ocean heat content rise", "carbon dioxide emissions coal",
          "solar panels renewable energy", "forest fires drought heat", "sea level coastal flooding"]


def fake_embed(name, texts, batch_size=64):
    """Hashed bag of words: texts sharing words point the same way."""
    out = np.zeros((len(texts), DIM), np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"\w+", t.lower()):
            out[i, zlib.crc32(w.encode()) % DIM] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


class CountingEmbedder:
    """:func:`fake_embed` that records the texts it embedded and can fail after ``fail_after``
    calls (a build killed halfway)."""

    def __init__(self, fail_after: int | None = None):
        self.texts: list[str] = []
        self.calls, self.fail_after = 0, fail_after

    def __call__(self, name, texts, batch_size=64):
        if texts:
            if self.fail_after is not None and self.calls >= self.fail_after:
                raise KeyboardInterrupt("killed")
            self.calls += 1
            self.texts.extend(texts)
        return fake_embed(name, texts, batch_size)


def patch_embedder(monkeypatch, embedder=fake_embed):
    """Use ``embedder`` for passages (index build) and queries (search)."""
    from specrag_batch.index import embed_shards as shards, search

    monkeypatch.setattr(shards, "embed", embedder)
    monkeypatch.setattr(search, "embed", embedder)
    monkeypatch.setattr(shards, "known_dimension", lambda name: DIM)  # the stand-in's configuration says DIM
    return embedder


def passages(start: int, n: int, prefix: str = "d") -> pa.Table:
    """``n`` passages, ids ``<prefix><start>..``, each about one of :data:`TOPICS`."""
    rows = range(start, start + n)
    return pa.table({"doc_id": [f"{prefix}{i}" for i in rows],
                     "title": [f"Topic {i % len(TOPICS)}" for i in rows],
                     "text": [f"{TOPICS[i % len(TOPICS)]} passage number {i}" for i in rows]})


def write_shards(root: Path, sizes: list[int], nested: bool = True) -> Path:
    """A corpus prefix of shards of ``sizes`` passages (some in a subdirectory), ids unique."""
    root.mkdir(parents=True, exist_ok=True)
    start = 0
    for k, n in enumerate(sizes):
        sub = root / ("part" if nested and k % 2 else "") / f"p{k}.parquet"
        sub.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(passages(start, n), sub)
        start += n
    return root
