"""Prefect deployment entrypoint of the batch flow (``prefect.yaml``:
``flows/speculative_rag.py:speculative_rag_flow``). The flow, its tasks and :func:`run_flow`
live in the library (:mod:`specrag_batch.run.orchestration`); this module re-exports them::

    python -m flows.speculative_rag INPUT_URI OUTPUT_URI [CONFIG.yaml]
"""

from __future__ import annotations

import sys

from specrag_batch.config import load_config
from specrag_batch.run.orchestration import (
    draft_shard_task,
    flow_config,
    process_shard_task,
    run_batch,
    run_flow,
    speculative_rag_flow,
    verify_shard_task,
)
from specrag_batch.run.storage_tasks import (
    IO_RETRIES,
    IO_RETRY_DELAYS,
    list_shards,
    mark_done_task,
    read_drafts,
    read_shard,
    write_shard,
)

__all__ = ["IO_RETRIES", "IO_RETRY_DELAYS", "draft_shard_task", "list_shards", "mark_done_task",
           "process_shard_task", "read_drafts", "read_shard", "run_batch", "run_flow",
           "speculative_rag_flow", "verify_shard_task", "write_shard"]

if __name__ == "__main__":  # pragma: no cover
    cfg = load_config(sys.argv[3] if len(sys.argv) > 3 else None)
    run_flow(sys.argv[1], sys.argv[2], flow_config(cfg))
