"""Backfill of a date range (``prefect.yaml`` entrypoint ``flows/backfill.py:backfill_flow``);
the flow lives in :mod:`specrag_batch.run.scheduled.backfill`."""

from __future__ import annotations

from specrag_batch.run.scheduled.backfill import (
    backfill_date,
    backfill_flow,
)

__all__ = ["backfill_date", "backfill_flow"]
