"""Which earlier nights a night reuses rows from: the last ``reuse.nights`` nights (by date,
before it) of the same output root (:mod:`specrag_batch.run.reuse`)."""

from __future__ import annotations

import datetime as dt
import logging

from ...config import RunConfig
from ..drift.watch import nights
from ..partitions import partition_uri

log = logging.getLogger(__name__)


def with_earlier_nights(config: dict | None, output_root: str, date: dt.date) -> dict:
    """``config`` (a run config dict) with ``reuse.sources``: the partitions of the last
    ``reuse.nights`` nights before ``date`` under ``output_root``, newest first, after any
    sources the config names. ``reuse.nights: 0`` leaves the config as it is. A root that
    cannot be listed is one warning line (nothing reused); never raises for it.

    Raises:
        pydantic.ValidationError: an invalid config."""
    cfg = RunConfig.model_validate(config or {})
    k = cfg.reuse.nights
    if k == 0:
        return dict(config or {})
    try:
        earlier = [n for n in nights(output_root) if n < date][-k:]
    except OSError as e:
        log.warning("reuse: nights of %s cannot be listed (%s); every row is computed", output_root, e)
        earlier = []
    sources = list(cfg.reuse.sources) + [partition_uri(output_root, n) for n in reversed(earlier)]
    out = dict(config or {})
    out["reuse"] = {**(out.get("reuse") or {}), "sources": sources}
    return out
