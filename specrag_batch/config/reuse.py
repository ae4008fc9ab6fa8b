"""The ``reuse`` section: which earlier outputs a run copies rows from instead of computing
them again (:mod:`specrag_batch.run.reuse`). It changes no row's answer (a reused row equals the
recomputed one), so it is left out of the config hash
(:data:`~specrag_batch.config.hashing.UNHASHED_SECTIONS`): turning reuse on or off keeps a
night's resume and its drift baseline."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from .base import Section


class ReuseConfig(Section):
    """Reuse of rows answered by earlier runs under the same row key
    (:func:`specrag_batch.run.reuse.key.row_key`)."""

    hashed: ClassVar[bool] = False  # a reused row equals the recomputed one

    nights: int = Field(7, ge=0, description="nightly and backfill: reuse rows answered by the last K "
                        "nights (by date, before this one) of the same output root; 0 turns reuse off")
    sources: list[str] = Field(default_factory=list, description="output prefixes (URIs) of earlier runs "
                               "to reuse rows from, newest first (`run --reuse-from`; the nightly and "
                               "backfill flows fill it with the last `nights` nights)")
