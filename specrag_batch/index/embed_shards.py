"""Embedding a corpus shard by shard, resumably: each finished shard leaves its vectors
(``<key>.npy``, float32, L2-normalised, one row per passage) and its passages (``<key>.arrow``)
in the build's work area, then a done marker (``_done/<key>.json``), as a run's shards do
(:mod:`specrag_batch.run.resume`). A build started again skips every shard whose marker matches
its input fingerprint and the embedding settings, so a build killed halfway re-embeds only
the shards it had not finished.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

import numpy as np
import pyarrow as pa

from ..core import storage
from ..engines.embeddings import embed, known_dimension
from .corpus import CorpusShard, batches
from .layout import DONE_DIR, IndexBuildError, publish, scratch

PASSAGE_SCHEMA = pa.schema([("doc_id", pa.string()), ("title", pa.string()), ("text", pa.string())])
TEXT_FORMAT = "title\\ntext, stripped"
"""What is embedded for a passage (also hashed into the job key)."""

Progress = Callable[[int], None]
"""Called with the number of passages just finished (embedded, or skipped as already done)."""


def job_key(embedding_model: str, embedding_column: str | None) -> str:
    """Hash of what makes a shard's vectors: the embedding model (or the corpus column that
    brings them) and the embedded text's format."""
    spec = {"model": embedding_model, "column": embedding_column, "text": TEXT_FORMAT, "normalised": True}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def passage_text(titles: list, texts: list) -> list[str]:
    """The text embedded for each passage: title and text on two lines, stripped."""
    return [f"{a or ''}\n{b or ''}".strip() for a, b in zip(titles, texts)]


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (a zero row stays zero), float32 and C-contiguous."""
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)


def marker_uri(work_uri: str, shard: CorpusShard) -> str:
    """The done marker of ``shard`` in the work area ``work_uri``."""
    return storage.join(work_uri, DONE_DIR, f"{shard.key}.json")


def vectors_uri(work_uri: str, shard: CorpusShard) -> str:
    """The shard's vectors (``.npy``) in the work area."""
    return storage.join(work_uri, f"{shard.key}.npy")


def passages_uri(work_uri: str, shard: CorpusShard) -> str:
    """The shard's passages (Arrow IPC file) in the work area."""
    return storage.join(work_uri, f"{shard.key}.arrow")


def finished(work_uri: str, shard: CorpusShard, key: str) -> dict | None:
    """The shard's done marker when it says the shard is embedded as this build would embed
    it (same input fingerprint, same job key, its files present), else None."""
    try:
        m = storage.read_json_object(marker_uri(work_uri, shard))
    except ValueError:
        return None
    if not m or m.get("job") != key or m.get("fingerprint") != shard.fingerprint or m.get("rows") != shard.rows:
        return None
    if not (storage.exists(vectors_uri(work_uri, shard)) and storage.exists(passages_uri(work_uri, shard))):
        return None
    return m


def embed_shard(shard: CorpusShard, work_uri: str, *, embedding_model: str, embedding_column: str | None,
                dim: int, key: str, batch_rows: int = 4096, batch_size: int = 64,
                progress: Progress | None = None) -> dict:
    """Embed one shard (or take its vectors from ``embedding_column``) into the work area and
    write its done marker last; returns the marker. Memory: one record batch of passages and
    its vectors; the shard's vectors go to a memory-mapped file.

    Raises:
        InputSchemaError: a row :func:`corpus.batches` refuses.
        IndexBuildError: the shard changed while it was read (another row count)."""
    with scratch(work_uri) as tmp:
        npy, arrow = tmp / f"{shard.key}.npy", tmp / f"{shard.key}.arrow"
        vecs = np.lib.format.open_memmap(npy, mode="w+", dtype=np.float32, shape=(shard.rows, dim))
        row = 0
        with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_file(sink, PASSAGE_SCHEMA) as writer:
            for batch, given in batches(shard, batch_rows, embedding_column):
                n = batch.num_rows
                if row + n > shard.rows:
                    raise IndexBuildError(f"{shard.uri}: changed while it was read (more than {shard.rows} rows)")
                if given is None:
                    texts = passage_text(batch.column("title").to_pylist(), batch.column("text").to_pylist())
                    given = embed(embedding_model, texts, batch_size)
                vecs[row:row + n] = normalise(given)
                writer.write_batch(batch)
                row += n
                if progress:
                    progress(n)
        if row != shard.rows:
            raise IndexBuildError(f"{shard.uri}: changed while it was read ({row} rows, its footer said {shard.rows})")
        vecs.flush()
        del vecs
        publish(npy, vectors_uri(work_uri, shard))
        publish(arrow, passages_uri(work_uri, shard))
    marker = {"uri": shard.uri, "fingerprint": shard.fingerprint, "rows": shard.rows, "dim": dim, "job": key}
    storage.write_bytes_atomic(marker_uri(work_uri, shard), json.dumps(marker, indent=2).encode())
    return marker


def embed_all(shards: list[CorpusShard], work_uri: str, *, embedding_model: str, embedding_column: str | None,
              dim: int, batch_rows: int = 4096, batch_size: int = 64, progress: Progress | None = None,
              log: Callable[[str], None] | None = None) -> dict[str, int]:
    """Embed every shard not already done (:func:`finished`), in order. Returns the count of
    shards ``embedded`` and ``skipped`` (done by an earlier build of the same corpus)."""
    key = job_key(embedding_model, embedding_column)
    counts = {"embedded": 0, "skipped": 0}
    for shard in shards:
        if finished(work_uri, shard, key):
            counts["skipped"] += 1
            if progress:
                progress(shard.rows)
            continue
        if log:
            log(f"embedding {shard.uri} ({shard.rows} passages)")
        embed_shard(shard, work_uri, embedding_model=embedding_model, embedding_column=embedding_column,
                    dim=dim, key=key, batch_rows=batch_rows, batch_size=batch_size, progress=progress)
        counts["embedded"] += 1
    return counts


def model_dimension(embedding_model: str) -> int:
    """Width of the vectors ``embedding_model`` makes (loads the model once per process)."""
    return int(embed(embedding_model, []).shape[1])


def configured_dimension(embedding_model: str) -> int | None:
    """Width of the vectors ``embedding_model`` makes as its configuration files say, without
    loading it (:func:`~specrag_batch.engines.embeddings.known_dimension`; None when they do not say)."""
    return known_dimension(embedding_model)
