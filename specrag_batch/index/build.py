"""``specrag-batch index build``: a corpus (one Parquet file or a prefix of shards, local or
``s3://``) into an index directory (:mod:`.layout`) that serves dense, BM25 and hybrid
retrieval.

Steps: check every shard's footer and ids (:func:`.corpus.preflight`) and the index type
(:func:`.dense.check_buildable`) before anything is embedded; embed shard by shard, resumably
(:mod:`.shards`); train and fill the FAISS index, concatenate the passage store and build BM25
in a scratch directory; publish them into a new ``data-<id>/`` and commit by writing
``meta.json``. Memory is bounded by a record batch, the FAISS index and the BM25 index,
not by the corpus.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

import numpy as np

from .. import storage
from . import dense
from .bm25 import B, K1, BM25Builder
from .corpus import check_width, preflight
from .layout import (BM25_DIR, DENSE_FILE, FORMAT, META, PASSAGES_FILE, WORK_DIR, data_dir, fetch, new_build_id,
                     publish, remove, scratch, stale_entries)
from .shards import PASSAGE_SCHEMA, embed_all, model_dimension, passage_text, passages_uri, vectors_uri
from .store import iter_texts, write_store

Progress = Callable[[str, int, int], None]
"""``progress(stage, advance, total)``: ``advance`` more of ``total`` passages are through
``stage`` (``embedding``, ``indexing``, ``bm25``)."""


def build_index(corpus_uri: str, index_uri: str, embedding_model: str = "all-MiniLM-L6-v2",
                batch_size: int = 64, *, embedding_column: str | None = None, index_type: str | None = None,
                bm25: bool = True, batch_rows: int = 4096, train_size: int | None = None, seed: int = 0,
                progress: Progress | None = None, log: Callable[[str], None] | None = None) -> dict:
    """Build the index of ``corpus_uri`` at ``index_uri``; returns the ``meta.json`` written.

    Args:
        corpus_uri: a Parquet file, or a prefix whose ``.parquet`` files are the shards
            (``doc_id``, ``text``, optional ``title``: :mod:`.corpus`).
        index_uri: the index directory (local or ``s3://``); an index already there is
            replaced when the new one is committed, not before.
        embedding_model: sentence-transformers model embedding passages and, later, queries.
        batch_size: texts per encoder call.
        embedding_column: a ``fixed_size_list`` column of the corpus holding the passages'
            vectors, made by ``embedding_model``: nothing is embedded.
        index_type: FAISS factory string; default by corpus size (:func:`.dense.default_index_type`).
        bm25: also build the BM25 part (needed by ``retrieval.method: bm25`` and ``hybrid``).
        batch_rows: passages per record batch read.
        train_size: training sample of an index that needs training (default :func:`.dense.training_size`).
        seed: seed of the training sample.
        progress: :data:`Progress` callback; ``log``: one line per event (shards skipped).

    Raises:
        ValueError: ``index_uri`` is a file.
        FileNotFoundError: nothing at ``corpus_uri``.
        IndexBuildError: a shard that is not Parquet or whose schema differs from the first
            shard's, a prefix without shards, an index type FAISS refuses or cannot train on
            this corpus (all before anything is embedded); a shard that changed while read.
        InputSchemaError: a missing or mistyped column, an embedding column of another width
            than the model's, a null or repeated ``doc_id`` (within or across shards), no rows
            (before anything is embedded); a string that is not UTF-8, a null vector (naming
            the row, when its batch is read).
    """
    t0 = time.perf_counter()
    dense.check_index_type(index_type)  # an IDMap type: refused before the corpus is read
    out_fs, out_path = storage.filesystem(index_uri)
    if out_fs.isfile(out_path):  # refused before the corpus is read, let alone embedded
        raise ValueError(f"{index_uri}: a file; the index is written as a directory")
    shards = preflight(corpus_uri, embedding_column)  # the footers and ids: before the model loads
    dim = model_dimension(embedding_model)
    if embedding_column:
        check_width(shards[0].width, dim, shards[0].uri, embedding_column)  # all shards have its width
    n = sum(s.rows for s in shards)
    index_type = index_type or dense.default_index_type(n, dim)
    dense.check_buildable(index_type, dim, n)
    step = (lambda stage, total: (lambda k: progress(stage, k, total))) if progress else (lambda stage, total: None)

    work = storage.join(index_uri, WORK_DIR)
    _remove_scratch(index_uri, work)
    counts = embed_all(shards, work, embedding_model=embedding_model, embedding_column=embedding_column, dim=dim,
                       batch_rows=batch_rows, batch_size=batch_size, progress=step("embedding", n), log=log)
    if log and counts["skipped"]:
        log(f"{counts['skipped']} of {len(shards)} shards already embedded by an earlier build: not embedded again")
    t_embedded = time.perf_counter()

    build_id = new_build_id()
    name, data_uri = f"data-{build_id}", data_dir(index_uri, build_id)
    with scratch(index_uri) as tmp:
        vectors = [np.load(fetch(vectors_uri(work, s), tmp), mmap_mode="r") for s in shards]
        index, trained = dense.build(index_type, vectors, train_size=train_size, seed=seed,
                                     progress=step("indexing", n))
        del vectors
        import faiss

        faiss.write_index(index, str(tmp / DENSE_FILE))
        ntotal = int(index.ntotal)
        del index
        publish(tmp / DENSE_FILE, storage.join(data_uri, DENSE_FILE))
        sources = [fetch(passages_uri(work, s), tmp) for s in shards]
        rows = write_store(sources, tmp / PASSAGES_FILE, PASSAGE_SCHEMA)
        bm25_meta = None
        if bm25:
            builder = BM25Builder(tmp)
            advance = step("bm25", n)
            for titles, texts in iter_texts(tmp / PASSAGES_FILE):
                builder.add(passage_text(titles, texts))
                if advance:
                    advance(len(texts))
            bm25_meta = {**builder.finish(tmp / BM25_DIR), "k1": K1, "b": B, "method": "lucene"}
            for f in sorted((tmp / BM25_DIR).iterdir()):
                publish(f, storage.join(data_uri, BM25_DIR, f.name))
        publish(tmp / PASSAGES_FILE, storage.join(data_uri, PASSAGES_FILE))
    meta = {"format": FORMAT, "data": name, "documents": rows, "dimension": dim,
            "embedding_model": embedding_model, "embedding_column": embedding_column,
            "metric": "inner_product_normalised", "corpus": corpus_uri, "shards": len(shards),
            "dense": {"index_type": index_type, "vectors": ntotal, "trained_on": trained, "file": DENSE_FILE},
            "bm25": bm25_meta, "passages": PASSAGES_FILE,
            "shards_embedded": counts["embedded"], "shards_skipped": counts["skipped"],
            "seconds_embedding": round(t_embedded - t0, 2), "seconds": round(time.perf_counter() - t0, 2)}
    storage.write_bytes_atomic(storage.join(index_uri, META), json.dumps(meta, indent=2).encode())
    for stale in stale_entries(index_uri, name):  # after the commit: the old index served until now
        remove(stale)
    return meta


def _remove_scratch(*uris: str) -> None:
    """Scratch directories a killed build left in local ``uris`` (never a committed file)."""
    for uri in uris:
        proto, path = storage.split_uri(uri)
        if proto != "file" or not os.path.isdir(path):
            continue
        for entry in os.scandir(path):
            if entry.name.startswith(".scratch-") and entry.is_dir():
                remove(entry.path)
