"""Date partitions of the scheduled flows; lives in :mod:`specrag_batch.run.partitions`."""

from __future__ import annotations

from specrag_batch.run.partitions import (
    PARTITION_KEY,
    check_timezone,
    dates_between,
    parse_date,
    partition_uri,
    require_directory,
    resolve_config,
    scheduled_date,
)

__all__ = ["PARTITION_KEY", "check_timezone", "dates_between", "parse_date", "partition_uri", "require_directory", "resolve_config", "scheduled_date"]
