"""The corpus index for retrieval (stage 1 when rows bring no passages): built offline by
``specrag-batch index build`` (:func:`build_index`), searched by
:class:`~specrag_batch.stages.retrieval.Retrieval` through :func:`retriever_for` with the run's
``retrieval.method`` (dense, BM25 or hybrid).

Modules: :mod:`.layout` (the directory, meta.json, errors), :mod:`.corpus` (reading and checking
the corpus shards), :mod:`.embed_shards` (resumable embedding), :mod:`.dense` (FAISS),
:mod:`.bm25` (BM25 with bm25s), :mod:`.store` (the lazily read passages), :mod:`.build` (the
build), :mod:`.search` (the retrievers). docs/retrieval.md is the user's page.
"""

from .build import build_index
from .layout import IndexBuildError, IndexFormatError
from .search import (METHODS, BM25Retriever, DenseRetriever, HybridRetriever, OpenIndex, get_retriever,
                     open_index, retriever_for)

FaissRetriever = DenseRetriever  # the name before BM25 and hybrid retrieval existed

__all__ = ["BM25Retriever", "DenseRetriever", "FaissRetriever", "HybridRetriever", "IndexBuildError",
           "IndexFormatError", "METHODS", "OpenIndex", "build_index", "get_retriever", "open_index",
           "retriever_for"]
