"""Reuse of rows answered on earlier runs (nightly jobs, backfills, ``run --reuse-from``).

=========  ==========================================================================
module     what
=========  ==========================================================================
``key``    a row's key: sha256 over everything that decides its answer (:func:`row_key`)
``index``  the key index beside each output (``<output>/_keys/``): written, read, looked up
``apply``  a shard's rows split into reused and computed; reused output records; sources trusted
=========  ==========================================================================

A row whose key an earlier output answered is copied from it with its scores
(``answer_source: reused``, ``reused_from``), not computed. The rule for which rows are
reusable is :func:`index.reusable`.
"""

from .apply import (REUSED, ReuseOutcome, config_for_shards, process_with_reuse, reuse_summary,
                    trusted_sources)
from .index import KEYS_DIR, key_index_table, key_index_uri, reusable, write_key_index
from .key import SCORING_VERSION, ScoringIdentity, row_key

__all__ = ["KEYS_DIR", "REUSED", "config_for_shards", "reuse_summary", "SCORING_VERSION", "ReuseOutcome", "ScoringIdentity", "key_index_table", "key_index_uri",
           "process_with_reuse", "reusable", "row_key", "trusted_sources", "write_key_index"]
