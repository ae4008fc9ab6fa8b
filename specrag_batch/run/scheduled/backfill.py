"""Backfill over a date range: each date an independent, resumable sub-run.

Every date of ``[start_date, end_date]`` runs :func:`specrag_batch.run.scheduled.nightly.run_partition` as its own
subflow (own output partition, run key and manifest), at most ``max_concurrency`` at a time
(a Prefect ``ThreadPoolTaskRunner``, :class:`~specrag_batch.config.execution.StoppableThreadPoolTaskRunner`,
bounds the date tasks). Re-running the same backfill skips
finished dates and shards. A date without an input partition is reported as ``missing``; the
flow run fails at the end if any date failed (or was missing, unless ``allow_missing``), after
all other dates ran.
"""

from __future__ import annotations

import json
from typing import Any

from prefect import flow, get_run_logger, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed

from ...core import storage
from ...config.execution import ExecutionConfig, StoppableThreadPoolTaskRunner, ray_session
from ...core.redaction import redact
from ..drift.watch import DriftError, later_nights, read_profile, watch_night
from .nightly import MissingPartitionError, run_partition
from ..partitions import dates_between, parse_date, partition_uri, require_directory, resolve_config


@task(name="backfill-date", cache_policy=NO_CACHE)
def backfill_date(input_root: str, output_root: str, date: str, config: dict,
                  execution: ExecutionConfig, overwrite: bool) -> dict:
    """One date: its partition's run (a subflow), summarised; never raises for a bad date."""
    try:
        m = run_partition(input_root, output_root, date, config, execution, overwrite)
    except MissingPartitionError as e:
        return {"date": date, "status": "missing", "error": str(e)}
    except Exception as e:  # noqa: BLE001 - one bad date must not stop the others
        get_run_logger().error("date %s failed: %s", date, e)
        return {"date": date, "status": "failed", "error": f"{type(e).__name__}: {e}"}
    return {"date": date, "status": "ok" if not m["failed_shards"] else "failed",
            "rows_in": m["rows_in"], "rows_out": m["rows_out"],
            "failed_shards": m["failed_shards"], "resumed_shards": m["resumed_shards"],
            "manifest": m["manifest_uri"], "run_id": m["run_id"]}


@flow(name="specrag-backfill-dates", log_prints=True)
def _run_dates(input_root: str, output_root: str, dates: list[str], config: dict,
               execution: ExecutionConfig, overwrite: bool) -> list[dict]:
    futures = backfill_date.map(unmapped(input_root), unmapped(output_root), dates,
                                unmapped(config), unmapped(execution), unmapped(overwrite))
    return [f.result() for f in futures]


def _later_nights(output_root: str, compared: dict, redo: bool, log) -> list[dict]:
    """:func:`~specrag_batch.run.drift.watch.later_nights`, logged; a root that cannot be
    listed is one warning (the dates' answers and comparisons are written)."""
    try:
        later = later_nights(output_root, compared, redo, log)
    except Exception as e:  # noqa: BLE001 - the drift step never crashes the run
        log.warning("later nights' drift not checked: %s: %s", type(e).__name__, e)
        return []
    for n in later:
        if n["redone"]:
            log.info("drift of later night %s redone (%s): moved %s%s", n["date"], n["why"],
                     ", ".join(n["moved"]) or "nothing", f"; {n['fail_reason']}" if n["fail_reason"] else "")
        else:
            log.warning("drift of later night %s stale (%s)%s: %s redoes it", n["date"], n["why"],
                        f", not redone: {n['error']}" if n["error"] else "", n["command"])
    return later


@flow(name="specrag-backfill", log_prints=True)
def backfill_flow(input_root: str, output_root: str, start_date: str, end_date: str,
                  max_concurrency: int = 2, config_path: str | None = None,
                  config: dict[str, Any] | None = None,
                  config_overrides: dict[str, Any] | None = None,
                  execution: ExecutionConfig | None = None, overwrite: bool = False,
                  allow_missing: bool = False) -> dict:
    """Run every date partition from ``start_date`` to ``end_date`` (inclusive, YYYY-MM-DD).

    Args:
        max_concurrency: dates in flight at once (>= 1). With the threads task runner the dates
            share this process's engines; with Ray each date's shards spread over the cluster.
        allow_missing: a date without input partition does not fail the run.

    Returns ``{"dates": [per-date summary], "ok": n, "failed": n, "missing": n, ...}``, also
    written to ``<output_root>/_backfills/<start>_<end>.json``. With ``drift.enabled`` (the
    default) every finished date is then compared with the nights before it in date order
    (:mod:`specrag_batch.run.drift.watch`; ``drift`` in its per-date summary), and so is
    every later night outside the range whose stored comparison these dates made stale (its
    baseline now reaches one of them), with the drift section it ran with; ``later_nights``
    lists them (:func:`~specrag_batch.run.drift.watch.later_nights`: date, why, result). With
    ``drift.enabled`` off they are listed as stale, not redone, each with the
    ``specrag-batch drift`` command that redoes it. A later night's ``drift.fail_on`` does not fail
    the backfill (that night's run is over).

    Raises:
        ValueError: bad dates, ``max_concurrency`` < 1, config/topology mismatch (before any
            work).
        FileNotFoundError: ``input_root`` is not an existing directory (before any work).
        RuntimeError: after all dates ran, if any failed (or was missing and not allowed).
        DriftError: after that, a measure of ``drift.fail_on`` moved on a date (or a date had no
            comparison under ``drift.require_baseline``), naming the dates and measures: the
            flow run ends Failed with this message (a returned state, no traceback logged),
            and a direct call raises it."""
    if max_concurrency < 1:
        raise ValueError(f"parameter 'max_concurrency': must be >= 1, got {max_concurrency}")
    dates = [d.isoformat() for d in dates_between(start_date, end_date)]
    cfg = resolve_config(config, config_path, config_overrides)
    ex = ExecutionConfig.coerce(execution)
    ex.check_mode(cfg)
    require_directory(input_root, "input_root")
    log = get_run_logger()
    log.info("backfill %s..%s: %d dates, %d at a time", dates[0], dates[-1], len(dates), max_concurrency)
    with ray_session(ex):
        results = _run_dates.with_options(task_runner=StoppableThreadPoolTaskRunner(max_workers=max_concurrency))(
            input_root, output_root, dates, cfg.model_dump(mode="json"), ex, overwrite)
    drift_failures, compared = [], {}
    for r in results if cfg.drift.enabled else []:  # in date order, whatever order the dates ran in
        if r["status"] == "ok":
            w = watch_night(output_root, r["date"], cfg.drift, log)
            r["drift"] = {k: w[k] for k in ("status", "moved", "fails", "uri")}
            compared[r["date"]] = w["config_hash"]
            drift_failures += [f"{w['fail_reason']}; see {w['uri'] or 'the log'}"] if w["fail_reason"] else []
    if not cfg.drift.enabled:  # later nights' comparisons may still go stale: marked, not redone
        for r in (r for r in results if r["status"] == "ok"):
            profile, _ = read_profile(partition_uri(output_root, parse_date(r["date"], "date")))
            compared[r["date"]] = (profile or {}).get("config_hash")
    later = _later_nights(output_root, compared, cfg.drift.enabled, log)
    summary = {"start_date": dates[0], "end_date": dates[-1], "dates": results, "later_nights": later,
               **{k: sum(r["status"] == k for r in results) for k in ("ok", "failed", "missing")}}
    summary_uri = storage.join(output_root, "_backfills", f"{dates[0]}_{dates[-1]}.json")
    storage.write_bytes_atomic(summary_uri, json.dumps(redact(summary), indent=2).encode())
    summary["summary_uri"] = summary_uri
    bad = [r["date"] for r in results if r["status"] == "failed"
           or (r["status"] == "missing" and not allow_missing)]
    if bad:
        shown = ", ".join(bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
        why = f"backfill: {len(bad)} of {len(dates)} dates not completed ({shown}); per-date status in {summary_uri}"
        return Failed(message=why, data=RuntimeError(why))  # a state: one line, no Prefect traceback
    if drift_failures:  # a Failed state, not a raise: its message without Prefect's traceback
        return Failed(message=" | ".join(drift_failures), data=DriftError(" | ".join(drift_failures)))
    return summary

