"""One shard of a run: the :class:`ShardJob` (which files, which config), its storage I/O
(:class:`ShardIO`), and the three ways to run it: fused (:func:`process_shard`, stages 1-5) or
disaggregated (:func:`draft_shard`, stages 1-3 -> intermediate draft Parquet;
:func:`verify_shard`, stages 4-5 -> the shard's output).

Names: a *prefix* is a directory-like URI holding many files (``input_prefix``,
``output_prefix``); a *file* is one object (``shard_file``, ``output_file``, ``draft_file``).
File-level problems (unreadable, wrong schema, a draft shard that does not match its drafting
result) are raised as :class:`ShardFileError`; :func:`_run_guarded` alone turns them into a
``failed`` :class:`ShardResult` naming the file, so the other shards go on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Protocol

import pyarrow as pa

from . import intermediate, resume, reuse
from ..core import storage
from ..config import RunConfig
from ..engines.lazy import load_needed
from ..stages.evaluation import summarize
from .pipeline import RunInfo, StageTimer, draft_stage, process_rows, verify_stage
from .planning import draft_output_uri, file_error, read_validated, shard_output_uri
from ..core.schema import OUTPUT_SCHEMA, InputSchemaError, QueryRow

FILE_ERRORS = (InputSchemaError, OSError, pa.ArrowInvalid, ValueError)
"""Errors that fail one shard (bad or unreadable file), never the run."""


@dataclass(frozen=True)
class ShardJob:
    """One input shard of a run and where its results go.

    ``config_json`` is the run config as JSON (tasks receive it, never frames; see
    :attr:`config`); ``fingerprint`` is the input file's version
    (:func:`resume.input_fingerprint`); ``seen_before`` the shard's query ids that another
    shard answers in this run, each with that shard's URI (their rows get
    ``duplicate_query_id`` naming it, :func:`run.plan_ids`);
    ``recompute``: compute the shard even if its done marker matches (the plan set the marker
    aside)."""

    input_prefix: str
    output_prefix: str
    shard_file: str
    config_json: str
    run_id: str
    fingerprint: dict
    seen_before: Mapping[str, str] = field(default_factory=dict)
    recompute: bool = False

    @property
    def config(self) -> RunConfig:
        """The run config (validated from :attr:`config_json`)."""
        return RunConfig.model_validate_json(self.config_json)

    @property
    def output_file(self) -> str:
        """The shard's output Parquet (:func:`run.shard_output_uri`)."""
        return shard_output_uri(self.input_prefix, self.shard_file, self.output_prefix)

    @property
    def claims_digest(self) -> str:
        """sha256 of :attr:`seen_before` (ids and the shards answering them), sorted: a draft
        shard made with other duplicates than this run's plan is drafted again."""
        return intermediate.ids_digest(f"{i}\0{s}" for i, s in sorted(self.seen_before.items()))

    @property
    def drafts_prefix(self) -> str:
        """``<output_prefix>/_drafts``: intermediate draft shards and their done markers."""
        return storage.join(self.output_prefix, resume.DRAFTS_DIR)

    @property
    def draft_file(self) -> str:
        """The shard's intermediate draft Parquet (disaggregated runs)."""
        return draft_output_uri(self.input_prefix, self.shard_file, self.output_prefix)


class ShardIO(Protocol):
    """Storage I/O of a shard; :class:`StorageIO` does it directly, the orchestration layer
    with Prefect task retries on transient errors."""

    def read_rows(self, shard_file: str, seen_before: Mapping[str, str], task: str | None) -> list[QueryRow]:
        """Validated rows of an input shard (raises one of :data:`FILE_ERRORS`)."""

    def read_drafts(self, draft_file: str) -> pa.Table:
        """An intermediate draft shard (raises one of :data:`FILE_ERRORS`)."""

    def write_table(self, file: str, table: pa.Table) -> None:
        """Write a Parquet file atomically."""

    def mark_done(self, prefix: str, file: str, config_hash: str, fingerprint: dict, run_id: str,
                  result: dict) -> None:
        """Record ``file`` under ``prefix`` as done (:func:`resume.mark_done`)."""


class StorageIO:
    """:class:`ShardIO` straight on :mod:`storage` and :mod:`resume` (no retries here)."""

    def read_rows(self, shard_file: str, seen_before: Mapping[str, str], task: str | None) -> list[QueryRow]:
        """:func:`run.read_validated`."""
        return read_validated(shard_file, seen_before, task)

    def read_drafts(self, draft_file: str) -> pa.Table:
        """:func:`storage.read_parquet`."""
        return storage.read_parquet(draft_file)

    def write_table(self, file: str, table: pa.Table) -> None:
        """:func:`storage.write_parquet_atomic`."""
        storage.write_parquet_atomic(file, table)

    def mark_done(self, prefix: str, file: str, config_hash: str, fingerprint: dict, run_id: str,
                  result: dict) -> None:
        """:func:`resume.mark_done`."""
        resume.mark_done(prefix, file, config_hash, fingerprint, run_id, result)


@dataclass
class ShardResult:
    """What a shard task reports back (small: counters, not rows). ``status``: ``"ok"`` or
    ``"failed"``; ``seconds``: wall-clock seconds of the shard task; ``stage_seconds``:
    seconds per pipeline stage; ``summary``: :func:`evaluation.summarize` of its rows;
    ``engines``: :meth:`engines.EngineUsage.as_dict` (seconds inside vLLM, token counts)."""

    input: str
    output: str | None
    status: str
    rows_in: int | None = 0  # a failed shard: its input's rows, None if unreadable (run.count_failed_rows)
    rows_out: int = 0
    errors: int = 0
    error: str | None = None
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    run_id: str | None = None
    resumed: bool = False
    engines: dict = field(default_factory=dict)  # engine usage by this shard's task(s)
    engines_by_role: dict = field(default_factory=dict)  # the same by role (drafter, verifier)
    # wall seconds per mode of the rows it answered (StageTimer.modes; both sides if disaggregated)
    mode_seconds: dict[str, float] = field(default_factory=dict)
    # {model: dtype} of the engines in ``engines`` ("bfloat16", "float32"; engines.used_dtypes):
    # the numerics the rows were computed in, which differ per host unless the config pins them
    engine_dtypes: dict[str, str] = field(default_factory=dict)
    worker: str | None = None  # host:pid of the process that ran it (verification if split)
    draft_worker: str | None = None  # disaggregated: host:pid of the drafting process
    digest: str | None = None  # draft shards: sha256 of their query ids in order (integrity)
    claims_digest: str | None = None  # draft shards: ShardJob.claims_digest they were made with
    # disaggregated: the part of this result an earlier run computed (the shard's drafts were
    # finished before this run): {"stage_seconds", "engines", "seconds"}; empty otherwise. The
    # result (and its done marker) holds the shard's whole cost; run.computed_part subtracts it.
    reused: dict = field(default_factory=dict)
    rows_reused: int = 0  # rows copied from an earlier output (answer_source "reused", :mod:`reuse`)
    reuse_seconds_saved: float = 0.0  # estimate: the earlier shards' seconds per computed row, summed

    def as_dict(self) -> dict:
        """The fields as a plain dict (a shallow copy): what a shard task returns, a done marker and
        the run manifest hold."""
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: Mapping) -> "ShardResult":
        """The result a shard task returned (:meth:`as_dict`, or a resumed shard's done-marker
        ``result``), keeping only this version's fields. A done marker may hold keys this
        version does not know: one written by a newer version, or one a
        tool outside the product annotated (e.g. with the machine that computed it); such a
        shard is resumed, not failed.
        The marker itself keeps every key.

        Raises:
            TypeError: a required field (``input``, ``output``, ``status``) is missing."""
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


class ShardFileError(Exception):
    """A shard's input or draft file cannot be used (``cause``: one of :data:`FILE_ERRORS`)."""

    def __init__(self, file: str, cause: Exception):
        super().__init__(f"{file}: {cause}")
        self.file, self.cause = file, cause


def _reading(file: str, read, *args):
    """``read(*args)``; a file-level error is raised as :class:`ShardFileError` naming ``file``."""
    try:
        return read(*args)
    except FILE_ERRORS as e:
        raise ShardFileError(file, e) from e


def _run_guarded(file: str, body) -> ShardResult:
    """``body(loading)`` timed; a :class:`ShardFileError` becomes a ``failed`` result naming
    the file (the one place where file-level errors turn into results). Other errors (a write
    that failed after its retries) raise: the flow reports them as the shard's failure.
    ``loading``: a one-item list where the body adds the seconds its engines took to start
    (:func:`~specrag_batch.engines.lazy.load_needed`), left out of the shard's seconds."""
    t0, loading = time.perf_counter(), [0.0]
    try:
        res = body(loading)
    except ShardFileError as e:
        return ShardResult(file, None, "failed", error=file_error(e.file, e.cause),
                           seconds=time.perf_counter() - t0 - loading[0])
    res.seconds = time.perf_counter() - t0 - loading[0]
    return res


def _with_file(records: list[dict], shard_file: str) -> list[dict]:
    """Row errors name their file: ``<file>: row <i> (query_id=...): field '<f>': <reason>``
    (validation errors already do; errors from the stages are prefixed here)."""
    for r in records:
        if r["error"] is not None and r["error"].startswith("row "):
            r["error"] = f"{shard_file}: {r['error']}"
    return records


def _timings(timer: StageTimer) -> dict[str, float]:
    return {k: round(v, 3) for k, v in timer.seconds.items()}


def _of_mode(rows: list[QueryRow], cfg: RunConfig, mode: str) -> list[QueryRow]:
    """The rows ``cfg`` answers by ``mode``: an engine only they use starts only for them."""
    return [r for r in rows if cfg.mode_for(r.task) == mode]


def _load(rows: list[QueryRow], cfg: RunConfig, drafter, verifier) -> float:
    """:func:`load_needed`: the drafter when a Speculative RAG row passed validation, the
    verifier when some row did and (a Standard RAG row or a verifier term) needs it."""
    spec = _of_mode(rows, cfg, "speculative")
    need_verifier = rows if cfg.verifier_reads_documents or cfg.selection.verifier_scores_drafts \
        or cfg.selection.fallback != "none" else _of_mode(rows, cfg, "standard")
    return load_needed(spec, drafter) + load_needed(need_verifier, verifier)


def _write_output(job: ShardJob, io: ShardIO, rows_in: int, records: list[dict],
                  timer: StageTimer, reused: reuse.ReuseOutcome | None = None) -> ShardResult:
    """Write the shard's output, then its key index (:mod:`reuse`; ``reused`` holds the rows'
    keys; None: a disaggregated run, which writes none), both before the done marker."""
    table = pa.Table.from_pylist(_with_file(records, job.shard_file), schema=OUTPUT_SCHEMA)
    io.write_table(job.output_file, table)
    if reused is not None:
        io.write_table(reuse.key_index_uri(job.output_prefix, job.output_file),
                       reuse.key_index_table(reused.keys, records, run_id=job.run_id,
                                             config_hash=job.config.config_hash(),
                                             seconds_per_row=reused.seconds_per_row))
    return ShardResult(job.shard_file, job.output_file, "ok", run_id=job.run_id, rows_in=rows_in,
                       rows_out=table.num_rows, errors=sum(r["error"] is not None for r in records),
                       stage_seconds=_timings(timer), summary=summarize(records),
                       rows_reused=reused.rows_reused if reused else 0,
                       reuse_seconds_saved=reused.seconds_saved if reused else 0.0,
                       mode_seconds={k: round(v, 3) for k, v in timer.modes.items()})


def process_shard(job: ShardJob, io: ShardIO, *, drafter, verifier) -> ShardResult:
    """Fused: stages 1-5 over one shard, output written atomically to ``job.output_file``.

    ``drafter``/``verifier``: :class:`~specrag_batch.engines.Engine` or :class:`~specrag_batch.engines.lazy.LazyEngine` (drafter
    None in standard mode); lazy engines start only when a row passed validation.
    Never raises for a file-level problem (status ``failed``, the cause naming the file)."""
    def body(loading: list[float]) -> ShardResult:
        cfg = job.config
        rows = _reading(job.shard_file, io.read_rows, job.shard_file, job.seen_before, cfg.task)
        timer = StageTimer()

        def compute(todo: list[QueryRow]) -> list[dict]:  # rows no earlier output answered
            loading[0] += _load(todo, cfg, drafter, verifier)
            return process_rows(todo, cfg, drafter=drafter, verifier=verifier,
                                info=RunInfo(job.run_id, job.shard_file), timer=timer)
        reused = reuse.process_with_reuse(rows, cfg, run_id=job.run_id, source_file=job.shard_file,
                                          timer=timer, compute=compute)
        return _write_output(job, io, len(rows), reused.records, timer, reused)
    return _run_guarded(job.shard_file, body)


def draft_shard(job: ShardJob, io: ShardIO, *, drafter) -> ShardResult:
    """Disaggregated, drafter side: stages 1-3 of one shard, written whole to
    ``job.draft_file`` as intermediate draft Parquet (:mod:`intermediate`). Every input row is
    in it (failing rows with their ``error``). File-level problems: status ``failed``."""
    def body(loading: list[float]) -> ShardResult:
        cfg = job.config
        rows = _reading(job.shard_file, io.read_rows, job.shard_file, job.seen_before, cfg.task)
        loading[0] += load_needed(_of_mode(rows, cfg, "speculative"), drafter)
        timer = StageTimer()
        table = intermediate.to_table(rows, draft_stage(rows, cfg, drafter=drafter, timer=timer),
                                      documents=cfg.verifier_reads_documents)
        io.write_table(job.draft_file, table)
        return ShardResult(job.shard_file, job.draft_file, "ok", run_id=job.run_id,
                           rows_in=len(rows), rows_out=table.num_rows,
                           errors=sum(r.error is not None for r in rows),
                           digest=intermediate.ids_digest(r.query_id for r in rows),
                           claims_digest=job.claims_digest,
                           stage_seconds=_timings(timer),
                           mode_seconds={k: round(v, 3) for k, v in timer.modes.items()})
    return _run_guarded(job.shard_file, body)


def verify_shard(job: ShardJob, io: ShardIO, *, verifier, drafted: dict, drafter=None) -> ShardResult:
    """Disaggregated, verifier side: read the draft shard ``drafted["output"]``, run stages
    4-5 (and the fallback pass) in the chunks of a fused run, write ``job.output_file``
    atomically. With ``selection.fallback``, or Standard RAG rows of a per-task mode (answered
    here whole), the input shard is read again for its documents (the draft shard has none);
    ``drafter`` is needed for ``wider``.

    ``drafted`` is the drafting result (row count, ``digest`` of the query ids): a draft shard
    that cannot be read or does not match it returns status ``failed`` with ``output=None``
    naming the draft file (the caller discards it so that a re-run drafts again)."""
    draft_file = drafted["output"]

    def read() -> tuple[list[QueryRow], dict]:
        rows, drafts = intermediate.from_table(io.read_drafts(draft_file), draft_file)
        intermediate.check_matches(rows, drafted, draft_file)
        return rows, drafts

    def read_input() -> list[QueryRow]:  # the fallback answers from the input's documents
        given = io.read_rows(job.shard_file, job.seen_before, job.config.task)
        intermediate.check_matches(given, drafted, job.shard_file)
        return given

    def body(loading: list[float]) -> ShardResult:
        cfg = job.config
        rows, drafts = _reading(draft_file, read)
        if cfg.selection.fallback != "none" or "standard" in cfg.modes:
            for row, source in zip(rows, _reading(job.shard_file, read_input)):
                row.documents = source.documents
        loading[0] += load_needed(rows, verifier, drafter)
        timer = StageTimer()
        records = verify_stage(rows, drafts, cfg, verifier=verifier, drafter=drafter,
                               info=RunInfo(job.run_id, job.shard_file), timer=timer)
        return _write_output(job, io, len(rows), records, timer)
    return _run_guarded(draft_file, body)
