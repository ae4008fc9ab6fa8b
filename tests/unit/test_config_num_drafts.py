"""A ``sampling.num_drafts`` no user means (m = 100000) is warned of when a run starts, not
accepted silently: more drafts than the distinct document subsets N documents give (a row never
gets more), or more than ``MAX_DRAFTS``."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest

from specrag_batch.config import RunConfig
from specrag_batch.config.run_config import MAX_DRAFTS, distinct_subsets
from specrag_batch.stages.sampling import sample_subsets

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("n, k, strategy, want", [
    (10, 2, "cluster", 25), (10, 3, "cluster", 4 * 3 * 3), (10, 2, "cluster_cover", 25),
    (10, 2, "random", 45), (10, 2, "single_cluster", 45), (3, 5, "cluster", 1), (0, 2, "cluster", 0),
])
def test_distinct_subsets(n, k, strategy, want):
    assert distinct_subsets(n, k, strategy) == want


def test_the_bound_is_what_the_sampler_reaches_on_even_clusters():
    labels = np.array([0] * 5 + [1] * 5)  # N = 10 in k = 2 even clusters
    got = sample_subsets(labels, 1000, seed=1, strategy="cluster")
    assert len(got) == distinct_subsets(10, 2, "cluster") == len(set(product(range(5), range(5, 10))))
    assert len(sample_subsets(labels, 1000, seed=1, strategy="random", k=2)) <= math.comb(10, 2)


def _warnings(**kw):
    return [w for w in RunConfig(**kw).idle_settings() if w.startswith("sampling.num_drafts")]


def test_more_drafts_than_subsets_is_warned_naming_the_limit():
    (w,) = _warnings(sampling={"num_drafts": 100000})
    assert w.startswith("sampling.num_drafts (m = 100000) exceeds the 25 distinct document subsets that "
                        "retrieval.top_n = 10 documents give with sampling.num_clusters = 2")
    assert w.endswith("set sampling.num_drafts at most 25")
    assert _warnings(sampling={"num_drafts": 25}) == [] and _warnings() == []


def test_an_absurd_m_is_warned_even_when_the_documents_allow_it():
    (w,) = _warnings(sampling={"num_drafts": MAX_DRAFTS + 1}, retrieval={"top_n": 40})
    assert w.startswith(f"sampling.num_drafts (m = {MAX_DRAFTS + 1}) is above {MAX_DRAFTS}")
    assert _warnings(sampling={"num_drafts": MAX_DRAFTS}, retrieval={"top_n": 40}) == []


def test_standard_mode_drafts_nothing_so_m_is_not_warned():
    assert _warnings(mode="standard", sampling={"num_drafts": 100000}) == []
