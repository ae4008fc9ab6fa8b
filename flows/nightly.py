"""Nightly job over one dated input partition (``prefect.yaml`` entrypoint
``flows/nightly.py:nightly_flow``); the flow lives in :mod:`specrag_batch.run.scheduled.nightly`."""

from __future__ import annotations

from specrag_batch.run.scheduled.nightly import (
    MissingPartitionError,
    nightly_flow,
    run_partition,
)

__all__ = ["MissingPartitionError", "nightly_flow", "run_partition"]
