"""Nightly job: one dated input partition in, the matching output partition out.

``<input_root>/date=YYYY-MM-DD/*.parquet`` -> ``<output_root>/date=YYYY-MM-DD/`` (one output
Parquet per input shard, done markers, ``_manifest.json``). The date defaults to the run's
scheduled day in the deployment's timezone minus ``lag_days``; a retry or a re-run of the
same date resumes (finished shards are skipped). Deployed by ``prefect.yaml`` on a cron
schedule; run by hand with::

    specrag-batch nightly --input-root s3://bucket/queries --output-root s3://bucket/answers \
        --date 2026-11-28 --config configs/demo.yaml
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.states import Failed

from ...core import storage
from ..orchestration import run_flow
from ...config.execution import ExecutionConfig
from ..planning import plan_shards
from ..drift.watch import DriftError, watch_night
from .reuse_nights import with_earlier_nights
from ..partitions import (
    check_timezone,
    parse_date,
    partition_uri,
    require_directory,
    resolve_config,
    scheduled_date,
)


class MissingPartitionError(FileNotFoundError):
    """A date's input partition does not exist or holds no Parquet shard."""


def check_partition(input_root: str, date) -> str:
    """The input partition URI of ``date`` under ``input_root`` (:func:`partition_uri`),
    checked to exist and hold a Parquet shard (``planning.plan_shards``).

    Raises:
        MissingPartitionError: the partition does not exist or has no ``*.parquet`` shard.
        ValueError: a bad ``date``."""
    src = partition_uri(input_root, parse_date(date, "date"))
    if not storage.exists(src):
        raise MissingPartitionError(f"input partition {src!r} does not exist")
    shards, skipped = plan_shards(src)
    if not shards:
        raise MissingPartitionError(f"input partition {src!r} has no Parquet shards "
                                    f"({len(skipped)} other files)")
    return src


def run_partition(input_root: str, output_root: str, date, config: dict,
                  execution: ExecutionConfig, overwrite: bool = False) -> dict:
    """Run the pipeline over one date partition (a subflow when called inside a flow).

    Returns the partition's manifest plus ``date``. Rows answered on the last
    ``reuse.nights`` nights of ``output_root`` are reused (:func:`with_earlier_nights`).

    Raises:
        MissingPartitionError: the input partition does not exist or has no ``*.parquet``
            shard (upstream did not deliver; an empty run would hide that)."""
    d = parse_date(date, "date")
    src, dst = check_partition(input_root, d), partition_uri(output_root, d)
    config = with_earlier_nights(config, output_root, d)
    manifest = run_flow(src, dst, config, None, overwrite, execution)
    return {**manifest, "date": d.isoformat()}


@flow(name="specrag-nightly", log_prints=True)
def nightly_flow(input_root: str, output_root: str, date: str | None = None, lag_days: int = 1,
                 timezone: str = "UTC", config_path: str | None = None,
                 config: dict[str, Any] | None = None,
                 config_overrides: dict[str, Any] | None = None,
                 execution: ExecutionConfig | None = None, overwrite: bool = False) -> dict:
    """Speculative RAG over the ``date=YYYY-MM-DD`` partition of ``input_root``.

    Args:
        date: partition to process; None = scheduled day in ``timezone`` minus ``lag_days``.
        config_path / config / config_overrides: the run config (see
            :func:`specrag_batch.run.partitions.resolve_config`).
        execution: task runner (threads or Ray) and stage topology.

    Returns the partition's run manifest plus ``drift`` (status, moved measures, ``uri`` of
    ``drift.json``): with ``drift.enabled`` (the default) the night is compared with the nights
    before it (:mod:`specrag_batch.run.drift.watch`). The flow run fails when a shard
    failed (its rows are listed in the manifest), so Prefect retries/alerts apply; a retry
    resumes.

    Raises:
        RuntimeError: a shard failed (the manifest is written first).
        DriftError: a measure of ``drift.fail_on`` moved, or no comparison under
            ``drift.require_baseline`` (``drift.json`` and the report are written first): the
            flow run ends Failed with this message (a returned state, no traceback logged),
            and a direct call raises it. A comparison that fails otherwise never fails the
            run (one line in the report and ``drift.json``).
        MissingPartitionError: see :func:`run_partition`.
        FileNotFoundError: ``input_root`` is not a directory.
        ValueError: a bad ``date`` or ``timezone``, an invalid config, or a topology the
            config's mode cannot run (:meth:`ExecutionConfig.check_mode`)."""
    check_timezone(timezone)
    day = parse_date(date, "date") if date is not None else scheduled_date(timezone, lag_days)
    cfg = resolve_config(config, config_path, config_overrides)
    ex = ExecutionConfig.coerce(execution)
    ex.check_mode(cfg)
    require_directory(input_root, "input_root")
    get_run_logger().info("nightly partition %s (%s)", day, timezone)
    manifest = run_partition(input_root, output_root, day, cfg.model_dump(mode="json"), ex, overwrite)
    if manifest["failed_shards"]:
        raise RuntimeError(f"{manifest['failed_shards']} shard(s) failed in partition {day}; "
                           f"see {manifest['manifest_uri']}")
    if cfg.drift.enabled:
        w = watch_night(output_root, day, cfg.drift, get_run_logger())
        manifest["drift"] = {k: w[k] for k in ("status", "moved", "fails", "baseline", "uri")}
        if w["fail_reason"]:  # a Failed state, not a raise: its message without Prefect's traceback
            why = f"{w['fail_reason']}; see {w['uri'] or 'the log (drift.json not written)'}"
            return Failed(message=why, data=DriftError(why))
    return manifest

