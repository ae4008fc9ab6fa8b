"""Stage 2: multi-perspective sampling (paper §3.2).

The top-N documents of a query are embedded *query-conditioned* (the embedding text contains
the query and the document, so clusters reflect the documents' perspective on this query),
grouped into k clusters with K-Means, and m subsets are drawn with one document per cluster.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Literal, Sequence

import numpy as np
from sklearn.cluster import KMeans

Subset = tuple[int, ...]


def row_seed(seed: int, query_id: str) -> int:
    """Stable per-row seed: sha256(seed, query_id) -> uint32 (independent of PYTHONHASHSEED)."""
    h = hashlib.sha256(f"{seed}\x00{query_id}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def _distinct_rows(embeddings: np.ndarray) -> int:
    return len(np.unique(np.round(embeddings, 6), axis=0))


def cluster_documents(embeddings: np.ndarray, k: int, seed: int, n_init: int = 10) -> np.ndarray:
    """K-Means labels for document embeddings.

    Args:
        embeddings: float array, shape (N, d); N >= 1.
        k: requested clusters; clamped to the number of distinct embeddings (k <= N).
        seed: K-Means ``random_state``.

    Returns:
        int array of shape (N,), labels in ``[0, k_eff)`` with every label used.
    """
    n = embeddings.shape[0]
    k_eff = max(1, min(k, n, _distinct_rows(embeddings)))
    if k_eff == 1:
        return np.zeros(n, dtype=int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning on near-duplicate points
        km = KMeans(n_clusters=k_eff, random_state=seed, n_init=n_init)
        labels = km.fit_predict(np.asarray(embeddings, dtype=np.float64))
    # relabel 0..k-1 in order of first appearance so results do not depend on label ids
    _, first = np.unique(labels, return_index=True)
    order = {lab: i for i, lab in enumerate(labels[np.sort(first)])}
    return np.array([order[x] for x in labels], dtype=int)


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
    strategy: Literal["cluster", "random", "single_cluster"] = "cluster",
    k: int | None = None,
) -> list[Subset]:
    """Draw up to m distinct document subsets.

    ``cluster`` (paper §3.2): each subset holds one document from every cluster, so a subset
    has k_eff = number of clusters documents. ``random`` (Table 3 ablation "random sampling"):
    k documents uniformly at random. ``single_cluster`` (ablation "sampling from the same
    cluster"): k documents all from one cluster (or the whole cluster if smaller).

    Subsets are sorted index tuples; duplicates are never repeated, so fewer than m subsets
    come back when fewer distinct ones exist. Deterministic for a given seed.

    Args:
        labels: shape (N,), cluster label per document (from :func:`cluster_documents`).
        m: number of subsets wanted (drafts).
        seed: RNG seed (use :func:`row_seed`).
        k: documents per subset for ``random``/``single_cluster`` (default: number of clusters).

    Returns:
        list of subsets, each a sorted tuple of document indices into the N documents.
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
