"""Small product-run trees for the benchmark tests, written with the product's own writers:
input shards by ``decision.write_shards``, output shards with ``schema.OUTPUT_SCHEMA``, done
markers by ``resume.mark_done`` holding a ``shard.ShardResult`` whose ``engines`` are
``engine_usage.EngineStats`` dicts, at the paths ``planning.plan_shards`` /
``planning.shard_output_uri`` give. No engine runs; the token counts are the test's.
:func:`product_run` runs a real product run instead (the flow's planning and shard path) on a
given engine."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import decision



def input_rows(n: int, prefix: str = "q", docs: int = 10) -> list[dict]:
    """``n`` QA rows in the input schema, ``docs`` documents each."""
    return [{"query_id": f"{prefix}{i}", "query": f"question {i}?", "task": "qa",
             "documents": [{"doc_id": f"{prefix}{i}:{j}", "title": "t", "text": f"passage {j}"} for j in range(docs)],
             "choices": None, "gold": ["a"]} for i in range(n)]


def write_cell(input_dir: Path, output_dir: Path, config, usage: list[dict], *, drafts: int = 0,
               rounds: int | None = None, seconds: float = 10.0, config_hash: str | None = None,
               draft_tokens: list[int] | None = None, fields=None, stage_seconds: dict | None = None,
               dtypes: list[dict | None] | None = None) -> None:
    """Output shards and done markers for every input shard under ``input_dir`` (sorted), as
    a finished product run of ``config`` would leave them. ``usage[i]``: engine usage of shard
    i, model name -> (prompt_tokens, generated_tokens, calls). Each output row has ``drafts``
    drafts of ``draft_tokens[j]`` (default 7) generated tokens and ``draft_rounds`` = ``rounds``. ``config_hash`` overrides
    the marker's hash (a stale marker of another config). ``fields(i, row)``: output fields
    of the i-th row of the cell (over all shards) set over these defaults (scores,
    ``low_confidence``, the fallback columns, ...). ``stage_seconds``: each shard's stage
    seconds (default half drafting, half verification). ``dtypes[i]``: shard i's
    ``engine_dtypes`` (model -> dtype); None (the default) leaves the field out, as markers
    written before it existed."""
    from specrag_batch.run import resume
    from specrag_batch.core import storage
    from specrag_batch.engines.usage import EngineStats
    from specrag_batch.run.planning import plan_shards, shard_output_uri
    from specrag_batch.core.schema import OUTPUT_SCHEMA
    from specrag_batch.run.shard_job import ShardResult

    inp, out = storage.normalize_uri(str(input_dir)), storage.normalize_uri(str(output_dir))
    shards, _ = plan_shards(inp)
    seen = 0
    for i, s in enumerate(sorted(shards)):
        rows = storage.read_parquet(s).to_pylist()
        records = [{"query_id": r["query_id"], "task": r["task"], "query": r["query"], "answer": "a",
                    "gold": r["gold"], "correct": True, "mode": config.mode, "num_documents": len(r["documents"]),
                    "draft_rounds": rounds,
                    "drafts": [{"doc_ids": [], "answer": "a", "rationale": "r", "flags": [],
                                "tokens_draft": (draft_tokens or [7] * drafts)[j]} for j in range(drafts)] or None}
                   for r in rows]
        if fields is not None:
            for j, (rec, r) in enumerate(zip(records, rows)):
                rec.update(fields(seen + j, r))
        seen += len(rows)
        o = shard_output_uri(inp, s, out)
        storage.write_parquet_atomic(o, pa.Table.from_pylist(records, schema=OUTPUT_SCHEMA))
        engines = {m: EngineStats(seconds=seconds / 2, prompt_tokens=p, generated_tokens=g, calls=c).as_dict()
                   for m, (p, g, c) in usage[i].items()}
        res = ShardResult(s, o, "ok", rows_in=len(rows), rows_out=len(rows), seconds=seconds,
                          stage_seconds=stage_seconds or {"drafting": seconds / 2, "verification": seconds / 2},
                          run_id="test-run", engines=engines)
        marker = res.as_dict()
        if dtypes is None or dtypes[i] is None:
            del marker["engine_dtypes"]
        else:
            marker["engine_dtypes"] = dtypes[i]
        resume.mark_done(out, o, config_hash or config.config_hash(), resume.input_fingerprint(s), "test-run",
                         marker)


def write_inputs(directory: Path, rows: list[dict], shard_rows: int) -> None:
    """Input shards as the decision benchmark writes them."""
    decision.write_shards(rows, directory, shard_rows)


def verify_and_select(rows: list, config, verifier) -> tuple[list[int | None], list[dict]]:
    """Run the product's verification and selection stages (``stages.verification``,
    ``stages.selection``) over ``rows`` (``records.QueryRow`` with drafts) under ``config``
    with ``verifier`` (e.g. ``fakes.FakeEngine``). Returns each row's selected draft index
    and the rows as output records read back through ``schema.OUTPUT_SCHEMA`` (what the
    benchmark analyses)."""
    from specrag_batch.core.schema import OUTPUT_SCHEMA
    from specrag_batch.stages.base import RunInfo
    from specrag_batch.run.output import output_row
    from specrag_batch.stages.selection import Selection
    from specrag_batch.stages.verification import Verification

    Verification(config, verifier=verifier)(rows)
    Selection(config)(rows)
    stored = pa.Table.from_pylist([output_row(r, (r.drafts, r.selection), config, RunInfo("t", "f")) for r in rows],
                                  schema=OUTPUT_SCHEMA).to_pylist()
    return [r.selection.index for r in rows], stored


def product_run(inp, out, config, verifier) -> dict[str, tuple[str, str | None]]:
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
