"""Which earlier nights a night reuses (issue 52): the last ``reuse.nights`` partitions before
its date under the same output root, newest first, after the sources the config names; 0 none."""

from __future__ import annotations

import datetime as dt

from specrag_batch.core import storage
from specrag_batch.run.scheduled.reuse_nights import with_earlier_nights


def test_the_last_k_nights_before_the_date_newest_first(tmp_path):
    for d in ("2026-05-01", "2026-05-02", "2026-05-03", "2026-05-05", "2026-05-06"):
        (tmp_path / f"date={d}").mkdir()
    (tmp_path / "not-a-night").mkdir()
    got = with_earlier_nights({"reuse": {"nights": 2, "sources": ["s3://b/extra"]}}, str(tmp_path), dt.date(2026, 5, 5))
    assert got["reuse"] == {"nights": 2, "sources": ["s3://b/extra", storage.join(str(tmp_path), "date=2026-05-03"),
                                                     storage.join(str(tmp_path), "date=2026-05-02")]}


def test_zero_nights_reuses_nothing_and_a_new_root_has_no_nights(tmp_path):
    cfg = {"reuse": {"nights": 0}}
    assert with_earlier_nights(cfg, str(tmp_path), dt.date(2026, 5, 5)) == cfg
    assert with_earlier_nights(None, str(tmp_path / "none"), dt.date(2026, 5, 5))["reuse"]["sources"] == []
