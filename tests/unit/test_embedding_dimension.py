"""``embeddings.embed`` of no text: an empty (0, d) array whose width d comes from the embedder's
current API (``get_embedding_dimension``; sentence-transformers 5.x renamed
``get_sentence_embedding_dimension`` and warns on the old name), still working where only the
old name exists (sentence-transformers < 5, ``pyproject``: >= 3.0). The real packaged
MiniLM embedder (no engine)."""

from __future__ import annotations

import warnings

import numpy as np

from specrag_batch import embeddings


def test_embedding_no_text_gives_the_width_without_a_deprecation_warning():
    full = embeddings.embed("all-MiniLM-L6-v2", ["a passage"])  # loads the model (cached)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        empty = embeddings.embed("all-MiniLM-L6-v2", [])
    assert empty.shape == (0, full.shape[1]) == (0, 384) and empty.dtype == np.float32


def test_an_embedder_with_only_the_older_name_still_gives_the_width(monkeypatch):
    class OlderSentenceTransformer:  # the API of sentence-transformers 3.x / 4.x
        def get_sentence_embedding_dimension(self) -> int:
            return 7

    monkeypatch.setattr(embeddings, "load_embedder", lambda name: OlderSentenceTransformer())
    assert embeddings.embed("older", []).shape == (0, 7)
