"""Stage 2: multi-perspective sampling (paper §3.2).

The top-N documents of a query are embedded *query-conditioned* (the embedding text contains
the query and the document, so clusters reflect the documents' perspective on this query),
grouped into k clusters with K-Means, and m subsets are drawn with one document per cluster.
The query part of each text is budgeted in encoder tokens (:func:`conditioned_texts`) so a long
query cannot push the documents out of the encoder's window.

The stage class :class:`MultiPerspectiveSampling` embeds every row of a chunk in one encoder
call, clusters every row of the chunk in one batched K-Means (:func:`cluster_rows`, the
partitions of scikit-learn's per-row ``KMeans``: :mod:`specrag_batch.core.kmeans`) and draws
each row's subsets.
"""

from __future__ import annotations

import hashlib
from typing import Literal, Sequence

import numpy as np

from ..config import RunConfig
from ..engines.embeddings import embed, load_embedder
from ..core.records import ErrorReason, Flag, QueryRow, add_flag
from .base import Stage
from ..core.kmeans import kmeans_labels, sklearn_labels

Subset = tuple[int, ...]


# row flags
TRUNCATED_QUERY = Flag.TRUNCATED_QUERY_FOR_SAMPLING
TRUNCATED_DOCUMENTS = Flag.TRUNCATED_DOCUMENTS_FOR_SAMPLING


def conditioned_texts(query: str, documents: Sequence[str], instruction: str, tokenizer,
                      max_seq_length: int) -> tuple[list[str], list[str]]:
    """The query-conditioned embedding texts of one row (paper §3.2), with the query budgeted in
    the encoder's own tokens so that every document reaches the encoder.

    The encoder sees at most ``max_seq_length`` tokens (special tokens included) and drops the
    rest; with the default ``{query}\n{document}`` a long query would fill the window and every
    document would embed alike. The query keeps all of its tokens when the row's longest
    document still fits beside it; otherwise it is cut (its head kept, at a token boundary) to
    ``max(room - longest document, room // 2)`` tokens, where ``room`` is the window less the
    special tokens and the instruction's own text. So each document gets at least half of the
    window, and every document of the row is conditioned on the same query text.

    Args:
        query: the row's question or claim.
        documents: the texts to embed (``title\ntext``), N >= 1.
        instruction: ``sampling.query_instruction`` with ``{query}`` and ``{document}``.
        tokenizer: the encoder's Hugging Face tokenizer (a fast one cuts the query's own text
            at a token offset; a slow one decodes the kept tokens).
        max_seq_length: the encoder's window in tokens (``SentenceTransformer.max_seq_length``).

    Returns:
        (texts, flags): one text per document, in order; flags holds
        :data:`TRUNCATED_QUERY` when the query was cut and :data:`TRUNCATED_DOCUMENTS` when a
        text is still longer than the window (a document longer than its share: its end does
        not reach the encoder).

    Raises:
        ValueError: the instruction alone leaves no room in the window.
    """
    def count(texts: list[str]) -> list[int]:
        return [len(x) for x in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]

    window = max_seq_length - tokenizer.num_special_tokens_to_add(pair=False)
    room = window - count([instruction.format(query="", document="")])[0]
    if room <= 0:
        raise ValueError(f"sampling.query_instruction leaves no room in the encoder's "
                         f"{max_seq_length}-token window")
    flags: list[str] = []
    budget = max(room - max(count(list(documents))), room // 2)
    if count([query])[0] > budget:
        if budget <= 0:
            query = ""
        elif getattr(tokenizer, "is_fast", False):  # cut the original text at a token boundary
            offsets = tokenizer(query, add_special_tokens=False, return_offsets_mapping=True,
                                verbose=False)["offset_mapping"]
            query = query[:offsets[budget - 1][1]]
        else:
            query = tokenizer.decode(tokenizer(query, add_special_tokens=False, verbose=False)["input_ids"][:budget])
        flags.append(TRUNCATED_QUERY)
    texts = [instruction.format(query=query, document=d) for d in documents]
    if max(count(texts)) > window:
        flags.append(TRUNCATED_DOCUMENTS)
    return texts, flags


def row_seed(seed: int, query_id: str) -> int:
    """Stable per-row seed: sha256(seed, query_id) -> uint32 (independent of PYTHONHASHSEED)."""
    h = hashlib.sha256(f"{seed}\x00{query_id}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def at_least_float32(embeddings: np.ndarray) -> np.ndarray:
    """``embeddings`` as a float array of at least 32 bits (float16 and bfloat16 vectors, or
    integers, converted; float32 and float64 kept): rounding or distances computed in float16
    overflow (``np.round(x, 6)`` multiplies by 10^6, past float16's largest value, 65504)."""
    embeddings = np.asarray(embeddings)
    if embeddings.dtype.kind == "f" and embeddings.dtype.itemsize >= 4:
        return embeddings
    return embeddings.astype(np.float32)


def _distinct_rows(embeddings: np.ndarray) -> int:
    """Distinct rows after rounding to 6 decimals (compared by value, -0.0 == 0.0), computed in
    at least float32 (:func:`at_least_float32`)."""
    return len({row.tobytes() for row in np.round(at_least_float32(embeddings), 6) + 0.0})


def non_finite_documents(embeddings: np.ndarray) -> list[int]:
    """The documents (rows of ``embeddings``, (N, d)) whose embedding holds a NaN or an
    infinite value: K-Means cannot place them (scikit-learn refuses the whole input)."""
    return [int(i) for i in np.flatnonzero(~np.isfinite(np.asarray(embeddings)).all(axis=1))]


def _k_eff(embeddings: np.ndarray, k: int) -> int:
    return max(1, min(k, embeddings.shape[0], _distinct_rows(embeddings)))


def _first_appearance(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..k-1 in order of first appearance (independent of K-Means' ids)."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=int)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[inverse.ravel()]


def cluster_documents(embeddings: np.ndarray, k: int, seed: int, n_init: int = 10) -> np.ndarray:
    """K-Means labels for the query-conditioned document embeddings of one row (paper §3.2:
    the top-N documents are clustered into k groups by K-Means), with scikit-learn's per-row
    ``KMeans``: the reference :func:`cluster_rows` reproduces (tests, benchmarks).

    Args:
        embeddings: float array, shape (N, d) (:func:`specrag_batch.engines.embeddings.embed` of
            :func:`conditioned_texts`); N = 0 gives an empty label array.
        k: requested clusters; clamped to k_eff = min(k, N, distinct embeddings), rows
            compared after rounding to 6 decimals; k_eff = 1 skips K-Means (all label 0).
        seed: K-Means ``random_state``.
        n_init: K-Means restarts (``sampling.kmeans_n_init``).

    Returns:
        int array of shape (N,), labels in ``[0, k_eff)`` with every label used, numbered in
        order of first appearance (so they do not depend on K-Means' label ids).
    """
    embeddings = at_least_float32(embeddings)
    n = embeddings.shape[0]
    k_eff = _k_eff(embeddings, k)
    if k_eff == 1:
        return np.zeros(n, dtype=int)
    return _first_appearance(sklearn_labels(embeddings, k_eff, seed, n_init))


def cluster_rows(blocks: Sequence[np.ndarray], k: int, seeds: Sequence[int],
                 n_init: int = 10) -> list[np.ndarray]:
    """:func:`cluster_documents` of many rows in one batched K-Means
    (:func:`specrag_batch.core.kmeans.kmeans_labels`): the same labels, row by row, as
    scikit-learn's per-row ``KMeans`` gives (a row whose arithmetic comes within rounding of a
    tie is clustered by scikit-learn itself), at a small part of the cost.

    Args:
        blocks: one (N_i, d) embedding array per row (N_i = 0 allowed).
        k: requested clusters (``sampling.num_clusters``), clamped per row as in
            :func:`cluster_documents`.
        seeds: the K-Means ``random_state`` of each row (:func:`row_seed`).
        n_init: K-Means restarts (``sampling.kmeans_n_init``).

    Returns:
        one label array per row, as :func:`cluster_documents` returns it.

    Raises:
        ValueError: a row's embeddings hold a NaN or an infinite value (naming the row and the
            document; :class:`MultiPerspectiveSampling` fails such a row before clustering).
    """
    blocks = [at_least_float32(x) for x in blocks]
    for i, x in enumerate(blocks):
        bad = non_finite_documents(x)
        if bad:
            raise ValueError(f"row {i}: the embedding of document {bad[0]} holds a NaN or infinite value")
    out = [np.zeros(len(x), dtype=int) for x in blocks]
    ks = [_k_eff(x, k) for x in blocks]
    todo = [i for i, k_eff in enumerate(ks) if k_eff > 1]
    if todo:
        labels, _ = kmeans_labels([np.asarray(blocks[i], dtype=np.float64) for i in todo],
                                  [ks[i] for i in todo], [seeds[i] for i in todo], n_init)
        for i, row_labels in zip(todo, labels):
            out[i] = _first_appearance(row_labels)
    return out


def _distinct_subset_count(sizes: Sequence[int], cap: int) -> int:
    total = 1
    for s in sizes:
        total *= s
        if total >= cap:
            return cap
    return total


def sample_subsets(
    labels: np.ndarray,
    m: int,
    seed: int,
    strategy: Literal["cluster", "cluster_cover", "random", "single_cluster"] = "cluster",
    k: int | None = None,
) -> list[Subset]:
    """Draw up to m distinct document subsets.

    ``cluster`` (paper §3.2): each subset holds one document from every cluster, so a subset
    has k_eff = number of clusters documents, drawn uniformly within each cluster, independently
    for every subset. ``cluster_cover``: the same one-document-per-cluster subsets, but each
    cluster's documents are dealt out without replacement (a fresh random order of the cluster
    per pass), so no document of a cluster comes back before all of that cluster's documents
    have been used; with m >= the largest cluster's size every document is in some subset (the
    paper's uniform draw leaves a document of a 5-document cluster out of all m = 5 subsets
    with probability 0.8^5 = 0.33). ``random`` (Table 3 ablation "random sampling"):
    k documents uniformly at random. ``single_cluster`` (ablation "sampling from the same
    cluster"): k documents all from one cluster (or the whole cluster if smaller).

    Subsets are sorted index tuples; duplicates are never repeated, so fewer than m subsets
    come back when fewer distinct ones exist, or when the draws stop at 50·m + 100 attempts
    before finding that many distinct ones. Deterministic for a given seed.

    Args:
        labels: shape (N,), cluster label per document (from :func:`cluster_documents`).
        m: number of subsets wanted (drafts).
        seed: RNG seed (use :func:`row_seed`).
        k: documents per subset for ``random``/``single_cluster`` (default: number of
            clusters; clamped to [1, N]); ignored by ``cluster`` and ``cluster_cover``.

    Returns:
        list of at most m subsets, each a sorted tuple of document indices into the N documents.

    Raises:
        ValueError: unknown ``strategy`` (only when N > 0 and m > 0).
    """
    n = len(labels)
    if n == 0 or m <= 0:
        return []
    rng = np.random.default_rng(seed)
    clusters = [np.flatnonzero(labels == c) for c in range(int(labels.max()) + 1)]
    clusters = [c for c in clusters if len(c)]
    per = k if k is not None else len(clusters)
    per = max(1, min(per, n))

    if strategy == "cluster":
        target = _distinct_subset_count([len(c) for c in clusters], m)
        draw = lambda: tuple(sorted(int(rng.choice(c)) for c in clusters))  # noqa: E731
    elif strategy == "random":
        from math import comb
        target = min(m, comb(n, per))
        draw = lambda: tuple(sorted(int(i) for i in rng.choice(n, size=per, replace=False)))  # noqa: E731
    elif strategy == "single_cluster":
        from math import comb
        target = min(m, sum(comb(len(c), min(per, len(c))) for c in clusters))

        def draw() -> Subset:
            c = clusters[int(rng.integers(len(clusters)))]
            size = min(per, len(c))
            return tuple(sorted(int(i) for i in rng.choice(c, size=size, replace=False)))
    elif strategy == "cluster_cover":
        target = _distinct_subset_count([len(c) for c in clusters], m)
        decks: list[list[int]] = [[] for _ in clusters]

        def draw() -> Subset:
            picks = []
            for ci, c in enumerate(clusters):
                if not decks[ci]:  # a new pass over the cluster, in a fresh random order
                    decks[ci] = [int(i) for i in rng.permutation(c)]
                picks.append(decks[ci].pop())
            return tuple(sorted(picks))
    else:
        raise ValueError(f"unknown sampling strategy {strategy!r}")

    out: list[Subset] = []
    seen: set[Subset] = set()
    attempts = 0
    while len(out) < target and attempts < 50 * m + 100:
        attempts += 1
        s = draw()
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out



def conditioned_vectors(rows: Sequence[QueryRow], config: RunConfig) -> np.ndarray:
    """The query-conditioned embeddings of every top document of ``rows``, in row order, from
    one encoder call (:func:`conditioned_texts`; its flags are added to the rows): shape
    (sum of the rows' N, d). The encoder runs where sentence-transformers puts it (a GPU when
    there is one, :func:`specrag_batch.engines.embeddings.load_embedder`)."""
    sampling = config.sampling
    encoder = load_embedder(config.retrieval.embedding_model)
    texts = []
    for row in rows:
        row_texts, flags = conditioned_texts(
            row.query, [f"{d.title}\n{d.text}".strip() for d in row.top_documents],
            sampling.query_instruction, encoder.tokenizer, encoder.max_seq_length)
        texts += row_texts
        for flag in flags:
            add_flag(row.flags, flag)
    return embed(config.retrieval.embedding_model, texts)


class MultiPerspectiveSampling(Stage):
    """Query-conditioned embeddings of every (query, document) pair of the chunk in one
    encoder call (:func:`conditioned_vectors`), K-Means of every row of the chunk in one batched
    call (k = ``sampling.num_clusters``; :func:`cluster_rows`, scikit-learn's per-row
    partitions), m = ``sampling.num_drafts`` subsets of one document per cluster (paper §3.2).
    The query is budgeted in encoder tokens so every document reaches the encoder
    (:func:`~specrag_batch.stages.sampling.conditioned_texts`; cuts are flagged on the row).
    ``sampling.strategy: random`` needs no embeddings. A row whose embeddings hold a NaN or an
    infinite value (the encoder's output for one of its texts) fails alone, naming the document
    (``error_reason`` ``non_finite_embedding``); the chunk's other rows are clustered."""

    name = "multi_perspective_sampling"
    timer_name = "sampling"
    reads = ("query_id", "query", "top_documents")
    writes = ("subsets",)

    def __init__(self, config: RunConfig):
        self.config = config

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        config, sampling = self.config, self.config.sampling
        active = [row for row in rows if row.error is None]
        seeds = [row_seed(config.seed, row.query_id) for row in active]
        sizes = [len(row.top_documents) for row in active]
        if sampling.strategy != "random":  # random subsets need no embeddings
            vectors = at_least_float32(conditioned_vectors(active, config))
            blocks = np.split(vectors, np.cumsum(sizes)[:-1]) if active else []
            for row, block in zip(active, blocks):
                _fail_non_finite(row, block, config.retrieval.embedding_model)
            keep = [i for i, row in enumerate(active) if row.error is None]
            active, seeds, sizes = [active[i] for i in keep], [seeds[i] for i in keep], [sizes[i] for i in keep]
            labels = cluster_rows([blocks[i] for i in keep], sampling.num_clusters, seeds, sampling.kmeans_n_init)
        else:  # random subsets: no clustering needed
            labels = [np.zeros(n, dtype=int) for n in sizes]
        for row, seed, n, row_labels in zip(active, seeds, sizes, labels):
            if n < sampling.num_clusters:
                row.flags.append(Flag.FEWER_DOCUMENTS_THAN_K)
            row.subsets = sample_subsets(row_labels, sampling.num_drafts, seed, sampling.strategy,
                                         k=sampling.num_clusters)


def _fail_non_finite(row: QueryRow, block: np.ndarray, model: str) -> None:
    """Fail ``row`` when the embedding of one of its documents (``block``, (N, d)) holds a NaN
    or an infinite value, naming the first such document (field ``documents``, code
    :attr:`ErrorReason.NON_FINITE_EMBEDDING`)."""
    bad = non_finite_documents(block)
    if bad:
        doc = row.top_documents[bad[0]]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        row.fail("documents", f"the query-conditioned embedding of document {bad[0]} (doc_id {doc.doc_id!r}){more} "
                 f"holds a NaN or infinite value ({model}); K-Means cannot cluster the row (paper §3.2)",
                 code=ErrorReason.NON_FINITE_EMBEDDING)
