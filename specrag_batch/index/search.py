"""Searching an index (``retrieval.index``) by the config's ``retrieval.method``:

* ``dense``: the queries embedded with the index's embedding model, searched in its FAISS
  index (``retrieval.nprobe``, ``retrieval.ef_search``; unset: the operating point the build
  measured, :func:`.tuning.search_defaults`);
* ``bm25``: BM25 over the passages' title and text (bm25s);
* ``hybrid``: reciprocal-rank fusion (Cormack et al. 2009) of the two: each retriever's top
  ``retrieval.hybrid_candidates`` passages, a passage scoring the sum of 1 / (``rrf_k`` + rank)
  over the lists it is in (rank from 1), best first; ties go to the better dense rank.

Every search takes all the queries of a chunk at once (one embedding call, FAISS calls of
1024 queries) and reads from the passage store only the passages it returns.
"""

from __future__ import annotations

import io
import threading
from functools import lru_cache
from typing import Protocol, Sequence

import numpy as np
import pyarrow.parquet as pq

from ..core import storage
from ..engines.embeddings import embed
from ..core.records import Document
from ..core.redaction import redact_text
from . import dense as dense_mod
from . import tuning
from .bm25 import BM25Index
from .layout import (BM25_DIR, DENSE_FILE, LEGACY_FILES, PASSAGES_FILE, IndexFormatError, is_legacy,
                     local_data_dir, read_meta)
from .store import PassageStore

METHODS = ("dense", "bm25", "hybrid")


class OpenIndex:
    """An index directory opened for searching: its ``meta.json`` and passage store, its FAISS
    and BM25 parts loaded on first use (once per process, :func:`open_index`).

    Raises (constructor):
        IndexFormatError: no index at ``index_uri`` (:func:`layout.read_meta`).
        FileNotFoundError: a file the index's meta names is missing."""

    def __init__(self, index_uri: str):
        self.uri = index_uri
        self.meta = read_meta(index_uri)
        self.legacy = is_legacy(self.meta)
        self._lock = threading.Lock()
        self._dense = self._bm25 = None
        if self.legacy:  # first layout: index.faiss + docs.parquet, dense only, read whole
            docs = pq.read_table(io.BytesIO(storage.read_bytes(storage.join(index_uri, LEGACY_FILES[1]))))
            self.store = PassageStore.from_table(docs)
            self.local = None
        else:
            self.local = local_data_dir(index_uri, self.meta)
            self.store = PassageStore.open(self.local / PASSAGES_FILE)

    @property
    def methods(self) -> tuple[str, ...]:
        """The retrieval methods this index serves."""
        return METHODS if (not self.legacy and self.meta.get("bm25")) else ("dense",)

    def dense(self):
        """The FAISS index (on the GPU where faiss-gpu has one)."""
        import faiss

        with self._lock:
            if self._dense is None:
                if self.legacy:
                    raw = np.frombuffer(storage.read_bytes(storage.join(self.uri, LEGACY_FILES[0])), dtype=np.uint8)
                    index = faiss.deserialize_index(raw)
                else:
                    index = faiss.read_index(str(self.local / DENSE_FILE))
                self._dense = dense_mod.to_gpu(index)
            return self._dense

    def bm25(self) -> BM25Index:
        """The BM25 part.

        Raises:
            IndexFormatError: the index was built without one (``--no-bm25``, or the first
                layout), saying to rebuild it."""
        with self._lock:
            if self._bm25 is None:
                if "bm25" not in self.methods:
                    how = ("an index of the first layout (index.faiss + docs.parquet)" if self.legacy
                           else "built with --no-bm25")
                    raise IndexFormatError(f"{self.uri}: {how} has no BM25 part for retrieval.method "
                                           "bm25 or hybrid; rebuild it with `specrag-batch index build`")
                self._bm25 = BM25Index(self.local / BM25_DIR, int(self.meta["bm25"].get("tokenizer_version", 1)))
            return self._bm25


@lru_cache(maxsize=4)
def open_index(index_uri: str) -> OpenIndex:
    """Process-wide cached :class:`OpenIndex` (one per URI)."""
    return OpenIndex(index_uri)


class Retriever(Protocol):
    """What the retrieval stages call: top-N passages per query, best first."""

    def search(self, queries: Sequence[str], top_n: int) -> list[list[Document]]:
        """For each query (in order) at most ``top_n`` passages, best first."""


class _Base:
    def __init__(self, index: OpenIndex):
        self.index = index

    def rows(self, queries: Sequence[str], k: int) -> np.ndarray:
        """Row numbers (q, k) of each query's top-``k``, best first, -1 past the last hit."""
        raise NotImplementedError

    def search(self, queries: Sequence[str], top_n: int) -> list[list[Document]]:
        """For each query (in order) at most ``top_n`` passages, best first (fewer when the
        index holds fewer, or, for BM25, when fewer share a term with the query). One store
        lookup for the whole batch."""
        if not queries:
            return []
        ids = self.rows(queries, top_n)
        hits = [[int(j) for j in row if j >= 0] for row in ids]
        docs = iter(self.index.store.get([j for row in hits for j in row]))
        return [[next(docs) for _ in row] for row in hits]


class DenseRetriever(_Base):
    """Dense retrieval: cosine similarity of the query's embedding (the index's
    ``embedding_model``) to the passages'."""

    def __init__(self, index: OpenIndex, nprobe: int | None = None, ef_search: int | None = None):
        super().__init__(index)
        self.nprobe, self.ef_search = nprobe, ef_search

    def embed(self, queries: Sequence[str]) -> np.ndarray:
        """The queries' L2-normalised embeddings, float32 (q, d).

        Raises:
            IndexFormatError: the index's embedding model makes vectors of another width than
                the index holds (an index built from an embedding column of another model)."""
        model = self.index.meta["embedding_model"]
        vectors = embed(model, list(queries))
        dim = self.index.meta.get("dimension")
        if dim and vectors.shape[1] != int(dim):
            source = f"column {self.index.meta['embedding_column']!r}" if self.index.meta.get("embedding_column") else "its build"
            raise IndexFormatError(f"index {redact_text(self.index.uri)}: holds {dim}-dimensional vectors (from {source}) "
                                   f"but its embedding model {model} makes {vectors.shape[1]}: rebuild it with "
                                   "--embedding-model naming the model that made the vectors")
        return vectors

    def search_vectors(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row ids) of the top-``k`` of each query vector (float32 (q, d), normalised)."""
        return dense_mod.search(self.index.dense(), vectors, k, nprobe=self.nprobe, ef_search=self.ef_search)

    def rows(self, queries: Sequence[str], k: int) -> np.ndarray:
        """See :meth:`_Base.rows`."""
        return self.search_vectors(self.embed(queries), k)[1]


class BM25Retriever(_Base):
    """Lexical retrieval: BM25 over the passages' title and text."""

    def rows(self, queries: Sequence[str], k: int) -> np.ndarray:
        """See :meth:`_Base.rows`."""
        return self.index.bm25().search(queries, k)[1]


def rrf(lists: Sequence[np.ndarray], k: int, top_n: int) -> np.ndarray:
    """Reciprocal-rank fusion of ranked row-id lists (each (q, depth), -1 = no hit): per query,
    every row scores the sum of 1 / (``k`` + rank) over the lists holding it (rank from 1); the
    ``top_n`` best, ties broken by the earliest list's rank, then the row id. -1 pads."""
    q = lists[0].shape[0]
    out = np.full((q, top_n), -1, np.int64)
    for i in range(q):
        score: dict[int, float] = {}
        first: dict[int, tuple] = {}
        for li, ids in enumerate(lists):
            for rank, j in enumerate(ids[i], 1):
                if j < 0:
                    continue
                j = int(j)
                score[j] = score.get(j, 0.0) + 1.0 / (k + rank)
                first.setdefault(j, (li, rank))
        best = sorted(score, key=lambda j: (-score[j], first[j], j))[:top_n]
        out[i, :len(best)] = best
    return out


class HybridRetriever(_Base):
    """Reciprocal-rank fusion of dense and BM25 retrieval (:func:`rrf`)."""

    def __init__(self, index: OpenIndex, dense: DenseRetriever, rrf_k: int = 60, candidates: int = 50):
        super().__init__(index)
        self.dense, self.bm25 = dense, BM25Retriever(index)
        self.rrf_k, self.candidates = rrf_k, candidates

    def rows(self, queries: Sequence[str], k: int) -> np.ndarray:
        """See :meth:`_Base.rows`: each retriever's top max(``candidates``, ``k``), fused."""
        depth = max(self.candidates, k)
        return rrf([self.dense.rows(queries, depth), self.bm25.rows(queries, depth)], self.rrf_k, k)


def get_retriever(index_uri: str, method: str = "dense", *, nprobe: int | None = None,
                  ef_search: int | None = None, rrf_k: int = 60, candidates: int = 50) -> _Base:
    """A retriever of ``method`` (:data:`METHODS`) over the index at ``index_uri`` (opened once
    per process, :func:`open_index`). ``nprobe`` / ``ef_search`` None: the index's operating
    point measured at build (``meta.json``), else 128 (:func:`.tuning.search_defaults`), the
    same default a run takes.

    Raises:
        ValueError: an unknown method.
        IndexFormatError: no index there; bm25 or hybrid over an index without a BM25 part."""
    if method not in METHODS:
        raise ValueError(f"unknown retrieval method {method!r}; known: {', '.join(METHODS)}")
    index = open_index(index_uri)
    if method != "dense" and method not in index.methods:
        index.bm25()  # raises, saying to rebuild
    default_nprobe, default_ef = tuning.search_defaults(index.meta)
    dense = DenseRetriever(index, default_nprobe if nprobe is None else nprobe,
                           default_ef if ef_search is None else ef_search)
    if method == "dense":
        return dense
    if method == "bm25":
        return BM25Retriever(index)
    return HybridRetriever(index, dense, rrf_k, candidates)


def retriever_for(retrieval) -> _Base:
    """The retriever a run's ``retrieval`` config section
    (:class:`~specrag_batch.config.RetrievalConfig`) asks for (``index`` must be set)."""
    return get_retriever(retrieval.index, retrieval.method, nprobe=retrieval.nprobe, ef_search=retrieval.ef_search,
                         rrf_k=retrieval.rrf_k, candidates=retrieval.hybrid_candidates)


def check_index(retrieval, *, load: bool = True) -> None:
    """Open the run's index (``retrieval.index``) before any engine loads, so that a missing or
    damaged index is one error naming it rather than every shard failing after the models
    start: its ``meta.json``, its passage store, the parts ``retrieval.method`` searches, and a
    dense index holding one vector per passage, of the width and metric ``meta.json`` names,
    and passages in the order the build wrote them (their ``doc_id`` fingerprint).
    ``load``: load the FAISS and BM25 parts (kept for the run's shards in this process,
    :func:`open_index`); False (shards searched in other processes, e.g. on Ray) only checks
    that their files are there.

    No index configured: nothing to check.

    Raises:
        IndexFormatError: naming the index and what is wrong (a file missing or not readable,
            a vector count that differs from the passage count, a vector width or metric that
            differs from ``meta.json``'s, a passage store whose ``doc_id`` order differs from the
            build's), saying to rebuild it."""
    uri = retrieval.index
    if not uri:
        return
    try:
        retriever = retriever_for(retrieval)  # meta.json and the passages; bm25/hybrid: a BM25 part exists
        index, passages = retriever.index, len(retriever.index.store)
        if not load:
            if not index.legacy:
                for part in (DENSE_FILE, *((BM25_DIR,) if retrieval.method != "dense" else ())):
                    if not (index.local / part).exists():
                        raise FileNotFoundError(f"{index.local / part} is missing")
            return
        expected = index.meta.get("passages_doc_ids_sha256")  # left out by builds before it existed
        if expected is not None and index.store.fingerprint() != expected:
            raise IndexFormatError(f"index {uri}: its passage store holds other passages or another order "
                                   "than the build wrote (doc_ids differ from meta.json's "
                                   "passages_doc_ids_sha256: parts of two builds?); rebuild it with "
                                   "`specrag-batch index build`")
        faiss_index = index.dense()
        wrong = _dense_mismatch(index.meta, passages, faiss_index.ntotal, int(faiss_index.d),
                                int(faiss_index.metric_type))
        if wrong:
            raise IndexFormatError(f"index {uri}: its dense index {wrong} (parts of two builds?); rebuild it "
                                   "with `specrag-batch index build`")
        if retrieval.method != "dense":
            index.bm25()
    except IndexFormatError as e:
        open_index.cache_clear()  # nothing refused is kept for the shards
        raise IndexFormatError(redact_text(str(e))) from None  # a URL's password never in the message
    except Exception as e:  # noqa: BLE001 - FAISS (RuntimeError), Arrow, OSError, bm25s: all mean a damaged index
        open_index.cache_clear()  # nothing half-opened is kept for the shards
        raise IndexFormatError(redact_text(f"index {uri}: cannot be opened ({type(e).__name__}: {e}); rebuild "
                                           "it with `specrag-batch index build`")) from None


def _dense_mismatch(meta: dict, passages: int, vectors: int, width: int, metric: int) -> str | None:
    """What in a loaded FAISS index (``vectors`` of ``width`` dimensions compared by FAISS
    metric ``metric``) disagrees with the index's ``meta.json`` and ``passages``, in words
    (None when nothing does): a count that differs from the passages', a width that differs
    from ``meta["dimension"]`` (the embedding model's, which queries are embedded with; FAISS
    would fail every search on ``assert d == self.d``), a ``meta["metric"]`` other than
    ``inner_product_normalised`` (cosine similarity), or a FAISS metric other than inner product."""
    import faiss

    if vectors != passages:
        return f"holds {vectors} vectors for {passages} passages"
    dimension = meta.get("dimension")
    if dimension is not None and int(dimension) != width:
        return (f"holds {width}-dimensional vectors; meta.json says {int(dimension)} (the embedding model "
                f"{meta.get('embedding_model')!r}, which queries are embedded with)")
    if meta.get("metric", "inner_product_normalised") != "inner_product_normalised":  # no build writes another
        return f"is described by meta.json as metric {meta.get('metric')!r}; only 'inner_product_normalised' is searched"
    if metric != faiss.METRIC_INNER_PRODUCT:
        name = {faiss.METRIC_L2: "L2 distance"}.get(metric, f"FAISS metric {metric}")
        return f"compares vectors by {name}; meta.json says inner product (cosine similarity of normalised vectors)"
    return None
