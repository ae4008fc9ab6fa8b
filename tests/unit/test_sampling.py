import numpy as np
import pytest

from specrag_batch.sampling import cluster_documents, row_seed, sample_subsets


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
