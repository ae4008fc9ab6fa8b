"""``specrag-batch index build``: a corpus (one Parquet file or a prefix of shards, local or
``s3://``) into an index directory (:mod:`.layout`) that serves dense, BM25 and hybrid
retrieval.

Steps: check every shard's footer and ids (:func:`.corpus.preflight`), the index type
(:func:`.dense.check_buildable`) and the ``--queries`` file before anything is embedded; embed
shard by shard (:mod:`.shards`); train, then fill the FAISS index; measure its recall and pick
its operating point (:mod:`.tuning`); concatenate the passage store; build BM25. Each phase
leaves a checkpoint in the work area that a build started again takes instead of doing the
phase again (:mod:`.checkpoints`). Then publish the parts into a new ``data-<id>/`` and commit
by writing ``meta.json``. Memory is bounded by a record batch, the FAISS index and the BM25
index, not by the corpus. A corpus bringing its vectors (``embedding_column``) is built
without loading the encoder.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

import numpy as np

from ..core import storage
from . import dense, tuning
from .bm25 import B, K1, TOKENIZER, TOKENIZER_VERSION, BM25Builder
from .checkpoints import Checkpoints, phase_key
from .corpus import check_width, preflight
from .layout import (BM25_DIR, DENSE_FILE, FORMAT, META, PASSAGES_FILE, WORK_DIR, IndexBuildError, data_dir, fetch,
                     new_build_id, remove, scratch, stale_entries)
from .embed_shards import (PASSAGE_SCHEMA, configured_dimension, embed_all, job_key, model_dimension, passage_text,
                     passages_uri, vectors_uri)
from .store import file_fingerprint, iter_texts, write_store

BM25_TOKENIZER = (TOKENIZER, TOKENIZER_VERSION)
"""The BM25 tokenizer and its version, as meta.json records them (also in the BM25 checkpoint's key)."""
Progress = Callable[[str, int, int], None]
"""``progress(stage, advance, total)``: ``advance`` more of ``total`` passages are through
``stage`` (``embedding``, ``indexing``, ``bm25``)."""


def build_index(corpus_uri: str, index_uri: str, embedding_model: str = "all-MiniLM-L6-v2",
                batch_size: int = 64, *, embedding_column: str | None = None, index_type: str | None = None,
                bm25: bool = True, batch_rows: int = 4096, train_size: int | None = None, seed: int = 0,
                progress: Progress | None = None, log: Callable[[str], None] | None = None,
                target_recall: float = tuning.TARGET_RECALL, recall_k: int = tuning.RECALL_K,
                holdout: int = tuning.HOLDOUT, queries_uri: str | None = None) -> dict:
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
        target_recall: recall@``recall_k`` (0-1] against exact search the operating point
            must reach: the nprobe (IVF) or efSearch (HNSW) whose lower confidence bound of
            recall reaches it on each of two folds of each kind of held-out query, the bounds
            joint at 95% (:func:`.tuning.tune`, decision 014); recorded in
            ``meta["dense"]["operating_point"]``.
        holdout: held-out queries measuring it: passages sampled (seed ``seed + 1``) from the
            corpus, each moved off itself to sit between passages
            (:func:`.tuning.question_like`) and searched unchanged too, or that many of the queries of ``queries_uri`` (a
            Parquet file with a ``query`` column, embedded with ``embedding_model``).

    Raises:
        ValueError: ``index_uri`` is a file.
        FileNotFoundError: nothing at ``corpus_uri``.
        IndexBuildError: a shard that is not Parquet or whose schema differs from the first
            shard's, a prefix without shards, an index type FAISS refuses or cannot train on
            this corpus (all before anything is embedded); a shard that changed while read.
        InputSchemaError: a missing or mistyped column, an embedding column of another width
            than the model's (when its configuration says its width), a null or repeated
            ``doc_id`` (within or across shards), no rows (before anything is embedded); a
            string that is not UTF-8, a null vector (naming the row, when its batch is read).
        IndexBuildError: a ``queries_uri`` :func:`.tuning.read_queries` refuses (before
            anything is embedded), or whose embeddings are of another width than the corpus's.
    """
    t0 = time.perf_counter()
    dense.check_index_type(index_type)  # an IDMap type: refused before the corpus is read
    out_fs, out_path = storage.filesystem(index_uri)
    if out_fs.isfile(out_path):  # refused before the corpus is read, let alone embedded
        raise ValueError(f"{index_uri}: a file; the index is written as a directory")
    shards = preflight(corpus_uri, embedding_column)  # the footers and ids: before the model loads
    if embedding_column:  # the column gives the width: no encoder loaded (queries need it, at search)
        dim, known = int(shards[0].width), configured_dimension(embedding_model)
        if known is not None:
            check_width(dim, known, shards[0].uri, embedding_column)  # all shards have its width
    else:
        dim = model_dimension(embedding_model)
    n = sum(s.rows for s in shards)
    index_type = index_type or dense.default_index_type(n, dim)
    dense.check_buildable(index_type, dim, n)
    user_queries = tuning.read_queries(queries_uri, holdout, seed) if queries_uri else None
    step = (lambda stage, total: (lambda k: progress(stage, k, total))) if progress else (lambda stage, total: None)

    work = storage.join(index_uri, WORK_DIR)
    _remove_scratch(index_uri, work)
    counts = embed_all(shards, work, embedding_model=embedding_model, embedding_column=embedding_column, dim=dim,
                       batch_rows=batch_rows, batch_size=batch_size, progress=step("embedding", n), log=log)
    if log and counts["skipped"]:
        log(f"{counts['skipped']} of {len(shards)} shards already embedded by an earlier build: not embedded again")
    t_embedded = time.perf_counter()

    corpus_key = [[s.key, s.fingerprint, s.rows] for s in shards], job_key(embedding_model, embedding_column), dim
    build_id = new_build_id()
    name, data_uri = f"data-{build_id}", data_dir(index_uri, build_id)
    reused: list[str] = []
    with scratch(index_uri) as tmp:
        ck = Checkpoints(work, tmp)
        vectors = [np.load(fetch(vectors_uri(work, s), tmp), mmap_mode="r") for s in shards]
        index, trained = _dense_phases(ck, index_type, vectors, corpus_key, train_size, seed, step("indexing", n),
                                       reused)
        ntotal = int(index.ntotal)
        key = phase_key(corpus_key, index_type, train_size, seed, target_recall, recall_k, holdout,
                        queries_uri and storage.normalize_uri(queries_uri), user_queries, tuning.RULE)
        op = (ck.done("tuned", key) or {}).get("info")
        if op is None:
            op = _tune(index, vectors, user_queries, embedding_model, queries_uri, holdout, seed,
                       target_recall, recall_k)
            ck.save("tuned", key, info=op)
        else:
            reused.append("tuned")
        del vectors, index
        key = phase_key(corpus_key)
        if ck.done("store", key) is None:
            sources = [fetch(passages_uri(work, s), tmp) for s in shards]
            rows = write_store(sources, tmp / PASSAGES_FILE, PASSAGE_SCHEMA)
            ck.save("store", key, [tmp / PASSAGES_FILE], {"rows": rows})
        else:
            reused.append("store")
        rows = ck.done("store", key)["info"]["rows"]
        passage_ids = file_fingerprint(ck.path(PASSAGES_FILE))
        bm25_meta = None
        if bm25:
            key = phase_key(corpus_key, K1, B, BM25_TOKENIZER)
            done = ck.done("bm25", key)
            if done is None:
                builder = BM25Builder(tmp)
                advance = step("bm25", n)
                for titles, texts in iter_texts(ck.path(PASSAGES_FILE)):
                    builder.add(passage_text(titles, texts))
                    if advance:
                        advance(len(texts))
                bm25_meta = {**builder.finish(tmp / BM25_DIR), "k1": K1, "b": B, "method": "lucene"}
                ck.save("bm25", key, sorted((tmp / BM25_DIR).iterdir()), bm25_meta)
                done = ck.done("bm25", key)
            else:
                reused.append("bm25")
            bm25_meta = done["info"]
            for f in done["files"]:
                ck.publish(f, storage.join(data_uri, f))
        ck.publish(DENSE_FILE, storage.join(data_uri, DENSE_FILE))
        ck.publish(PASSAGES_FILE, storage.join(data_uri, PASSAGES_FILE))
    if log and reused:
        log(f"phases already done by an earlier build, not done again: {', '.join(reused)}")
    meta = {"format": FORMAT, "data": name, "documents": rows, "dimension": dim,
            "embedding_model": embedding_model, "embedding_column": embedding_column,
            "metric": "inner_product_normalised", "corpus": corpus_uri, "shards": len(shards),
            "dense": {"index_type": index_type, "vectors": ntotal, "trained_on": trained, "file": DENSE_FILE,
                      "operating_point": op},
            "bm25": bm25_meta, "passages": PASSAGES_FILE, "passages_doc_ids_sha256": passage_ids,
            "shards_embedded": counts["embedded"], "shards_skipped": counts["skipped"], "phases_reused": reused,
            "seconds_embedding": round(t_embedded - t0, 2), "seconds": round(time.perf_counter() - t0, 2)}
    storage.write_bytes_atomic(storage.join(index_uri, META), json.dumps(meta, indent=2).encode())
    for stale in stale_entries(index_uri, name):  # after the commit: the old index served until now
        remove(stale)
    return meta


def _dense_phases(ck: Checkpoints, index_type: str, vectors: list, corpus_key, train_size: int | None, seed: int,
                  progress, reused: list[str]):
    """The ``trained`` and ``added`` phases: (the filled FAISS index, its training vectors),
    each taken from its checkpoint when an earlier build left it. The filled index is in the
    work area as :data:`DENSE_FILE`."""
    import faiss

    key = phase_key(corpus_key, index_type, train_size, seed)
    added = ck.done("added", key)
    if added is not None:
        reused.extend(["trained", "added"])
        return faiss.read_index(str(ck.path(DENSE_FILE))), added["info"]["trained_on"]
    done = ck.done("trained", key)
    if done is None:
        index, trained = dense.train(index_type, vectors, train_size=train_size, seed=seed)
        faiss.write_index(index, str(ck.tmp / "trained.faiss"))
        ck.save("trained", key, [ck.tmp / "trained.faiss"], {"trained_on": trained})
    else:
        reused.append("trained")
        index, trained = faiss.read_index(str(ck.path("trained.faiss"))), done["info"]["trained_on"]
    index = dense.add(index, index_type, vectors, progress)
    faiss.write_index(index, str(ck.tmp / DENSE_FILE))
    ck.save("added", key, [ck.tmp / DENSE_FILE], {"trained_on": trained})
    return index, trained


def _tune(index, vectors: list, user_queries: list[str] | None, embedding_model: str, queries_uri: str | None,
          holdout: int, seed: int, target: float, k: int) -> dict:
    """The ``tuned`` phase: the operating point (:func:`.tuning.tune`) on held-out passages or
    the user's queries (embedded here, the encoder's width checked against the corpus's)."""
    if user_queries is None:
        rows, exclude = tuning.holdout([len(v) for v in vectors], holdout, seed + 1)
        passages = np.concatenate([np.asarray(v[r], dtype=np.float32) for v, r in zip(vectors, rows)])
        queries = tuning.question_like(vectors, passages, exclude, seed + 3)
        return tuning.tune(index, vectors, queries, exclude=exclude, unchanged=passages, target=target, k=k,
                           seed=seed + 2, source=tuning.QUESTION_LIKE)
    from .embed_shards import embed

    queries = embed(embedding_model, user_queries)
    if queries.shape[1] != vectors[0].shape[1]:
        raise IndexBuildError(f"--queries {queries_uri}: {embedding_model} embeds them in {queries.shape[1]} "
                              f"dimensions, the corpus's vectors have {vectors[0].shape[1]}")
    return tuning.tune(index, vectors, queries, target=target, k=k, source=f"queries of {queries_uri}",
                       seed=seed + 2)


def _remove_scratch(*uris: str) -> None:
    """Scratch directories a killed build left in local ``uris`` (never a committed file)."""
    for uri in uris:
        proto, path = storage.split_uri(uri)
        if proto != "file" or not os.path.isdir(path):
            continue
        for entry in os.scandir(path):
            if entry.name.startswith(".scratch-") and entry.is_dir():
                remove(entry.path)
