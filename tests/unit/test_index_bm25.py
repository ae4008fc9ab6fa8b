"""The BM25 part of an index (docs/retrieval.md): built in two streaming passes, it scores
exactly as bm25s's own in-memory index of the same passages, its search over the postings a
query touches ranks as bm25s's scores do, a query sharing no term with the corpus finds
nothing, and Chinese, Japanese and Korean words are found inside passages (character bigrams)."""

from __future__ import annotations

import re

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


CJK_PASSAGES = [
    "全球气候变化导致冰川加速融化",    # zh: global climate change makes glaciers melt faster
    "今天北京的天气很好",              # zh: the weather in Beijing is fine today
    "地球温暖化により氷河が溶けている",  # ja: glaciers melt through global warming
    "東京は日本の首都です",            # ja: Tokyo is the capital of Japan
    "서울은 한국의 수도입니다",          # ko: Seoul is the capital of Korea
    "Glacier melt in the Arctic",
]


@pytest.mark.parametrize("query, expected", [("气候", 0), ("冰川", 0), ("天气", 1), ("北京", 1),
                                             ("氷河", 2), ("温暖化", 2), ("首都", 3), ("東京", 3),
                                             ("한국", 4), ("glacier", 5)])
def test_a_cjk_word_inside_a_passage_is_found(tmp_path, query, expected):
    """Trial finding (issue 47 item 5): bm25s's splitter kept a whole run of CJK characters as
    one word, so a query for a two-character word found only a passage that was exactly that
    run. Now CJK runs are split into overlapping character bigrams, queries and passages alike
    (Lucene's CJK analyzer), and the word is found inside the passage."""
    builder = BM25Builder(tmp_path)
    builder.add(CJK_PASSAGES)
    builder.finish(tmp_path / "bm25")
    _, rows = BM25Index(tmp_path / "bm25").search([query], 3)
    assert rows[0][0] == expected, rows


def test_cjk_tokenizer_splits_runs_into_bigrams_and_keeps_other_words_as_bm25s_does():
    from specrag_batch.index.bm25 import split

    assert split("東京都に住む") == ["東京", "京都", "都に", "に住", "住む"]
    assert split("猫 と 犬") == ["猫", "と", "犬"]  # a CJK character standing alone stays a word
    assert split("iphone手机 a 我") == ["iphone", "手机", "我"]  # one Latin letter alone: no word, as bm25s
    assert split("东京・大阪") == ["东京", "大阪"]  # punctuation ends a run
    english = "the ocean's café, co2 rise in 2024 a b"
    assert split(english) == re.findall(r"(?u)\b\w\w+\b", english)  # bm25s's own splitter


def test_an_index_built_with_the_old_tokenizer_is_served_as_built_and_says_to_rebuild(tmp_path, monkeypatch, caplog):
    """``meta.json`` records ``bm25.tokenizer_version``; an index built before (no key: version
    1, a CJK run one word) is searched with the splitter it was built with, so its queries
    still match its passages, and a warning says to rebuild it when it holds CJK words. A
    version newer than this code knows is refused, saying to upgrade or rebuild."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from specrag_batch.config import RunConfig
    from specrag_batch.index import IndexFormatError, build_index, get_retriever, open_index
    from specrag_batch.index import bm25 as bm25_mod
    from specrag_batch.index.search import check_index

    from .index_fakes import patch_embedder

    patch_embedder(monkeypatch)
    pq.write_table(pa.table({"doc_id": [f"c{i}" for i in range(len(CJK_PASSAGES))], "text": CJK_PASSAGES}),
                   tmp_path / "c.parquet")
    meta = build_index(str(tmp_path / "c.parquet"), str(tmp_path / "new"))
    assert meta["bm25"]["tokenizer_version"] == 2 and "bigrams" in meta["bm25"]["tokenizer"]
    open_index.cache_clear()
    assert [d.doc_id for d in get_retriever(str(tmp_path / "new"), "bm25").search(["首都"], 1)[0]] == ["c3"]

    old_tokenizer = bm25_mod.new_tokenizer
    monkeypatch.setattr(bm25_mod, "new_tokenizer", lambda version=1: old_tokenizer(1))
    build_index(str(tmp_path / "c.parquet"), str(tmp_path / "old"))
    monkeypatch.setattr(bm25_mod, "new_tokenizer", old_tokenizer)
    meta_file = tmp_path / "old" / "meta.json"
    meta = json.loads(meta_file.read_text())
    del meta["bm25"]["tokenizer_version"]  # as written before the key existed
    meta_file.write_text(json.dumps(meta))
    open_index.cache_clear()
    with caplog.at_level("WARNING"):
        retriever = get_retriever(str(tmp_path / "old"), "bm25")
        assert [d.doc_id for d in retriever.search(["東京は日本の首都です"], 1)[0]] == ["c3"]  # the whole run
    assert "built before CJK text was split into character bigrams" in caplog.text
    assert retriever.search(["首都"], 1) == [[]]  # what a rebuild fixes

    meta["bm25"]["tokenizer_version"] = 3
    meta_file.write_text(json.dumps(meta))
    open_index.cache_clear()
    retrieval = RunConfig(retrieval={"index": str(tmp_path / "old"), "method": "bm25"}).retrieval
    with pytest.raises(IndexFormatError, match="BM25 tokenizer version 3 is newer than this version reads"):
        check_index(retrieval)
    open_index.cache_clear()
