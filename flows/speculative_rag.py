"""Prefect flow: one task run per input shard; storage I/O tasks retry on transient errors.

Stages run fused (one ``process-shard`` task per shard) or disaggregated (``draft-shard`` tasks
write intermediate draft Parquet, ``verify-shard`` tasks read it); tasks run on threads in this
process or on a Ray cluster (``execution``, see :mod:`specrag_batch.execution`). Run through
``specrag-batch run``, :func:`specrag_batch.run_batch`, or::

    python -m flows.speculative_rag INPUT_URI OUTPUT_URI [CONFIG.yaml]

Tasks receive URIs and the config as JSON, never frames. The scheduled flows (nightly,
backfill, claim verification) call :func:`run_flow` as a subflow.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import pyarrow as pa
from prefect import flow, get_run_logger, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from specrag_batch import resume, storage
from specrag_batch.config import RunConfig, load_config
from specrag_batch.engines import get_engine, loaded_engines
from specrag_batch.execution import ExecutionConfig
from specrag_batch.redaction import install_log_filter, redact
from specrag_batch.run import (
    MANIFEST,
    ShardResult,
    build_manifest,
    check_layout,
    draft_output_uri,
    draft_shard,
    duplicate_ids,
    new_run_id,
    plan_shards,
    process_shard,
    read_validated,
    shard_output_uri,
    verify_shard,
    write_manifest,
)
from specrag_batch.schema import InputSchemaError

IO_RETRIES = 3
IO_RETRY_DELAYS = [1, 5, 20]
install_log_filter()  # run logs (console and Prefect API) never carry a URL password or token


def _transient(task, task_run, state) -> bool:
    """Retry storage errors and time-outs; not bad data (schema, corrupt Parquet, missing file)."""
    try:
        state.result()
    except (InputSchemaError, pa.ArrowInvalid, FileNotFoundError, ValueError):
        return False
    except Exception:  # noqa: BLE001 - network/storage errors are worth another try
        return True
    return False


@task(name="list-shards", retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=_transient, cache_policy=NO_CACHE)
def list_shards(input_uri: str):
    shards, skipped = plan_shards(input_uri)
    return shards, skipped, duplicate_ids(shards), [resume.input_fingerprint(s) for s in shards]


@task(name="read-shard", retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=_transient, cache_policy=NO_CACHE)
def read_shard(shard_uri: str, seen_before: set[str], task: str | None = None):
    return read_validated(shard_uri, seen_before, task)


@task(name="read-drafts", retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=_transient, cache_policy=NO_CACHE)
def read_drafts(draft_uri: str) -> pa.Table:
    return storage.read_parquet(draft_uri)


@task(name="write-shard", retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=_transient, cache_policy=NO_CACHE)
def write_shard(uri: str, table: pa.Table) -> None:
    storage.write_parquet_atomic(uri, table)


@task(name="mark-shard-done", retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=_transient, cache_policy=NO_CACHE)
def mark_done_task(output_uri: str, out_uri: str, config_hash: str, fingerprint: dict, run_id: str,
                   result: dict) -> None:
    resume.mark_done(output_uri, out_uri, config_hash, fingerprint, run_id, result)


def _engine_snapshot() -> dict[str, dict]:
    return {e.name: e.stats.as_dict() for e in loaded_engines()}


def _engine_delta(before: dict[str, dict]) -> dict[str, dict]:
    return {name: {k: round(v - before.get(name, {}).get(k, 0), 3) for k, v in now.items()}
            for name, now in _engine_snapshot().items()}


def _already_done(output_uri: str, out_uri: str, cfg: RunConfig, fingerprint: dict, shard_uri: str):
    """The shard's recorded result when its final output is done (resume), else None."""
    done = resume.completed_shard(output_uri, out_uri, cfg.config_hash(), fingerprint)
    if done is None:
        return None
    get_run_logger().info("%s: already done by run %s, skipped", shard_uri, done["run_id"])
    return {**done["result"], "resumed": True, "engines": {}}


def _finish(res: ShardResult, marker_root: str, cfg: RunConfig, fingerprint: dict, run_id: str,
            shard_uri: str, before: dict) -> dict:
    """Mark a successful shard (or draft shard) done, log, and report with engine usage."""
    log = get_run_logger()
    res.engines = _engine_delta(before)
    res.worker = f"{socket.gethostname()}:{os.getpid()}"
    if res.status == "ok":
        mark_done_task(marker_root, res.output, cfg.config_hash(), fingerprint, run_id, res.as_dict())
        log.info("%s: %d rows -> %s (%d row errors, %.1fs)", shard_uri, res.rows_out, res.output,
                 res.errors, res.seconds)
    else:
        log.error("%s: shard failed: %s", shard_uri, res.error)
    return res.as_dict()


@task(name="process-shard", cache_policy=NO_CACHE)
def process_shard_task(shard_uri: str, input_uri: str, output_uri: str, config_json: str,
                       run_id: str, seen_before: set[str], fingerprint: dict) -> dict:
    """Stages 1-5 over one shard; returns the shard's counters (see ``run.ShardResult``).

    A shard whose done marker matches this config and input version is not recomputed. The
    engines are this process's (a Ray worker keeps its own between tasks)."""
    cfg = RunConfig.model_validate_json(config_json)
    out_uri = shard_output_uri(input_uri, shard_uri, output_uri)
    done = _already_done(output_uri, out_uri, cfg, fingerprint, shard_uri)
    if done is not None:
        return done
    before = _engine_snapshot()
    drafter = get_engine(cfg.drafter, cfg.seed) if cfg.mode == "speculative" else None
    verifier = get_engine(cfg.verifier, cfg.seed)
    res = process_shard(shard_uri, output_uri, cfg, run_id, seen_before=seen_before,
                        out_uri=out_uri, drafter=drafter, verifier=verifier,
                        read=lambda u, s, t: read_shard(u, s, t), write=lambda u, t: write_shard(u, t))
    out = _finish(res, output_uri, cfg, fingerprint, run_id, shard_uri, before)
    if res.status == "ok":  # drafts an earlier disaggregated attempt left for this shard
        resume.discard(storage.join(output_uri, resume.DRAFTS_DIR),
                       draft_output_uri(input_uri, shard_uri, output_uri))
    return out


@task(name="draft-shard", cache_policy=NO_CACHE)
def draft_shard_task(shard_uri: str, input_uri: str, output_uri: str, config_json: str,
                     run_id: str, seen_before: set[str], fingerprint: dict) -> dict:
    """Disaggregated stages, drafter pool: stages 1-3 of one shard -> intermediate draft Parquet
    under ``<output>/_drafts/`` and its done marker. Skipped when the shard's final output or
    its drafts are already done for this config and input version."""
    cfg = RunConfig.model_validate_json(config_json)
    out_uri = shard_output_uri(input_uri, shard_uri, output_uri)
    done = _already_done(output_uri, out_uri, cfg, fingerprint, shard_uri)
    if done is not None:
        return {**done, "final": True}
    drafts_root = storage.join(output_uri, resume.DRAFTS_DIR)
    draft_uri = draft_output_uri(input_uri, shard_uri, output_uri)
    drafted = resume.completed_shard(drafts_root, draft_uri, cfg.config_hash(), fingerprint)
    if drafted is not None:
        get_run_logger().info("%s: drafts already written by run %s", shard_uri, drafted["run_id"])
        return {**drafted["result"], "engines": {}}
    before = _engine_snapshot()
    res = draft_shard(shard_uri, cfg, run_id, seen_before=seen_before, draft_uri=draft_uri,
                      drafter=get_engine(cfg.drafter, cfg.seed),
                      read=lambda u, s, t: read_shard(u, s, t), write=lambda u, t: write_shard(u, t))
    return _finish(res, drafts_root, cfg, fingerprint, run_id, shard_uri, before)


@task(name="verify-shard", cache_policy=NO_CACHE)
def verify_shard_task(drafted: dict, shard_uri: str, input_uri: str, output_uri: str,
                      config_json: str, run_id: str, fingerprint: dict, keep_drafts: bool = False) -> dict:
    """Disaggregated stages, verifier pool: stages 4-5 of one shard from its draft Parquet ->
    the shard's output and done marker. Reports the drafting task's stage times too. Once the
    output is marked done the draft shard is removed (its drafts are in the output's
    ``drafts`` column) unless ``keep_drafts``."""
    if drafted.get("final") or drafted["status"] != "ok":
        return {k: v for k, v in drafted.items() if k != "final"}
    cfg = RunConfig.model_validate_json(config_json)
    before = _engine_snapshot()
    drafts_root = storage.join(output_uri, resume.DRAFTS_DIR)
    res = verify_shard(shard_uri, drafted["output"], cfg, run_id,
                       out_uri=shard_output_uri(input_uri, shard_uri, output_uri),
                       verifier=get_engine(cfg.verifier, cfg.seed), expected=drafted,
                       read=lambda u: read_drafts(u), write=lambda u, t: write_shard(u, t))
    if res.status != "ok":  # unreadable or mismatched draft shard: drop it, a re-run redrafts
        resume.discard(drafts_root, drafted["output"])
        res.input, res.error = shard_uri, f"{res.error}; draft shard discarded, a re-run drafts it again"
    res.seconds += drafted["seconds"]
    res.draft_worker = drafted.get("worker")
    for k, v in drafted["stage_seconds"].items():
        res.stage_seconds[k] = round(res.stage_seconds.get(k, 0.0) + v, 3)
    out = _finish(res, output_uri, cfg, fingerprint, run_id, shard_uri, before)
    if res.status == "ok" and not keep_drafts:
        resume.discard(drafts_root, drafted["output"])
    for name, st in drafted.get("engines", {}).items():
        cur = out["engines"].setdefault(name, {})
        for k, v in st.items():
            cur[k] = round(cur.get(k, 0) + v, 3)
    return out


def _sum_engine_stats(results: list[ShardResult]) -> dict[str, dict]:
    total: dict[str, dict] = {}
    for r in results:
        for name, st in (r.engines or {}).items():
            cur = total.setdefault(name, {})
            for k, v in st.items():
                cur[k] = round(cur.get(k, 0) + v, 3)
    return total


def _report(output_uri: str, manifest: dict) -> dict:
    """Write the run report and publish it as artifacts of this flow run; a failure is logged
    and returned (recorded in the manifest), never raised: the run's results are written."""
    from specrag_batch.report import publish_artifacts, write_report

    try:
        s = write_report(output_uri, redact(manifest))
        publish_artifacts(s)
        return {"status": "ok", "uri": s["report_uri"]}
    except FileNotFoundError as e:  # no finished shard: nothing to report on
        get_run_logger().info("run report skipped: %s", e)
        return {"status": "skipped", "error": str(e)}
    except Exception as e:  # noqa: BLE001 - the report is an extra, not the run's result
        get_run_logger().error("run report failed: %s: %s", type(e).__name__, e)
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}


@flow(name="specrag-batch", task_runner=ThreadPoolTaskRunner(max_workers=1), log_prints=True)
def speculative_rag_flow(input_uri: str, output_uri: str, config: dict | None = None,
                         run_id: str | None = None, overwrite: bool = False,
                         execution: ExecutionConfig | None = None) -> dict:
    """Speculative RAG (or Standard RAG, ``config.mode``) over every shard under ``input_uri``.

    Resumable: re-running with the same input, output and config skips finished shards (and,
    in disaggregated runs, finished draft shards). ``overwrite`` replaces results of a
    different config in ``output_uri`` (else the run refuses with
    :class:`resume.RunConflictError`). ``execution`` picks fused or disaggregated stages and the
    Ray options per task; the task runner itself is chosen by :func:`run_flow`.

    Returns the run manifest, also written to ``<output_uri>/_manifest.json``."""
    t0 = time.perf_counter()
    cfg = RunConfig.model_validate(config or {})
    ex = ExecutionConfig.coerce(execution)
    ex.check_mode(cfg.mode)
    input_uri, output_uri = storage.normalize_uri(input_uri), storage.normalize_uri(output_uri)
    run_id = run_id or new_run_id()
    log = get_run_logger()
    shards, skipped, seen, fingerprints = list_shards(input_uri)
    check_layout(input_uri, output_uri, shards)
    resume.claim_output(output_uri, input_uri, cfg.config_hash(), cfg.model_dump(mode="json"),
                        run_id, overwrite)
    resume.remove_stale_temporaries(output_uri)
    for s in skipped:
        log.warning("skipping %s: %s", s["input"], s["reason"])
    pending = [s for s, fp in zip(shards, fingerprints) if resume.completed_shard(
        output_uri, shard_output_uri(input_uri, s, output_uri), cfg.config_hash(), fp) is None]
    log.info("run %s: %d shards (%d to compute), mode=%s, stages=%s, task runner=%s, config %s",
             run_id, len(shards), len(pending), cfg.mode, ex.stages, ex.task_runner, cfg.config_hash())
    before = _engine_snapshot()
    t_eng = time.perf_counter()
    if pending and not ex.distributed:  # load engines once, before fanning out to threads
        if cfg.mode == "speculative":
            get_engine(cfg.drafter, cfg.seed)
        get_engine(cfg.verifier, cfg.seed)
    engine_load = time.perf_counter() - t_eng
    common = (unmapped(input_uri), unmapped(output_uri), unmapped(cfg.model_dump_json()), unmapped(run_id))
    drafted = [None] * len(shards)
    if ex.stages == "fused":
        with ex.remote(ex.shard_resources):
            futures = process_shard_task.map(shards, *common, [seen[s] for s in shards], fingerprints)
    else:
        with ex.remote(ex.drafter_resources):
            drafted = draft_shard_task.map(shards, *common, [seen[s] for s in shards], fingerprints)
        with ex.remote(ex.verifier_resources):
            futures = verify_shard_task.map(drafted, shards, *common, fingerprints,
                                            unmapped(ex.keep_drafts))
    results = []
    for shard, fut, dfut in zip(shards, futures, drafted):
        try:
            results.append(ShardResult(**fut.result()))
        except Exception as e:  # noqa: BLE001 - an unexpected failure fails its shard only
            err, stage = e, ""
            if dfut is not None:  # verification never ran when its drafting task failed
                try:
                    dfut.result()
                except Exception as de:  # noqa: BLE001
                    err, stage = de, "drafting: "
            log.error("%s: shard failed: %s%s", shard, stage, err)
            results.append(ShardResult(shard, None, "failed",
                                       error=f"{type(err).__name__}: {shard}: {stage}{err}"))
    stats = _sum_engine_stats(results) if ex.distributed else _engine_delta(before)
    manifest = build_manifest(cfg, run_id, input_uri, output_uri, results, skipped,
                              time.perf_counter() - t0, stats)
    manifest["engine_load_seconds"] = round(engine_load, 3)
    manifest["execution"] = ex.model_dump(mode="json")
    manifest["manifest_uri"] = storage.join(output_uri, MANIFEST)
    manifest["report"] = _report(output_uri, manifest)
    manifest = redact(manifest)  # returned (and stored as the flow's result) as written
    write_manifest(output_uri, manifest)
    return manifest


def run_flow(input_uri: str, output_uri: str, config: dict | None = None, run_id: str | None = None,
             overwrite: bool = False, execution: ExecutionConfig | dict | None = None) -> dict:
    """Run :func:`speculative_rag_flow` on the task runner ``execution`` names (threads here,
    or a Ray cluster). Called inside another flow, it runs as a subflow. Returns the manifest."""
    ex = ExecutionConfig.coerce(execution)
    runner = ex.task_runner_instance()
    return speculative_rag_flow.with_options(task_runner=runner)(
        input_uri, output_uri, config, run_id, overwrite, ex)


if __name__ == "__main__":  # pragma: no cover
    cfg = load_config(sys.argv[3] if len(sys.argv) > 3 else None)
    run_flow(sys.argv[1], sys.argv[2], cfg.model_dump(mode="json"))
