"""Stage 2, multi-perspective sampling (paper §3.2): m document subsets per row."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..config import RunConfig
from ..records import Flag, QueryRow, add_flag
from ..retrieval import embed, load_embedder
from ..sampling import cluster_documents, conditioned_texts, row_seed, sample_subsets
from .base import Stage


class MultiPerspectiveSampling(Stage):
    """Query-conditioned embeddings of every (query, document) pair of the chunk in one
    encoder call, K-Means per row (k = ``sampling.num_clusters``), m = ``sampling.num_drafts``
    subsets of one document per cluster (paper §3.2). The query is budgeted in encoder tokens
    so every document reaches the encoder (:func:`~specrag_batch.sampling.conditioned_texts`;
    cuts are flagged on the row). ``sampling.strategy: random`` needs no embeddings."""

    name = "multi_perspective_sampling"
    timer_name = "sampling"
    reads = ("query_id", "query", "top_documents")
    writes = ("subsets",)

    def __init__(self, config: RunConfig):
        self.config = config

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        config, sampling = self.config, self.config.sampling
        active = [row for row in rows if row.error is None]
        vectors = None
        if sampling.strategy != "random":  # random subsets need no embeddings
            encoder = load_embedder(config.retrieval.embedding_model)
            texts = []
            for row in active:
                row_texts, flags = conditioned_texts(
                    row.query, [f"{d.title}\n{d.text}".strip() for d in row.top_documents],
                    sampling.query_instruction, encoder.tokenizer, encoder.max_seq_length)
                texts += row_texts
                for flag in flags:
                    add_flag(row.flags, flag)
            vectors = embed(config.retrieval.embedding_model, texts)
        position = 0
        for row in active:
            n = len(row.top_documents)
            seed = row_seed(config.seed, row.query_id)
            if n < sampling.num_clusters:
                row.flags.append(Flag.FEWER_DOCUMENTS_THAN_K)
            if vectors is not None:
                labels = cluster_documents(vectors[position:position + n], sampling.num_clusters,
                                           seed, sampling.kmeans_n_init)
            else:  # random subsets: no clustering needed
                labels = np.zeros(n, dtype=int)
            position += n
            row.subsets = sample_subsets(labels, sampling.num_drafts, seed, sampling.strategy,
                                         k=sampling.num_clusters)
