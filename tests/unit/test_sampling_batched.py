"""Batched K-Means (issue 38 item 1): one call clusters every row of a chunk and gives the
partitions scikit-learn's per-row KMeans gives. Pure numpy and scikit-learn, no model; no
timings (benchmarks/sampling_scale.py measures them)."""

import numpy as np
import pytest

from specrag_batch.config import RunConfig
from specrag_batch.core.records import Document, Flag, QueryRow
from specrag_batch.core import kmeans
from specrag_batch.stages import sampling
from specrag_batch.core.kmeans import kmeans_labels, sklearn_labels
from specrag_batch.stages.sampling import (MultiPerspectiveSampling, cluster_documents, cluster_rows, row_seed,
                                           sample_subsets)


def same_partition(a, b) -> bool:
    """Equal up to a permutation of the label ids."""
    a, b = np.asarray(a), np.asarray(b)
    return len(a) == len(b) and len(set(zip(a.tolist(), b.tolist()))) == len(set(a.tolist())) == len(set(b.tolist()))


def blobs(rng, n, k, d=32, spread=0.15):
    """n unit vectors around k random directions (clustered like query-conditioned embeddings)."""
    centres = rng.normal(size=(k, d))
    x = centres[rng.integers(k, size=n)] + spread * rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def ragged_rows(seed=0, rows=20):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rows):
        n = int(rng.integers(1, 31))
        out.append((blobs(rng, n, int(rng.integers(1, 5)), spread=float(rng.choice([0.05, 0.3, 1.0]))),
                    int(rng.integers(2**32))))
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_same_labels_as_per_row_sklearn_on_ragged_clustered_rows(k):
    rows = ragged_rows(seed=k)
    batched = cluster_rows([x for x, _ in rows], k, [s for _, s in rows], n_init=3)
    for (x, seed), labels in zip(rows, batched):
        reference = cluster_documents(x, k, seed, n_init=3)
        assert labels.tolist() == reference.tolist()  # both numbered in order of first appearance


def test_kmeans_labels_match_sklearn_fit_predict_up_to_label_ids():
    rng = np.random.default_rng(5)
    xs = [blobs(rng, int(rng.integers(3, 41)), 3, spread=0.5) for _ in range(20)]
    ks = [int(rng.integers(2, 4)) for _ in xs]
    seeds = [int(rng.integers(2**32)) for _ in xs]
    labels, route = kmeans_labels(xs, ks, seeds, n_init=4)
    assert len(labels) == len(xs) and route.shape == (len(xs),)
    for x, k, seed, got in zip(xs, ks, seeds, labels):
        assert same_partition(got, sklearn_labels(x, k, seed, n_init=4))


def test_edge_rows_in_one_chunk():
    rng = np.random.default_rng(1)
    two = blobs(rng, 6, 2)
    rows = [
        np.zeros((0, 32)),                                 # N = 0
        two[:1],                                           # N = 1
        np.repeat(two[:1], 5, axis=0),                     # all identical: k_eff = 1
        np.vstack([np.repeat(two[:1], 3, 0), np.repeat(two[3:4], 2, 0)]),  # 2 distinct points, k = 3
        np.vstack([two, two[:2], two[:2]]),                # duplicates among distinct points
        two[:2],                                           # N = k
        blobs(rng, 40, 3),                                 # the chunk's longest row
        two[:3] + 1e-9,                                    # distinct only below the 6-decimal rounding
    ]
    seeds = list(range(100, 100 + len(rows)))
    got = cluster_rows(rows, 3, seeds)
    for x, seed, labels in zip(rows, seeds, got):
        assert labels.tolist() == cluster_documents(x, 3, seed).tolist()
    assert got[0].shape == (0,) and got[1].tolist() == [0] and set(got[2]) == {0}
    assert sorted(set(got[3])) == [0, 1] and got[3].tolist() == [0, 0, 0, 1, 1]
    assert got[5].tolist() == [0, 1]


def test_k_one_is_all_zero_without_kmeans():
    rows = [x for x, _ in ragged_rows(seed=9, rows=5)]
    assert all(not labels.any() for labels in cluster_rows(rows, 1, [0] * 5))


def test_exact_ties_are_left_to_sklearn():
    # a square: every k-means++ candidate ties exactly, and with two opposite corners as centres
    # the other two are equidistant; scikit-learn's rounding decides those, so scikit-learn does
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    seeds = list(range(8))
    labels, route = kmeans_labels([x] * len(seeds), [2] * len(seeds), seeds, n_init=3)
    assert set(route.tolist()) <= {kmeans.SEEDED_BY_SKLEARN, kmeans.BY_SKLEARN} and kmeans.BATCHED not in route
    for seed, got in zip(seeds, labels):
        assert same_partition(got, sklearn_labels(x, 2, seed, n_init=3))


def test_a_row_gets_the_same_labels_alone_or_in_any_chunk_and_run_to_run():
    rows = ragged_rows(seed=3, rows=12)
    xs, seeds = [x for x, _ in rows], [s for _, s in rows]
    together = cluster_rows(xs, 2, seeds)
    again = cluster_rows(xs, 2, seeds)
    alone = [cluster_rows([x], 2, [s])[0] for x, s in rows]
    reversed_chunk = cluster_rows(xs[::-1], 2, seeds[::-1])[::-1]
    for a, b, c, d in zip(together, again, alone, reversed_chunk):
        assert a.tolist() == b.tolist() == c.tolist() == d.tolist()


def test_the_row_seed_decides_the_k_means_plus_plus_draws():
    # four equal-sized, equally spread groups: the restarts' seeds decide which grouping wins
    rng = np.random.default_rng(2)
    x = blobs(rng, 16, 4, spread=0.8)
    seeds = [row_seed(0, f"q{i}") for i in range(40)]
    labels, _ = kmeans_labels([x] * len(seeds), [2] * len(seeds), seeds, n_init=1)
    for seed, got in zip(seeds, labels):
        assert same_partition(got, sklearn_labels(x, 2, seed, n_init=1))
    assert len({tuple(sampling._first_appearance(g)) for g in labels}) > 1  # the seed matters


def test_numpy_legacy_choice_draws_one_uniform_searched_from_the_right():
    # the assumption kmeans.py reproduces scikit-learn's first k-means++ centre with
    for seed in range(20):
        for n in (1, 2, 7, 40):
            a, b = np.random.RandomState(seed), np.random.RandomState(seed)
            cdf = (np.ones(n) / n).cumsum()
            cdf /= cdf[-1]
            assert a.choice(n, p=np.ones(n) / n) == np.searchsorted(cdf, b.random_sample(), side="right")
            assert a.random_sample() == b.random_sample()


def test_the_stage_draws_the_subsets_the_per_row_path_drew(monkeypatch):
    config = RunConfig(sampling={"kmeans_n_init": 4})
    rng = np.random.default_rng(4)
    rows, blocks = [], []
    for i in range(12):
        n = [10, 10, 7, 3, 1, 10, 12, 10, 5, 10, 2, 10][i]
        rows.append(QueryRow(row_index=i, query_id=f"q{i}", query=f"question {i}", task="qa",
                             top_documents=[Document(f"d{j}", "", f"text {j}") for j in range(n)]))
        blocks.append(blobs(rng, n, 3, d=384, spread=0.6).astype(np.float32))
    rows[4].error = "failed earlier"
    active_blocks = [b for r, b in zip(rows, blocks) if r.error is None]
    monkeypatch.setattr(sampling, "conditioned_vectors", lambda active, cfg: np.vstack(active_blocks))
    MultiPerspectiveSampling(config)(rows)
    s = config.sampling
    for row, x in zip(rows, blocks):
        if row.error is not None:
            assert row.subsets is None
            continue
        seed = row_seed(config.seed, row.query_id)
        before = sample_subsets(cluster_documents(x, s.num_clusters, seed, s.kmeans_n_init), s.num_drafts, seed,
                                s.strategy, k=s.num_clusters)
        assert row.subsets == before
        assert (Flag.FEWER_DOCUMENTS_THAN_K in row.flags) == (len(x) < s.num_clusters)


def _stage_rows(rng, sizes, d=64):
    rows, blocks = [], []
    for i, n in enumerate(sizes):
        rows.append(QueryRow(row_index=i, query_id=f"q{i}", query=f"question {i}", task="qa",
                             top_documents=[Document(f"d{j}", "", f"text {j}") for j in range(n)]))
        blocks.append(blobs(rng, n, 3, d=d, spread=0.6).astype(np.float32))
    return rows, blocks


def _per_row_subsets(config, row, x):
    s, seed = config.sampling, row_seed(config.seed, row.query_id)
    return sample_subsets(cluster_documents(x, s.num_clusters, seed, s.kmeans_n_init), s.num_drafts, seed,
                          s.strategy, k=s.num_clusters)


def test_a_non_finite_embedding_fails_only_its_row(monkeypatch):
    """Trial finding (issue 47 item 6): a NaN or inf in one row's document embeddings made the
    batched K-Means raise for the whole chunk (scikit-learn refuses NaN input), so the shard
    failed. Now that row alone gets an error naming the row, the field and the document
    (``error_reason`` ``non_finite_embedding``); the other rows are clustered as before."""
    from specrag_batch.core.records import ErrorReason

    config = RunConfig(sampling={"kmeans_n_init": 2})
    rows, blocks = _stage_rows(np.random.default_rng(5), [8, 10, 9, 6, 10])
    blocks[1][3, 7] = np.nan
    blocks[3][0, 0], blocks[3][5, 1] = np.inf, -np.inf
    monkeypatch.setattr(sampling, "conditioned_vectors", lambda active, cfg: np.vstack(blocks))
    MultiPerspectiveSampling(config)(rows)
    failed = {r.row_index: r for r in rows if r.error is not None}
    assert sorted(failed) == [1, 3]
    assert failed[1].error.startswith("row 1 (query_id='q1'): field 'documents': the query-conditioned embedding "
                                      "of document 3 (doc_id 'd3') holds a NaN or infinite value"), failed[1].error
    assert "document 0 (doc_id 'd0') (and 1 more)" in failed[3].error, failed[3].error
    assert all(r.error_reason == ErrorReason.NON_FINITE_EMBEDDING and r.subsets is None for r in failed.values())
    for row, x in zip(rows, blocks):
        if row.error is None:
            assert row.subsets and row.subsets == _per_row_subsets(config, row, x)
    with pytest.raises(ValueError, match="row 1: the embedding of document 3 holds a NaN"):
        cluster_rows(blocks, 3, [1] * len(blocks))  # the API names the row too


def test_float16_embeddings_are_clustered_as_float32(monkeypatch):
    """Trial finding (issue 47 item 6): float16 embeddings overflowed into NaN where the rows
    are compared after rounding (``np.round(x, 6)`` multiplies by 10^6, past float16's 65504),
    so every row counted one distinct document and was left unclustered (one cluster). They are
    now compared in float32: the same clusters and subsets as the same vectors in float32."""
    config = RunConfig(sampling={"kmeans_n_init": 2})
    rows, blocks = _stage_rows(np.random.default_rng(6), [9, 10, 7])
    half = [b.astype(np.float16) for b in blocks]
    widened = [h.astype(np.float32) for h in half]
    seeds = [row_seed(config.seed, r.query_id) for r in rows]
    labels = cluster_rows(half, 3, seeds, 2)
    assert all(len(set(lab.tolist())) == 3 for lab in labels), labels
    assert [lab.tolist() for lab in labels] == [lab.tolist() for lab in cluster_rows(widened, 3, seeds, 2)]
    assert cluster_documents(half[0], 3, seeds[0], 2).tolist() == labels[0].tolist()
    monkeypatch.setattr(sampling, "conditioned_vectors", lambda active, cfg: np.vstack(half))
    MultiPerspectiveSampling(config)(rows)
    assert [r.subsets for r in rows] == [_per_row_subsets(config, r, x) for r, x in zip(rows, widened)]
    assert all(r.error is None for r in rows)
