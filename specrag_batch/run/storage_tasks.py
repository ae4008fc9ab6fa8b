"""Storage I/O as Prefect tasks that retry transient errors (network, throttling, time-outs)
but not bad data, and :class:`PrefectIO`, the :class:`~specrag_batch.run.shard_job.ShardIO` the flow's
shard tasks use. Task names (``read-shard``, ``read-drafts``, ``write-shard``,
``mark-shard-done``, ``list-shards``) appear in the Prefect UI with their run counts."""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa
from prefect import task
from prefect.cache_policies import NO_CACHE

from . import resume
from ..core import stopping, storage
from .planning import plan_shards, read_all_ids, read_validated
from ..core.schema import InputSchemaError, QueryRow

IO_RETRIES = 3
IO_RETRY_DELAYS = [1, 5, 20]  # seconds before the 1st, 2nd, 3rd retry


def _transient(task, task_run, state) -> bool:
    """Retry storage errors and time-outs; not bad data (schema, corrupt Parquet, missing file)."""
    try:
        state.result()
    except (InputSchemaError, pa.ArrowInvalid, FileNotFoundError, ValueError):
        return False
    except Exception:  # noqa: BLE001 - network/storage errors are worth another try
        return True
    return False


def _io_task(name: str):
    return task(name=name, retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAYS,
                retry_condition_fn=_transient, cache_policy=NO_CACHE)


@_io_task("list-shards")
def list_shards(input_uri: str, task: str | None = None):
    """(shard files, skipped files, per shard its query ids or its file-level error
    (:func:`run.read_all_ids`: footer and ``query_id`` column only), input fingerprints)."""
    shards, skipped = plan_shards(input_uri)
    ids = read_all_ids(shards, task)
    return shards, skipped, ids, [_fingerprint(s, ids[s]) for s in shards]


def _fingerprint(shard: str, ids: list | str) -> dict:
    """:func:`resume.input_fingerprint`, or for a shard that failed its footer read (``ids``
    is its error) and has no size to read (a link to nothing), ``{"size": None, "tag": None}``,
    which no done marker matches: the shard fails with its error instead of the whole run."""
    try:
        return resume.input_fingerprint(shard)
    except OSError:
        if isinstance(ids, str):
            return {"size": None, "tag": None}
        raise


@_io_task("read-shard")
def read_shard(shard_uri: str, seen_before: dict[str, str], task: str | None = None) -> list[QueryRow]:
    """Validated rows of an input shard (:func:`run.read_validated`); bad data is not retried."""
    return read_validated(shard_uri, seen_before, task)


@_io_task("read-drafts")
def read_drafts(draft_uri: str) -> pa.Table:
    """An intermediate draft shard (disaggregated runs) as an Arrow table."""
    return storage.read_parquet(draft_uri)


@_io_task("write-shard")
def write_shard(uri: str, table: pa.Table) -> None:
    """Write a shard's Parquet atomically (:func:`storage.write_parquet_atomic`)."""
    storage.write_parquet_atomic(uri, table)


@_io_task("mark-shard-done")
def mark_done_task(output_uri: str, out_uri: str, config_hash: str, fingerprint: dict, run_id: str,
                   result: dict) -> None:
    """Write the shard's done marker (:func:`resume.mark_done`), after its output is complete."""
    resume.mark_done(output_uri, out_uri, config_hash, fingerprint, run_id, result)


class PrefectIO:
    """:class:`~specrag_batch.run.shard_job.ShardIO` whose calls are the retrying tasks above (called
    inside a shard task, each is a task run of its own). Once the process is stopping
    (SIGTERM/SIGINT, :mod:`specrag_batch.core.stopping`) it writes no output and no done marker:
    the shard in flight raises :class:`stopping.RunStopping` and the next run computes it."""

    def read_rows(self, shard_file: str, seen_before: Mapping[str, str], task: str | None) -> list[QueryRow]:
        """:func:`read_shard` as a task run."""
        return read_shard(shard_file, dict(seen_before), task)

    def read_drafts(self, draft_file: str) -> pa.Table:
        """:func:`read_drafts` as a task run."""
        return read_drafts(draft_file)

    def write_table(self, file: str, table: pa.Table) -> None:
        """:func:`write_shard` as a task run.

        Raises:
            stopping.RunStopping: the process is stopping (nothing written)."""
        stopping.check(file)
        write_shard(file, table)

    def mark_done(self, prefix: str, file: str, config_hash: str, fingerprint: dict, run_id: str,
                  result: dict) -> None:
        """:func:`mark_done_task` as a task run.

        Raises:
            stopping.RunStopping: the process is stopping (no marker written)."""
        stopping.check(resume.marker_uri(prefix, file))
        mark_done_task(prefix, file, config_hash, fingerprint, run_id, result)
