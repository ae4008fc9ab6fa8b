"""Planning a run: which shards, where their outputs go, and which shard answers each query id.

A run reads every ``*.parquet`` file under an input URI (each file = one shard) and writes one
output Parquet per shard under the output URI (:func:`shard_output_uri`). Planning reads only
the shards' ``query_id`` columns and footers, so that every id is answered exactly once across
shards, failures and re-runs (:func:`plan_ids`).
"""

from __future__ import annotations

import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from . import intermediate, resume
from ..core import storage
from ..core.records import ErrorReason
from ..core.schema import check_query_ids, check_schema, validate_table


def plan_shards(input_uri: str) -> tuple[list[str], list[dict]]:
    """(Parquet shard URIs, skipped files with reasons) under ``input_uri``: the rules of
    :func:`storage.parquet_files`, which ``index build`` lists its corpus by too.

    Raises:
        FileNotFoundError: nothing exists at ``input_uri`` (:func:`storage.list_files`)."""
    return storage.parquet_files(input_uri)


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


def exception_reason(e: BaseException) -> str:
    """``e``'s message for an error line, never empty: an exception without one (a bare
    ``assert``, such as FAISS's ``assert d == self.d``) gives its type name and where it was
    raised (the innermost frame's file, line and source: ``AssertionError at
    faiss/class_wrappers.py:329: assert d == self.d``)."""
    text = str(e).strip()
    if text:
        return str(e)
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return type(e).__name__
    last = frames[-1]
    where = "/".join(last.filename.replace("\\", "/").split("/")[-2:])
    return f"{type(e).__name__} at {where}:{last.lineno}" + (f": {last.line}" if last.line else "")


def file_error(file: str, cause: Exception) -> str:
    """A failed shard's ``error``: ``<exception type>: <file>: <cause>`` (the file named once;
    the cause as :func:`exception_reason` words it)."""
    reason = exception_reason(cause)
    msg = reason if reason.startswith(file) else f"{file}: {reason}"
    return f"{type(cause).__name__}: {msg}"


PLAN_ERRORS = (ValueError, OSError)
"""File-level errors found while planning (an :class:`InputSchemaError`, Arrow's errors on a
file that is not Parquet): they fail the shard before any engine loads."""


def read_ids(shard_uri: str, task: str | None = None) -> list[str | None]:
    """The ``query_id`` column of a shard as strings (integer ids as their decimal strings, as
    :func:`schema.conform` reads them), after checking the columns and types of its footer
    (:func:`schema.check_schema`, ``task``: the run's fixed task). Reads the footer and that one
    column, not the whole file.

    Raises:
        InputSchemaError: a missing column or a type the input schema does not accept (a
            float ``query_id`` names its first row, :func:`schema.check_query_ids`).
        OSError, pyarrow.ArrowInvalid: the file cannot be read as Parquet (or is a link to
            nothing, a FIFO, socket or device: :func:`storage.check_regular_file`)."""
    storage.check_regular_file(shard_uri)
    fs, path = storage.filesystem(shard_uri)
    with fs.open(path, "rb") as f:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        ids = pf.read(columns=["query_id"]).column("query_id") if names.count("query_id") == 1 else None
        if ids is not None:
            check_query_ids(ids, shard_uri)
        check_schema(pf.schema_arrow, shard_uri, task)
        if pa.types.is_integer(ids.type):
            ids = ids.cast(pa.string())
        return ids.to_pylist()


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
        storage.check_regular_file(shard_uri)
        fs, path = storage.filesystem(shard_uri)
        with fs.open(path, "rb") as f:
            return pq.ParquetFile(f).metadata.num_rows
    except PLAN_ERRORS:
        return None


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
    failures and re-runs (docs/data-contract.md, "Duplicate query ids").

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


