"""``embeddings.embed`` of no text with the real packaged MiniLM embedder (sentence-transformers,
no engine): an empty (0, d) array of the model's width, and no deprecation warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from specrag_batch.engines import embeddings

pytestmark = pytest.mark.integration


def test_embedding_no_text_gives_the_width_without_a_deprecation_warning():
    full = embeddings.embed("all-MiniLM-L6-v2", ["a passage"])  # loads the model (cached)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        empty = embeddings.embed("all-MiniLM-L6-v2", [])
    assert empty.shape == (0, full.shape[1]) == (0, 384) and empty.dtype == np.float32
