"""The corpus index for retrieval (stage 1 when rows bring no passages): built offline by
``specrag-batch index build``, searched by :class:`~specrag_batch.stages.retrieval.Retrieval`.

The index is a directory (local or ``s3://``) holding ``index.faiss`` (inner product over
L2-normalised sentence-transformers embeddings = cosine similarity), ``docs.parquet``
(``doc_id``, ``title``, ``text`` in index order) and ``meta.json``.
"""

from __future__ import annotations

import io
import json
import time
from functools import lru_cache
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import storage
from .embeddings import embed
from .records import Document


def build_index(corpus_uri: str, index_uri: str, embedding_model: str = "all-MiniLM-L6-v2",
                batch_size: int = 64) -> dict:
    """Embed a corpus Parquet (``doc_id``, ``text``, optional ``title``; ``batch_size`` texts
    per encoder call) and write a FAISS inner-product index of the L2-normalised embeddings
    (cosine similarity) under ``index_uri``.

    Returns the metadata written to ``meta.json`` (documents, dimension, seconds).

    Raises:
        ValueError: ``corpus_uri`` is a directory or not Parquet, ``index_uri`` is a file;
            :class:`~specrag_batch.schema.InputSchemaError` (a ValueError) for a corpus that
            :func:`~specrag_batch.schema.conform_corpus` refuses (no rows, a missing or mistyped
            column, a null or repeated ``doc_id``, a string that is not UTF-8), naming the row.
        FileNotFoundError: nothing at ``corpus_uri``.
    """
    import faiss

    from .schema import conform_corpus

    t0 = time.perf_counter()
    fs, path = storage.filesystem(corpus_uri)
    if fs.isdir(path):
        raise ValueError(f"{corpus_uri}: a directory; --corpus takes one Parquet file")
    if not fs.exists(path):
        raise FileNotFoundError(f"corpus {corpus_uri!r} does not exist")
    out_fs, out_path = storage.filesystem(index_uri)
    if out_fs.isfile(out_path):  # refused before the corpus is embedded, not after
        raise ValueError(f"{index_uri}: a file; the index is written as a directory")
    try:  # ParquetFile, not read_table: a repeated column name reaches conform_corpus's check
        table = pq.ParquetFile(io.BytesIO(storage.read_bytes(corpus_uri))).read()
    except pa.ArrowInvalid as e:
        raise ValueError(f"{corpus_uri}: not a Parquet file ({e})") from None
    table = conform_corpus(table, corpus_uri)
    ids = table.column("doc_id").to_pylist()
    titles = table.column("title").to_pylist()
    texts = [t or "" for t in table.column("text").to_pylist()]
    titles = [t or "" for t in titles]
    vecs = embed(embedding_model, [f"{a}\n{b}".strip() for a, b in zip(titles, texts)], batch_size)
    index = faiss.IndexFlatIP(vecs.shape[1])
    index.add(vecs)
    docs = pa.table({"doc_id": ids, "title": titles, "text": texts})
    buf = io.BytesIO()
    pq.write_table(docs, buf)
    meta = {"documents": len(ids), "dimension": int(vecs.shape[1]),
            "embedding_model": embedding_model, "metric": "inner_product_normalised",
            "corpus": corpus_uri, "seconds": round(time.perf_counter() - t0, 2)}
    storage.write_bytes_atomic(storage.join(index_uri, "index.faiss"),
                               faiss.serialize_index(index).tobytes())
    storage.write_bytes_atomic(storage.join(index_uri, "docs.parquet"), buf.getvalue())
    storage.write_bytes_atomic(storage.join(index_uri, "meta.json"),
                               json.dumps(meta, indent=2).encode())
    return meta


class FaissRetriever:
    """Top-N dense retrieval over an index built by :func:`build_index` (loaded whole into
    memory at construction).

    Raises (constructor):
        FileNotFoundError: ``meta.json``, ``index.faiss`` or ``docs.parquet`` is missing
            under ``index_uri``."""

    def __init__(self, index_uri: str):
        import faiss

        self.uri = index_uri
        self.meta = json.loads(storage.read_bytes(storage.join(index_uri, "meta.json")))
        raw = np.frombuffer(storage.read_bytes(storage.join(index_uri, "index.faiss")), dtype=np.uint8)
        self.index = faiss.deserialize_index(raw)
        docs = pq.read_table(io.BytesIO(storage.read_bytes(storage.join(index_uri, "docs.parquet"))))
        self.docs = [Document(str(i), t or "", x or "") for i, t, x in zip(
            docs.column("doc_id").to_pylist(), docs.column("title").to_pylist(),
            docs.column("text").to_pylist())]

    def search(self, queries: Sequence[str], top_n: int) -> list[list[Document]]:
        """For each query, its top-N documents by cosine similarity (best first): a list per
        query, in order, of at most ``top_n`` (fewer when the index holds fewer). Queries are
        embedded with the index's ``embedding_model`` (:func:`embed`)."""
        if not queries:
            return []
        q = embed(self.meta["embedding_model"], queries)
        _, idx = self.index.search(q, min(top_n, len(self.docs)))
        return [[self.docs[j] for j in row if j >= 0] for row in idx]


@lru_cache(maxsize=4)
def get_retriever(index_uri: str) -> FaissRetriever:
    """Process-wide cached :class:`FaissRetriever`."""
    return FaissRetriever(index_uri)
