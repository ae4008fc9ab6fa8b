"""Multi-perspective sampling (``stages.sampling``, paper §3.2): K-Means clusters, one document
per cluster in each subset, k and m clamped, seeded and stable across processes, and the
ablation strategies, on hand-made embeddings. With the real encoder:
tests/integration/test_sampling_encoder.py."""


import numpy as np
import pytest

from specrag_batch.stages.sampling import cluster_documents, row_seed, sample_subsets


def two_blobs(n_a=4, n_b=3, d=8, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(0, 0.01, (n_a, d)) + np.eye(d)[0]
    b = rng.normal(0, 0.01, (n_b, d)) + np.eye(d)[1]
    return np.vstack([a, b])


def test_clusters_follow_structure_and_each_subset_has_one_doc_per_cluster():
    x = two_blobs()
    labels = cluster_documents(x, k=2, seed=0)
    assert set(labels[:4]) != set(labels[4:]) and len(set(labels[:4])) == 1 and len(set(labels[4:])) == 1
    subs = sample_subsets(labels, m=5, seed=1)
    assert len(subs) == 5 and len(set(subs)) == 5
    for s in subs:
        assert len(s) == 2
        assert {labels[i] for i in s} == {0, 1}


def test_k_greater_than_n_clamps_to_n():
    x = two_blobs(1, 1)
    labels = cluster_documents(x, k=5, seed=0)
    assert sorted(labels) == [0, 1]
    assert sample_subsets(labels, m=5, seed=0) == [(0, 1)]  # only one distinct subset exists


def test_n_zero_gives_no_subsets():
    assert sample_subsets(np.zeros(0, dtype=int), m=5, seed=0) == []


def test_identical_documents_clamp_k_and_never_repeat_subsets():
    x = np.ones((4, 8))
    labels = cluster_documents(x, k=2, seed=0)
    assert set(labels) == {0}
    subs = sample_subsets(labels, m=5, seed=0)
    assert len(subs) == 4 and len(set(subs)) == 4  # 4 distinct single-document subsets


def test_m_capped_by_distinct_subsets():
    labels = np.array([0, 0, 1])  # 2 x 1 = 2 distinct subsets
    assert len(sample_subsets(labels, m=5, seed=3)) == 2


def test_deterministic_for_seed_and_varies_with_seed():
    x = two_blobs(5, 5)
    l1, l2 = cluster_documents(x, 2, seed=7), cluster_documents(x, 2, seed=7)
    assert (l1 == l2).all()
    assert sample_subsets(l1, 5, seed=11) == sample_subsets(l2, 5, seed=11)
    assert any(sample_subsets(l1, 5, seed=s) != sample_subsets(l1, 5, seed=11) for s in range(12, 20))


def test_row_seed_is_stable_across_processes():
    assert row_seed(0, "q1") == row_seed(0, "q1") != row_seed(1, "q1")
    assert row_seed(0, "q1") == 1741639052  # sha256-based: not Python's salted hash()


@pytest.mark.parametrize("strategy", ["random", "single_cluster"])
def test_ablation_strategies(strategy):
    labels = np.array([0, 0, 0, 1, 1, 1])
    subs = sample_subsets(labels, m=4, seed=0, strategy=strategy, k=2)
    assert len(subs) == 4 and len(set(subs)) == 4 and all(len(s) == 2 for s in subs)
    if strategy == "single_cluster":
        assert all(len({labels[i] for i in s}) == 1 for s in subs)


def test_cluster_cover_deals_each_cluster_out_without_replacement():
    """cluster_cover keeps the paper's one-document-per-cluster subsets but never repeats a
    document of a cluster before the whole cluster has been used: with m >= the largest
    cluster every document is in some subset, and the draw is seeded."""
    labels = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])  # two clusters of 5, m = 5
    for seed in range(30):
        subs = sample_subsets(labels, m=5, seed=seed, strategy="cluster_cover")
        assert len(subs) == 5 and len(set(subs)) == 5
        assert all({labels[i] for i in s} == {0, 1} for s in subs)
        used = [i for s in subs for i in s]
        assert sorted(used) == list(range(10))  # every document once: full coverage
        assert subs == sample_subsets(labels, m=5, seed=seed, strategy="cluster_cover")
    # the paper's uniform draw leaves some document out of every subset on most seeds
    missed = sum(len({i for s in sample_subsets(labels, m=5, seed=seed) for i in s}) < 10 for seed in range(30))
    assert missed > 15


def test_cluster_cover_second_pass_and_unequal_clusters():
    labels = np.array([0, 0, 1, 1, 1, 1, 1, 1])  # sizes 2 and 6, m = 6: cluster 0 is dealt 3 times
    subs = sample_subsets(labels, m=6, seed=4, strategy="cluster_cover")
    assert len(subs) == 6 and len(set(subs)) == 6
    big = [i for s in subs for i in s if labels[i] == 1]
    small = [i for s in subs for i in s if labels[i] == 0]
    assert sorted(big) == [2, 3, 4, 5, 6, 7] and sorted(small) == [0, 0, 0, 1, 1, 1]
    assert len(sample_subsets(np.array([0, 0, 1]), m=5, seed=0, strategy="cluster_cover")) == 2  # distinct cap
