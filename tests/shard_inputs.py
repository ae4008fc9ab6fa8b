"""Small input shards of Standard RAG rows for planning and resume tests: the config they run
under (:data:`CFG`), a shard of given query ids (:func:`shard`), its Parquet file
(:func:`write`), and one run as the flow plans and runs it, without Prefect (:func:`planned_run`)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from .conftest import small_config

CFG = small_config(mode="standard")
DOC = {"doc_id": "d", "title": "t", "text": "The yen is the currency of Japan."}


def shard(*ids: str, query=None) -> pa.Table:
    n = len(ids)
    return pa.table({"query_id": list(ids), "query": query if query is not None else [f"{i}?" for i in ids],
                     "task": ["qa"] * n, "documents": [[DOC]] * n})


def write(inp, name: str, table: pa.Table) -> None:
    (inp / name).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, inp / name)


def planned_run(inp, out, config, verifier) -> dict[str, tuple[str, str | None]]:
    """One run over ``inp`` into ``out`` as the flow plans and runs it (the product's planning,
    shard job and done markers; no Prefect, drafter None, ``verifier`` an engine or fake):
    {shard name: (status, error)}; ``"done"`` for shards the plan skips."""
    from specrag_batch.run import resume
    from specrag_batch.run.planning import plan_run, require_shards
    from specrag_batch.run.shard_job import ShardJob, StorageIO, process_shard
    from specrag_batch.run.storage_tasks import list_shards

    inp, out = str(inp), str(out)
    shards, skipped, ids, fps = list_shards.fn(inp, config.task)  # the flow's listing task, unwrapped
    require_shards(inp, shards, skipped, False)
    status = {}
    for p, fp in zip(plan_run(inp, out, config.config_hash(), shards, ids, fps), fps):
        name = p.shard.rsplit("/", 1)[-1]
        if p.error is not None:
            status[name] = ("failed at planning", p.error)
            continue
        if p.done:
            status[name] = ("done", None)
            continue
        job = ShardJob(inp, out, p.shard, config.model_dump_json(), "run", fp, p.seen_before, p.recompute)
        res = process_shard(job, StorageIO(), drafter=None, verifier=verifier)
        if res.status == "ok":
            resume.mark_done(out, res.output, config.config_hash(), fp, "run", res.as_dict())
        status[name] = (res.status, res.error)
    return status
