"""``config.identity.hashed_view`` on a partial config dump (an older ``_run.json``, a manifest
written by another tool): keys the dump lacks stay absent, whatever their pre-field value."""

from __future__ import annotations

import pytest

from specrag_batch.config.hashing import hashed_view

pytestmark = pytest.mark.unit


def test_a_key_the_dump_lacks_is_left_absent_even_when_its_old_value_is_null():
    # selection.calibration's value before it existed is None, and dict.get of a missing key is
    # None too: the view deleted a key that was not there (KeyError in the run report)
    assert hashed_view({"selection": {"confidence": "calibrated"}}) == {"selection": {"confidence": "calibrated"}}
    assert hashed_view({"drafter": {}}) == {"drafter": {}}
    assert hashed_view({"selection": {"confidence": "score", "calibration": None}}) == {"selection": {}}
