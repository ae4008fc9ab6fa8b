"""Prefect flow: one task run per input shard; storage I/O tasks retry on transient errors.

Run locally (Prefect's ephemeral API, no server)::

    python -m flows.speculative_rag INPUT_URI OUTPUT_URI [CONFIG.yaml]

or through ``specrag-batch run``. Tasks receive URIs and the config as JSON, never frames.
"""

from __future__ import annotations

import sys
import time

import pyarrow as pa
from prefect import flow, get_run_logger, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from specrag_batch import storage
from specrag_batch import resume
from specrag_batch.config import RunConfig, load_config
from specrag_batch.engines import get_engine, loaded_engines
from specrag_batch.run import (MANIFEST, build_manifest, duplicate_ids, new_run_id, plan_shards,
                               process_shard, read_validated, shard_output_uri, write_manifest)
from specrag_batch.schema import InputSchemaError

IO_RETRIES = 3
IO_RETRY_DELAYS = [1, 5, 20]


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
def read_shard(shard_uri: str, seen_before: set[str]):
    return read_validated(shard_uri, seen_before)


@task(name="write-shard", retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=_transient, cache_policy=NO_CACHE)
def write_shard(uri: str, table: pa.Table) -> None:
    storage.write_parquet_atomic(uri, table)


@task(name="mark-shard-done", retries=IO_RETRIES, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=_transient, cache_policy=NO_CACHE)
def mark_done_task(output_uri: str, out_uri: str, config_hash: str, fingerprint: dict, run_id: str,
                   result: dict) -> None:
    resume.mark_done(output_uri, out_uri, config_hash, fingerprint, run_id, result)


@task(name="process-shard", cache_policy=NO_CACHE)
def process_shard_task(shard_uri: str, input_uri: str, output_uri: str, config_json: str,
                       run_id: str, seen_before: set[str], fingerprint: dict) -> dict:
    """Stages 1-7 over one shard; returns the shard's counters (see ``run.ShardResult``).

    A shard whose done marker matches this config and input version is not recomputed."""
    cfg = RunConfig.model_validate_json(config_json)
    log = get_run_logger()
    out_uri = shard_output_uri(input_uri, shard_uri, output_uri)
    done = resume.completed_shard(output_uri, out_uri, cfg.config_hash(), fingerprint)
    if done is not None:
        log.info("%s: already done by run %s, skipped", shard_uri, done["run_id"])
        return {**done["result"], "resumed": True}
    drafter = get_engine(cfg.drafter, cfg.seed) if cfg.mode == "speculative" else None
    verifier = get_engine(cfg.verifier, cfg.seed)
    res = process_shard(shard_uri, output_uri, cfg, run_id, seen_before=seen_before,
                        out_uri=out_uri, drafter=drafter, verifier=verifier,
                        read=lambda u, s: read_shard(u, s), write=lambda u, t: write_shard(u, t))
    if res.status == "ok":
        mark_done_task(output_uri, out_uri, cfg.config_hash(), fingerprint, run_id, res.as_dict())
    if res.status == "ok":
        log.info("%s: %d rows -> %s (%d row errors, %.1fs)", shard_uri, res.rows_out, res.output,
                 res.errors, res.seconds)
    else:
        log.error("%s: shard failed: %s", shard_uri, res.error)
    return res.as_dict()


@flow(name="specrag-batch", task_runner=ThreadPoolTaskRunner(max_workers=1), log_prints=True)
def speculative_rag_flow(input_uri: str, output_uri: str, config: dict | None = None,
                         run_id: str | None = None, overwrite: bool = False) -> dict:
    """Speculative RAG (or Standard RAG, ``config.mode``) over every shard under ``input_uri``.

    Resumable: re-running with the same input, output and config skips finished shards.
    ``overwrite`` replaces results of a different config in ``output_uri`` (else the run
    refuses with :class:`resume.RunConflictError`).

    Returns the run manifest, also written to ``<output_uri>/_manifest.json``."""
    from specrag_batch.run import ShardResult

    t0 = time.perf_counter()
    cfg = RunConfig.model_validate(config or {})
    run_id = run_id or new_run_id()
    log = get_run_logger()
    shards, skipped, seen, fingerprints = list_shards(input_uri)
    resume.claim_output(output_uri, input_uri, cfg.config_hash(), cfg.model_dump(mode="json"),
                        run_id, overwrite)
    resume.remove_stale_temporaries(output_uri)
    for s in skipped:
        log.warning("skipping %s: %s", s["input"], s["reason"])
    pending = [s for s, fp in zip(shards, fingerprints) if resume.completed_shard(
        output_uri, shard_output_uri(input_uri, s, output_uri), cfg.config_hash(), fp) is None]
    log.info("run %s: %d shards (%d to compute), mode=%s, config %s", run_id, len(shards),
             len(pending), cfg.mode, cfg.config_hash())
    before = {e.name: e.stats.as_dict() for e in loaded_engines()}
    t_eng = time.perf_counter()
    if pending:  # load engines once, before fanning out (each shard task reuses them)
        if cfg.mode == "speculative":
            get_engine(cfg.drafter, cfg.seed)
        get_engine(cfg.verifier, cfg.seed)
    engine_load = time.perf_counter() - t_eng
    futures = process_shard_task.map(shards, unmapped(input_uri), unmapped(output_uri),
                                     unmapped(cfg.model_dump_json()), unmapped(run_id),
                                     [seen[s] for s in shards], fingerprints)
    results = []
    for shard, fut in zip(shards, futures):
        try:
            results.append(ShardResult(**fut.result()))
        except Exception as e:  # noqa: BLE001 - an unexpected failure fails its shard only
            log.error("%s: shard failed: %s", shard, e)
            results.append(ShardResult(shard, None, "failed", error=f"{type(e).__name__}: {shard}: {e}"))
    stats = {e.name: {k: round(v - before.get(e.name, {}).get(k, 0), 3)
                      for k, v in e.stats.as_dict().items()} for e in loaded_engines()}
    manifest = build_manifest(cfg, run_id, input_uri, output_uri, results, skipped,
                              time.perf_counter() - t0, stats)
    manifest["engine_load_seconds"] = round(engine_load, 3)
    manifest["manifest_uri"] = storage.join(output_uri, MANIFEST)
    write_manifest(output_uri, manifest)
    return manifest


if __name__ == "__main__":  # pragma: no cover
    cfg = load_config(sys.argv[3] if len(sys.argv) > 3 else None)
    speculative_rag_flow(sys.argv[1], sys.argv[2], cfg.model_dump(mode="json"))
