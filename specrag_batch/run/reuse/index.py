"""The key index beside each output: ``<output>/_keys/<output shard name>``, one small Parquet
file per output shard with one row per reusable output row: ``key`` (32 bytes,
:func:`~specrag_batch.run.reuse.key.row_key`), ``row`` (its position in the output shard),
``query_id``. Its schema metadata holds the ``run_id`` and ``config_hash`` that wrote it, the
output shard's row count and the shard's engine seconds per computed row (what a reuse saves).

A lookup reads keys, never outputs: only the rows it matched are then read from their output
shard. A part is trusted only when its output shard's done marker
(:func:`resume.completed_shard`'s marker) names the same run and config hash and the output
shard still has the recorded row count and query ids at the recorded positions: so a part of a
night still running (no marker yet), of a shard recomputed since, or of another config is
never used, and its rows are computed.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import resume
from ...core import storage
from ...core.records import Flag
from ...core.redaction import redact_text

KEYS_DIR = "_keys"
KEY_SCHEMA = pa.schema([("key", pa.binary(32)), ("row", pa.int32()), ("query_id", pa.string())])
"""Columns of a key index part."""

log = logging.getLogger(__name__)
_warned: set[str] = set()


def warn_once(what: str, why: str) -> None:
    """One warning line per ``what`` (a source, a key index part) per process: a damaged part
    read by every shard of a run is named once."""
    if what not in _warned:
        _warned.add(what)
        log.warning("reuse: %s %s; its rows are computed", redact_text(what), why)


def forget_warnings() -> None:
    """Forget what :func:`warn_once` said (a new run in this process names it again)."""
    _warned.clear()


def key_index_uri(output_prefix: str, output_file: str) -> str:
    """``<output_prefix>/_keys/<output file name>``: the key index part of an output shard."""
    return storage.join(output_prefix, KEYS_DIR, output_file.rsplit("/", 1)[-1])


def reusable(record: dict) -> bool:
    """Whether an output record may be reused by a later run. The rule: a row with an
    ``error`` never is (it is computed again: the error may be passing, and an error row costs
    no engine work); a row whose fallback pass failed (flag ``fallback_failed``) never is (it
    kept its first answer for a reason that may pass). A row the fallback pass answered is: the
    fallback is part of the config hash and its decoding is greedy, so it answers the same
    again; the reused row keeps the pass in ``reused_answer_source``."""
    return record.get("error") is None and Flag.FALLBACK_FAILED not in (record.get("flags") or [])


def key_index_table(keys: list[bytes | None], records: list[dict], *, run_id: str, config_hash: str,
                    seconds_per_row: float) -> pa.Table:
    """The key index part of one output shard (:data:`KEY_SCHEMA` and its metadata).
    ``keys[i]``: the key of output row ``i`` (None: no key, e.g. a row that failed before
    retrieval); only rows with a key that are :func:`reusable` are indexed.
    ``seconds_per_row``: the shard's engine seconds per computed row."""
    rows = [{"key": k, "row": i, "query_id": r["query_id"]} for i, (k, r) in enumerate(zip(keys, records))
            if k is not None and reusable(r)]
    return pa.Table.from_pylist(rows, schema=KEY_SCHEMA).replace_schema_metadata({
        "run_id": run_id, "config_hash": config_hash, "output_rows": str(len(records)),
        "seconds_per_row": repr(float(seconds_per_row))})


def write_key_index(output_prefix: str, output_file: str, keys: list[bytes | None], records: list[dict],
                    *, run_id: str, config_hash: str, seconds_per_row: float) -> str:
    """Write :func:`key_index_table` atomically to :func:`key_index_uri` (after the shard,
    before its done marker); returns its URI."""
    uri = key_index_uri(output_prefix, output_file)
    storage.write_parquet_atomic(uri, key_index_table(keys, records, run_id=run_id, config_hash=config_hash,
                                                      seconds_per_row=seconds_per_row))
    return uri


@dataclass(frozen=True)
class Hit:
    """A key found in an earlier output: ``output_file`` and ``row`` (its position there),
    ``query_id`` it had, ``seconds_per_row`` of its shard (estimate of what reusing saves)."""

    output_file: str
    row: int
    query_id: str | None
    seconds_per_row: float
    output_rows: int


def _parts(source: str) -> list[str]:
    try:
        files, _ = storage.parquet_files(storage.join(source, KEYS_DIR))
    except FileNotFoundError:
        return []
    return files


def _trusted_part(source: str, part: str, config_hash: str) -> tuple[pa.Table, dict] | None:
    """(key/row/query_id table, metadata) of a part whose output shard is done by the run that
    wrote the part under ``config_hash``, else None (a warning when it is damaged)."""
    output_file = storage.join(source, part.rsplit("/", 1)[-1])
    try:
        table = pq.read_table(io.BytesIO(storage.read_bytes(part)), columns=list(KEY_SCHEMA.names))
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        table = table.cast(KEY_SCHEMA)
        meta["output_rows"] = int(meta["output_rows"])
        meta["seconds_per_row"] = float(meta["seconds_per_row"])
    except (OSError, pa.ArrowException, KeyError, ValueError) as e:
        warn_once(part, f"is not a key index this pipeline wrote ({type(e).__name__}: {e})")
        return None
    if meta.get("config_hash") != config_hash:
        warn_once(part, f"was written under config {meta.get('config_hash')!r}, not {config_hash!r}")
        return None
    marker = resume.read_marker(resume.marker_uri(source, output_file))
    if (marker is None or marker.get("config_hash") != config_hash
            or marker["result"].get("status") != "ok" or marker.get("run_id") != meta.get("run_id")):
        return None  # not finished (a run still writing it), or recomputed since: not trusted, quietly
    meta["output_file"] = output_file
    return table, meta


def lookup(sources: list[str], keys: set[bytes], config_hash: str) -> dict[bytes, Hit]:
    """The keys of ``keys`` answered in the trusted key index parts of ``sources`` (earlier
    outputs, in order of preference: a key found in two keeps the first source's row). Reads
    the key columns only (``pyarrow.compute.is_in`` against ``keys``). A part that is damaged
    or of another config is skipped with one warning line; never raises for a source."""
    hits: dict[bytes, Hit] = {}
    if not keys:
        return hits
    wanted = pa.array(list(keys), pa.binary(32))
    for source in sources:
        try:
            parts = _parts(source)
        except OSError as e:
            warn_once(source, f"cannot be listed ({type(e).__name__}: {e})")
            continue
        for part in parts:
            got = _trusted_part(source, part, config_hash)
            if got is None:
                continue
            table, meta = got
            found = table.filter(pc.is_in(table["key"], value_set=wanted))
            for k, r, q in zip(*(found[c].to_pylist() for c in KEY_SCHEMA.names)):
                hits.setdefault(k, Hit(meta["output_file"], r, q, meta["seconds_per_row"], meta["output_rows"]))
            if len(hits) == len(keys):
                return hits
    return hits


def fetch_rows(hits: dict[bytes, Hit]) -> dict[bytes, dict]:
    """The output records of ``hits``, read from their output shards (one read per shard). A
    shard that cannot be read, or whose row count or query ids no longer match its key index
    (damaged or replaced), gives no record (one warning line): those rows are computed."""
    by_file: dict[str, list[tuple[bytes, Hit]]] = {}
    for k, h in hits.items():
        by_file.setdefault(h.output_file, []).append((k, h))
    out: dict[bytes, dict] = {}
    for file, items in by_file.items():
        try:
            table = storage.read_parquet(file)
            if table.num_rows != items[0][1].output_rows:
                raise ValueError(f"{table.num_rows} rows, its key index says {items[0][1].output_rows}")
            picked = table.take(pa.array([h.row for _, h in items], pa.int64())).to_pylist()
        except (OSError, pa.ArrowException, ValueError) as e:
            warn_once(file, f"cannot be reused ({type(e).__name__}: {e})")
            continue
        if any(rec.get("query_id") != h.query_id for (_, h), rec in zip(items, picked)):
            warn_once(file, "does not hold the rows its key index names")
            continue
        out.update({k: rec for (k, _), rec in zip(items, picked)})
    return out
