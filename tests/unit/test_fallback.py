"""The fallback pass's config rules (``selection.fallback``): ``wider`` without an index is a
config error, and the new settings keep earlier config hashes. The pass on the fake engine:
tests/integration/test_fallback.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ..pipeline_runs import config


def test_wider_without_an_index_is_a_config_error():
    with pytest.raises(ValidationError, match="selection.fallback 'wider' retrieves more documents"):
        config(**{"selection.fallback": "wider"})
    with pytest.raises(ValidationError, match="fallback_top_n .* must exceed retrieval.top_n"):
        config(**{"selection.fallback": "wider", "retrieval.index": "idx/", "retrieval.fallback_top_n": 10})
    with pytest.raises(ValidationError, match="mode 'standard' takes fallback: none"):
        config(mode="standard", **{"selection.fallback": "standard"})


def test_the_new_settings_keep_earlier_config_hashes():
    assert config(**{"selection.fallback": "none", "sampling.adaptive": False}).config_hash() == \
        config().config_hash()
    assert config(**{"selection.fallback": "standard"}).config_hash() != config().config_hash()
    assert config(**{"sampling.adaptive": True}).config_hash() != config().config_hash()
