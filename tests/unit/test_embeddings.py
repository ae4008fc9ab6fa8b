"""``embeddings.embed`` of no text: an empty (0, d) array whose width d comes from the embedder's
current API (``get_embedding_dimension``; sentence-transformers 5.x renamed
``get_sentence_embedding_dimension`` and warns on the old name), still working where only the
old name exists (sentence-transformers < 5, ``pyproject``: >= 3.0), here on a stand-in
embedder. The real packaged MiniLM embedder: tests/integration/test_embeddings.py."""

from __future__ import annotations

from specrag_batch.engines import embeddings


def test_an_embedder_with_only_the_older_name_still_gives_the_width(monkeypatch):
    class OlderSentenceTransformer:  # the API of sentence-transformers 3.x / 4.x
        def get_sentence_embedding_dimension(self) -> int:
            return 7

    monkeypatch.setattr(embeddings, "load_embedder", lambda name: OlderSentenceTransformer())
    assert embeddings.embed("older", []).shape == (0, 7)
