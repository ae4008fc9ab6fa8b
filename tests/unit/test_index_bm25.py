"""The BM25 part of an index (docs/retrieval.md): built in two streaming passes, it scores
exactly as bm25s's own in-memory index of the same passages, its search over the postings a
query touches ranks as bm25s's scores do, and a query sharing no term with the corpus finds
nothing."""

from __future__ import annotations

import numpy as np
import pytest

from specrag_batch.index.bm25 import BM25Builder, BM25Index
from specrag_batch.index.search import rrf

WORDS = ["climate", "warming", "co2", "ice", "sea", "level", "the", "a", "of", "arctic", "temperature",
         "rise", "carbon", "model", "study", "ocean", "Ocean's", "naïve", "café"]


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(7)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(0, 14))) for _ in range(400)]
    texts[3], texts[8] = "", "the a of"  # no term at all, only stop words
    return texts


def test_streamed_index_scores_as_bm25s_in_memory_index(tmp_path, corpus):
    import bm25s

    builder = BM25Builder(tmp_path)
    for start in range(0, len(corpus), 37):  # batches of another size than anything else
        builder.add(corpus[start:start + 37])
    summary = builder.finish(tmp_path / "bm25")
    assert summary["documents"] == len(corpus)
    assert not (tmp_path / "bm25-triples.bin").exists()  # the spill file is removed

    tokenizer = bm25s.tokenization.Tokenizer(lower=True, stopwords="en")
    reference = bm25s.BM25()
    reference.index(tokenizer.tokenize(corpus, return_as="tuple", show_progress=False), show_progress=False)
    ours = BM25Index(tmp_path / "bm25")
    for query in ["climate warming", "sea ice arctic", "carbon ocean study model", "café naïve", "Ocean's rise"]:
        ids = tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        mine = ours.tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        assert ids == mine
        np.testing.assert_allclose(ours.retriever.get_scores(mine), reference.get_scores(ids), rtol=1e-6)
    queries = ["sea ice arctic", "climate climate warming", "Ocean's model study", "café"]
    scores, rows = ours.search(queries, 7)
    for query, got_scores, got_rows in zip(queries, scores, rows):
        ids = tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        full = reference.get_scores(ids)
        held = np.flatnonzero(full > 0)
        best = held[np.lexsort((held, -full[held]))][:7]  # bm25s's scores, best first, ties by row
        assert got_rows[:len(best)].tolist() == best.tolist() and (got_rows[len(best):] == -1).all()
        np.testing.assert_allclose(got_scores[:len(best)], full[best], rtol=1e-6)


def test_a_query_without_a_corpus_term_finds_nothing(tmp_path, corpus):
    builder = BM25Builder(tmp_path)
    builder.add(corpus)
    builder.finish(tmp_path / "bm25")
    index = BM25Index(tmp_path / "bm25")
    _, rows = index.search(["xyzzy plugh", "the of", "arctic"], 3)
    assert (rows[0] == -1).all() and (rows[1] == -1).all()  # bm25s would return passages without terms
    assert (rows[2] >= 0).all()
    _, rows = index.search(["arctic"], 10_000)  # k above the corpus: clipped, not an error
    assert rows.shape == (1, len(corpus))


def test_reciprocal_rank_fusion():
    dense = np.array([[1, 2, 3, -1]])
    bm25 = np.array([[3, 4, -1, -1]])
    # 3: 1/63 + 1/61; 1: 1/61; 4: 1/62; 2: 1/62 (tie with 4: the dense list's rank wins)
    assert rrf([dense, bm25], 60, 4).tolist() == [[3, 1, 2, 4]]
    assert rrf([dense, bm25], 60, 6).tolist() == [[3, 1, 2, 4, -1, -1]]
    assert rrf([np.array([[-1]]), np.array([[-1]])], 60, 2).tolist() == [[-1, -1]]
