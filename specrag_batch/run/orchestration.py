"""Prefect flow: one task run per input shard; storage I/O tasks retry on transient errors.

Stages run fused (one ``process-shard`` task per shard) or disaggregated (``draft-shard`` tasks
write intermediate draft Parquet, ``verify-shard`` tasks read it), on threads or a Ray cluster
(:mod:`specrag_batch.config.execution`). Run by ``specrag-batch run``, :func:`run_batch` or ``python -m
flows.speculative_rag INPUT OUTPUT [CONFIG.yaml]``; tasks receive a :class:`~specrag_batch.run.shard_job.ShardJob`
(URIs, the config as JSON). Scheduled flows call :func:`run_flow` as a subflow.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from prefect import flow, get_run_logger, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed
from prefect.utilities import engine as prefect_engine

from . import resume
from ..core import storage
from ..config import RunConfig
from ..config.loading import flow_config
from ..engines.usage import EngineUsage, merge_dtypes
from ..engines.engine import check_cpu_env, loaded_engines, usage_now, used_dtypes
from ..engines.lazy import LazyEngine, loaded_since, usage_by_role
from ..config.execution import ExecutionConfig, StoppableThreadPoolTaskRunner
from ..index.search import check_index
from ..engines.models import check_config_models
from ..core.redaction import install_log_filter
from .reuse import config_for_shards
from .manifest import build_manifest, computed_part, count_failed_rows, new_run_id, write_manifest
from .planning import (check_foreign_outputs, check_layout, exception_reason, plan_run, plan_shards,
                       require_shards)
from .shard_job import ShardJob, ShardResult, draft_shard, process_shard, verify_shard
from .storage_tasks import PrefectIO, list_shards
from ..core.stopping import hook_prefect_sigterm, tie_ephemeral_server

hook_prefect_sigterm(prefect_engine)  # a stop's watchdog starts when SIGTERM reaches Prefect's handler
tie_ephemeral_server()  # the CLI: Prefect's API server dies with the run, even by SIGKILL
install_log_filter()  # run logs (console and Prefect API) never carry a URL password or token
IO = PrefectIO()


def _already_done(job: ShardJob, prefix: str, file: str) -> dict | None:
    """``file``'s recorded result when it is marked done under ``prefix`` for this config and
    input version (resume), else None; marked ``resumed`` (this invocation did not compute it),
    with the seconds and engine usage its done marker records (the output's cost,
    :func:`run.output_cost`). Never for a shard the plan recomputes (``job.recompute``), nor
    for a draft shard made with other duplicate ids than the plan's (``job.claims_digest``)."""
    if job.recompute and prefix == job.output_prefix:
        return None
    done = resume.completed_shard(prefix, file, job.config.config_hash(), job.fingerprint,
                                  job.claims_digest if prefix == job.drafts_prefix else None)
    if done is None:
        return None
    get_run_logger().info("%s: %s already written by run %s, skipped", job.shard_file, file, done.get("run_id", "?"))
    return {**done["result"], "resumed": True}


def _finish(res: ShardResult, job: ShardJob, prefix: str, before: EngineUsage, used: list,
            drafting: dict | None = None) -> dict:
    """Mark a successful shard (or draft shard) done under ``prefix``, log, and report with
    this task's engine usage and the dtypes of the engines ``used`` that it called
    (:func:`engines.used_dtypes`), plus ``drafting`` (disaggregated: the drafting task's
    result, its ``engines`` and ``engine_dtypes``), so that the done marker holds the shard's
    whole engine usage (the output's cost survives resumes) and the numerics it ran in."""
    log = get_run_logger()
    own = usage_now().since(before)
    drafting = drafting or {}
    res.engines = EngineUsage.total([own, drafting.get("engines") or {}]).as_dict()
    res.engines_by_role = EngineUsage.total([usage_by_role(used), drafting.get("engines_by_role") or {}]).as_dict()
    res.engine_dtypes = merge_dtypes([drafting.get("engine_dtypes"), used_dtypes(used, own.by_engine)])
    res.worker = f"{socket.gethostname()}:{os.getpid()}"
    if res.status == "ok":
        IO.mark_done(prefix, res.output, job.config.config_hash(), job.fingerprint, job.run_id, res.as_dict())
        log.info("%s: %d rows -> %s (%d row errors, %.1fs)", job.shard_file, res.rows_out, res.output,
                 res.errors, res.seconds)
    else:
        log.error("%s: shard failed: %s", job.shard_file, res.error)
    return res.as_dict()


@task(name="process-shard", cache_policy=NO_CACHE)
def process_shard_task(job: ShardJob) -> dict:
    """Stages 1-5 over one shard; returns the shard's counters (see ``shard.ShardResult``).

    A shard whose done marker matches this config and input version is not recomputed. The
    engines are this process's (a Ray worker keeps its own between tasks)."""
    done = _already_done(job, job.output_prefix, job.output_file)
    if done is not None:
        return done
    cfg, before = job.config, usage_now()
    verifier = LazyEngine(cfg.verifier, cfg.seed) if cfg.uses_verifier else None
    drafter = LazyEngine(cfg.drafter, cfg.seed) if cfg.uses_speculative else None
    res = process_shard(job, IO, verifier=verifier, drafter=drafter)
    out = _finish(res, job, job.output_prefix, before, [verifier, drafter])
    if res.status == "ok":  # drafts an earlier disaggregated attempt left for this shard
        resume.discard(job.drafts_prefix, job.draft_file)
    return out


@task(name="draft-shard", cache_policy=NO_CACHE)
def draft_shard_task(job: ShardJob) -> dict:
    """Disaggregated stages, drafter pool: stages 1-3 of one shard -> intermediate draft Parquet
    under ``<output>/_drafts/`` and its done marker. Skipped when the shard's final output or
    its drafts are already done for this config and input version."""
    done = _already_done(job, job.output_prefix, job.output_file)
    if done is not None:
        return {**done, "final": True}
    drafted = _already_done(job, job.drafts_prefix, job.draft_file)
    if drafted is not None:
        return drafted
    cfg, before = job.config, usage_now()
    drafter = LazyEngine(cfg.drafter, cfg.seed)
    res = draft_shard(job, IO, drafter=drafter)
    return _finish(res, job, job.drafts_prefix, before, [drafter])


@task(name="verify-shard", cache_policy=NO_CACHE)
def verify_shard_task(drafted: dict, job: ShardJob, keep_drafts: bool = False) -> dict:
    """Disaggregated stages, verifier pool: stages 4-5 of one shard from its draft Parquet ->
    the shard's output and done marker. Reports the drafting task's stage times and engine
    usage too (drafts an earlier run finished: also as ``reused``, not computed by this run,
    :func:`run.computed_part`). Once the output is marked done the draft shard is removed (its
    drafts are in the output's ``drafts`` column) unless ``keep_drafts``."""
    if drafted.get("final") or drafted["status"] != "ok":
        return {k: v for k, v in drafted.items() if k != "final"}
    cfg, before = job.config, usage_now()
    wider = cfg.selection.fallback == "wider"  # the wider fallback drafts again on this worker
    verifier = LazyEngine(cfg.verifier, cfg.seed) if cfg.uses_verifier else None
    drafter = LazyEngine(cfg.drafter, cfg.seed) if wider else None
    res = verify_shard(job, IO, verifier=verifier, drafted=drafted, drafter=drafter)
    if res.status != "ok":  # unreadable or mismatched draft shard: drop it, a re-run redrafts
        resume.discard(job.drafts_prefix, drafted["output"])
        res.input, res.error = job.shard_file, f"{res.error}; draft shard discarded, a re-run drafts it again"
    res.seconds += drafted["seconds"]
    res.draft_worker = drafted.get("worker")
    if drafted.get("resumed"):  # drafted by an earlier run: in the shard's cost, not this run's
        res.reused = {"stage_seconds": dict(drafted["stage_seconds"]), "seconds": drafted["seconds"],
                      "engines": drafted.get("engines") or {}}
    for k, v in drafted["stage_seconds"].items():
        res.stage_seconds[k] = round(res.stage_seconds.get(k, 0.0) + v, 3)
    for k, v in (drafted.get("mode_seconds") or {}).items():
        res.mode_seconds[k] = round(res.mode_seconds.get(k, 0.0) + v, 3)
    out = _finish(res, job, job.output_prefix, before, [verifier, drafter], drafting=drafted)
    if res.status == "ok" and not keep_drafts:
        resume.discard(job.drafts_prefix, drafted["output"])
    return out


def _report_run(output_uri: str, manifest: dict) -> dict:
    """:func:`specrag_batch.run.report.report_run`, imported when the run ends: the report's
    plotting stack (matplotlib) is not loaded while shards run."""
    from .report import report_run

    return report_run(output_uri, manifest)


def _engine_failure(results: list[ShardResult]) -> BaseException | None:
    """The error of an engine that failed to start during this run (:class:`LazyEngine`), when
    no shard finished: the run computed nothing and the error is the run's, not a shard's."""
    errors = list(LazyEngine.failures().values())
    return errors[0] if errors and not any(r.status == "ok" for r in results) else None


def _run_shards(jobs: list[ShardJob], ex: ExecutionConfig) -> list[ShardResult]:
    """Submit the shard tasks (fused or disaggregated) and collect one result per shard; an
    unexpected failure fails its shard only."""
    drafted = [None] * len(jobs)
    if ex.stages == "fused":
        with ex.remote(ex.shard_resources):
            futures = process_shard_task.map(jobs)
    else:
        with ex.remote(ex.drafter_resources):
            drafted = draft_shard_task.map(jobs)
        with ex.remote(ex.verifier_resources):
            futures = verify_shard_task.map(drafted, jobs, unmapped(ex.keep_drafts))
    results = []
    for job, fut, dfut in zip(jobs, futures, drafted):
        try:
            results.append(ShardResult.from_dict(fut.result()))
        except Exception as e:  # noqa: BLE001 - an unexpected failure fails its shard only
            err, stage = e, ""
            if dfut is not None:  # verification never ran when its drafting task failed
                try:
                    dfut.result()
                except Exception as de:  # noqa: BLE001
                    err, stage = de, "drafting: "
            get_run_logger().error("%s: shard failed: %s%s", job.shard_file, stage, exception_reason(err))
            results.append(ShardResult(job.shard_file, None, "failed",
                                       error=f"{type(err).__name__}: {job.shard_file}: {stage}{exception_reason(err)}"))
    return results


def _plan(input_uri: str, output_uri: str, cfg: RunConfig, run_id: str, shards: list[str],
          ids: dict, fingerprints: list[dict]) -> tuple[list[ShardJob], dict[str, ShardResult], int]:
    """(jobs to submit, shards failed while planning with their result, shards to compute):
    which shard answers each query id (:func:`run.plan_run`), after the output is claimed."""
    fps = dict(zip(shards, fingerprints))
    jobs, failed, pending = [], {}, 0
    for p in plan_run(input_uri, output_uri, cfg.config_hash(), shards, ids, fingerprints):
        if p.error is not None:
            failed[p.shard] = ShardResult(p.shard, None, "failed", error=p.error)
            get_run_logger().error("%s: shard failed before the engines load: %s", p.shard, p.error)
            continue
        jobs.append(ShardJob(input_uri, output_uri, p.shard, cfg.model_dump_json(), run_id,
                             fps[p.shard], p.seen_before, p.recompute))
        pending += not p.done
        if p.recompute:
            get_run_logger().info("%s: done, but recomputed: ids it left to other shards are no "
                                  "longer answered there, or another finished shard answers its "
                                  "ids", p.shard)
    return jobs, failed, pending


@flow(name="specrag-batch", task_runner=StoppableThreadPoolTaskRunner(max_workers=1), log_prints=True)
def speculative_rag_flow(input_uri: str, output_uri: str, config: dict | None = None,
                         run_id: str | None = None, overwrite: bool = False,
                         execution: ExecutionConfig | None = None, allow_empty: bool = False) -> dict:
    """Speculative RAG (or Standard RAG, ``config.mode``) over every shard under ``input_uri``.

    Resumable: re-running with the same input, output and config skips finished shards (and,
    in disaggregated runs, finished draft shards). ``overwrite`` replaces results of a
    different config in ``output_uri`` (else the run refuses with
    :class:`resume.RunConflictError`). ``execution`` picks fused or disaggregated stages and the
    Ray options per task; the task runner itself is chosen by :func:`run_flow`.

    Every shard's footer and ``query_id`` column are read first: a shard whose columns or types
    are wrong, or that is not Parquet, fails then, before the engines load; the query ids decide
    which shard answers each id (:func:`run.plan_ids`). An input without shards raises
    :class:`run.NoShardsError` unless ``allow_empty``. The config's model names are checked
    before the output is claimed (:func:`models.check_config_models`). The engines start in the
    shard tasks, once a shard has a valid row (:class:`~specrag_batch.engines.lazy.LazyEngine`): a run whose every
    row is invalid starts none. When the engines fail to start (the error is raised once the
    shards are through), a signal stops the run, or when every shard failed (a schema error in each,
    say), the ``_run.json`` this run wrote is removed again while no shard is done
    (:func:`resume.release_output`), so a corrected command is not refused as another config.

    Returns the run manifest, also written to ``<output_uri>/_manifest.json``. When a shard
    failed, the flow run ends ``Failed`` (Prefect's convention for a run whose work failed, as
    the nightly and claims flows), after the manifest is written and with the other shards'
    outputs kept; a direct call then raises :class:`ShardsFailedError` holding the manifest
    (:func:`flow_manifest` reads it from the state of ``return_state=True``; :func:`run_flow`
    returns it either way)."""
    t0 = time.perf_counter()
    cfg = RunConfig.model_validate(config or {})
    ex = ExecutionConfig.coerce(execution)
    ex.check_mode(cfg)
    input_uri, output_uri = storage.normalize_uri(input_uri), storage.normalize_uri(output_uri)
    run_id = run_id or new_run_id()
    log = get_run_logger()
    shards, skipped, ids, fingerprints = list_shards(input_uri, cfg.task)
    require_shards(input_uri, shards, skipped, allow_empty)
    check_layout(input_uri, output_uri, shards)
    check_foreign_outputs(input_uri, output_uri, shards)
    check_config_models(cfg)  # before anything is written or loaded: a bad name writes nothing
    check_index(cfg.retrieval, load=not ex.distributed)  # a bad index: one error, before the engines
    key = resume.claim_output(output_uri, input_uri, cfg.config_hash(), cfg.model_dump(mode="json"),
                              run_id, overwrite)
    resume.remove_stale_temporaries(output_uri)
    for s in skipped:
        log.warning("skipping %s: %s", s["input"], s["reason"])
    shard_cfg = config_for_shards(cfg, output_uri, ex.stages, log)  # reuse: trusted earlier outputs only
    jobs, failed, pending = _plan(input_uri, output_uri, shard_cfg, run_id, shards, ids, fingerprints)
    log.info("run %s: %d shards (%d to compute, %d failed before the engines load), mode=%s, "
             "stages=%s, task runner=%s, config %s", run_id, len(shards), pending, len(failed),
             cfg.mode, ex.stages, ex.task_runner, cfg.config_hash())
    for idle in cfg.idle_settings():
        log.warning("config: %s", idle)
    before, engines_before = usage_now(), loaded_engines()
    LazyEngine.forget_failures()  # a start that failed in an earlier run of this process may work now
    try:
        ran = iter(_run_shards(jobs, ex) if jobs else [])
        results = [failed[s] if s in failed else next(ran) for s in shards]
    except BaseException:  # a stop signal while the engines start or shards run
        if key.get("run_id") == run_id:
            resume.release_output(output_uri, run_id)  # removed only while no shard is done
        raise
    engine_error = _engine_failure(results)
    if engine_error is not None:  # the engines could not start: nothing was computed
        if key.get("run_id") == run_id:
            resume.release_output(output_uri, run_id)
        raise engine_error
    engine_load = 0.0 if ex.distributed else loaded_since(engines_before)  # engines start in the shards
    count_failed_rows(shards, results, ids)
    usage = (EngineUsage.total([computed_part(r.as_dict())[1] for r in results]) if ex.distributed
             else usage_now().since(before))  # this invocation's, not the resumed shards
    manifest = build_manifest(cfg, run_id, input_uri, output_uri, results, skipped,
                              seconds=time.perf_counter() - t0, engines=usage,
                              engine_load_seconds=engine_load, execution=ex.model_dump(mode="json"),
                              report=lambda m: _report_run(output_uri, m))
    write_manifest(output_uri, manifest)
    if manifest["failed_shards"] and key.get("run_id") == run_id:
        resume.release_output(output_uri, run_id)  # every shard failed: no key refuses a corrected run
    if manifest["failed_shards"]:  # the run's work failed: the flow run is Failed, not Completed
        why = f"{manifest['failed_shards']} of {len(shards)} shard(s) failed; see {manifest['manifest_uri']}"
        return Failed(message=why, data=ShardsFailedError(why, manifest))
    return manifest  # returned (and stored as the flow's result) as written


class ShardsFailedError(RuntimeError):
    """A run finished with failed shards: the result of its ``Failed`` flow run. ``manifest``:
    the run manifest, already written (the other shards' outputs are kept). Raised by a direct
    call of :func:`speculative_rag_flow`; :func:`run_flow` returns the manifest instead."""

    def __init__(self, message: str, manifest: dict):
        super().__init__(message, manifest)  # both in args: the error pickles whole
        self.manifest = manifest

    def __str__(self) -> str:
        return self.args[0]


def flow_manifest(state) -> dict:
    """The manifest of a finished :func:`speculative_rag_flow` run from its Prefect state
    (``return_state=True``): the result when it Completed, the :class:`ShardsFailedError`'s
    manifest when it ended Failed because a shard failed.

    Raises:
        the exception that stopped the flow (a run conflict, a model that cannot be used, ...)."""
    result = state.result(raise_on_failure=False)
    if isinstance(result, ShardsFailedError):
        return result.manifest
    if isinstance(result, BaseException):
        raise result
    return result


def run_flow(input_uri: str, output_uri: str, config: dict | None = None, run_id: str | None = None,
             overwrite: bool = False, execution: ExecutionConfig | dict | None = None,
             allow_empty: bool = False) -> dict:
    """Run :func:`speculative_rag_flow` on the task runner ``execution`` names (threads here,
    or a Ray cluster). Called inside another flow, it runs as a subflow. Returns the manifest,
    also when a shard failed (the flow run is then Failed); an error that stopped the flow
    (a run conflict, a model that cannot be used, ...) is raised."""
    ex = ExecutionConfig.coerce(execution)
    runner = ex.task_runner_instance()
    return flow_manifest(speculative_rag_flow.with_options(task_runner=runner)(
        input_uri, output_uri, config, run_id, overwrite, ex, allow_empty, return_state=True))


def run_batch(input_uri: str, output_uri: str, *, config: RunConfig | dict | str | Path | None = None,
              execution: ExecutionConfig | dict | None = None, run_id: str | None = None,
              overwrite: bool = False, allow_empty: bool = False) -> dict:
    """Python API: run the pipeline over ``input_uri`` (a Parquet file or a prefix of shards)
    into the prefix ``output_uri``; returns the run manifest (dict, as in ``_manifest.json``).

    ``config`` is a :class:`RunConfig`, a dict, a YAML path, or None (defaults). Re-running
    the same call resumes (finished shards are skipped). ``execution`` is an
    :class:`ExecutionConfig` or dict (task runner: threads or Ray; fused or disaggregated
    stages); it never changes results. ``run_id`` defaults to time + random. ``allow_empty``:
    an input without any ``.parquet`` shard is a finished run of 0 shards, not an error.

    Raises:
        pydantic.ValidationError: the config is invalid (a field unknown or out of range);
            a YAML path: also :func:`config.load_config`'s errors (missing file, bad YAML).
        resume.RunConflictError: ``output_uri`` holds results of another input/config and
            ``overwrite`` is false, or is a file; or a run of another input/config claimed it
            at the same moment (:func:`resume.claim_output`, whatever ``overwrite``).
        models.ModelNameError: a model of the config is not a packaged name, an existing
            local directory or a hub id reachable from here (checked first: nothing written).
        FileNotFoundError: ``input_uri`` does not exist.
        ValueError: ``VLLM_CPU_KVCACHE_SPACE`` is not a whole number (:func:`engines.check_cpu_env`).
        run.NoShardsError: ``input_uri`` holds no ``.parquet`` shard and not ``allow_empty``.
        run.InputLayoutError: output inside input, two shards sharing an output name, or an
            output prefix without a run key already holding a shard's output file
            (:func:`run.check_foreign_outputs`) (these, like a missing input, are refused
            before the flow starts: one clear line).
        IndexFormatError: a missing or damaged ``retrieval.index`` (:func:`index.search.check_index`)."""
    config = flow_config(config)
    # refused before the flow starts (the flow checks again, for callers that start it directly)
    cfg = RunConfig.model_validate(config or {})
    check_config_models(cfg)
    check_index(cfg.retrieval, load=not ExecutionConfig.coerce(execution).distributed)
    storage.require_bucket(output_uri, "output")  # S3: "the specified bucket does not exist" named no bucket
    check_cpu_env()
    resume.check_output(storage.normalize_uri(output_uri), storage.normalize_uri(input_uri),
                        cfg.config_hash(), overwrite, cfg.model_dump(mode="json"))
    shards, skipped = plan_shards(storage.normalize_uri(input_uri))
    require_shards(input_uri, shards, skipped, allow_empty)
    check_layout(storage.normalize_uri(input_uri), storage.normalize_uri(output_uri), shards)
    check_foreign_outputs(storage.normalize_uri(input_uri), storage.normalize_uri(output_uri), shards)
    # claimed here (exclusive create; the flow finds its own key): of two runs started into one
    # output at once, the one refused stops with one line, not a failed flow run's traceback
    run_id, out = run_id or new_run_id(), storage.normalize_uri(output_uri)
    key = resume.claim_output(out, storage.normalize_uri(input_uri), cfg.config_hash(),
                              cfg.model_dump(mode="json"), run_id, overwrite)
    try:
        return run_flow(input_uri, output_uri, config, run_id, overwrite, execution, allow_empty)
    except BaseException:  # the flow did not start, or stopped: no key of a run that computed nothing
        if key.get("run_id") == run_id:
            resume.release_output(out, run_id)
        raise
