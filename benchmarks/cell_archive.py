"""The decision benchmark's cell archive: finished shards kept in git, so that a benchmark
spread over several working sessions (each on a new machine whose ``benchmarks/runs/`` starts
empty) can be completed and analysed as one run.

Layout, one entry per finished output shard of a cell (``decision.Cell``)::

    <archive>/<dataset>/<arm>/<config hash>/<shard stem>.<input hash[:16]>.parquet
    <archive>/<dataset>/<arm>/<config hash>/<shard stem>.<input hash[:16]>.json

An entry is addressed by its content: the run config's hash (``RunConfig.config_hash``, 16
hex) and the input shard's *table content* hash (:func:`table_sha256`, not its bytes or file
version), so an entry is written once and never replaced: a cell re-run with another config or
other input rows gets entries of its own, and nothing already in git changes
(:func:`archive_cell` leaves existing files alone, so ``git status`` shows no diff).

* The ``.parquet`` holds only the output columns the analysis reads (:data:`KEPT_COLUMNS`;
  drafts without ``doc_ids``: :func:`archive_schema`), zstd-compressed: about 13 KB for a
  realistic 10-row shard of 5 drafts a row (:func:`parquet_bytes`).
* The ``.json`` (:func:`archive_cell` writes it after the Parquet; about 1.5-2 KB) holds the
  done marker's ``result`` (seconds, stage seconds, engine usage and dtypes, run id), its ``finished``
  time, the config hash, the input hash, the sha256 of the ``.parquet`` bytes (checked before
  a restore) and the machine the shard ran on (:func:`shard_machine`: CPU model, cpus,
  platform, machine id, boot id, UTC date).

:func:`restore_cell` writes archived shards back into an empty (or partial) runs directory
through the product's own API (``storage.write_parquet_atomic``, ``resume.mark_done`` with the
input shard's current ``resume.input_fingerprint``), so ``resume.completed_shard`` accepts them
and ``run_batch`` skips them. A restored shard's output has every column of
``schema.OUTPUT_SCHEMA``; the columns not archived are null.

**One machine's run.** A shard computed again on another machine (``decision.py --machine``:
a run whose every cell is computed on one machine) gets a second entry beside the first, its
stem suffixed with that machine's id (:func:`machine_stem`); the first entry stays as it was.
:func:`restore_cell` with ``machine`` restores only entries that ran on that machine (the
first entry when it did, else its suffixed one), so the one-machine run can be restored and
analysed on any later machine.

Seconds measured on two machines cannot be divided by each other: each shard carries its
machine (:func:`shard_machine`) and ``decision_stats`` prints no time ratio between cells that
ran on different machines. The result's ``engine_dtypes`` (kept with it) lets
``decision_stats`` say when compared cells ran in different dtypes (``dtypes_differ``).
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import io
import json
import os
import platform
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

KEPT_COLUMNS = (
    "query_id", "task", "query", "answer", "score", "score_draft", "score_self_consistency",
    "score_self_reflection", "low_confidence", "fast_path", "drafts", "flags", "error", "error_reason",
    "gold", "correct", "answer_source", "first_answer", "first_correct", "fallback_error",
    "verifier_drafts_deduplicated", "mode", "draft_rounds",
)
"""Output columns kept in the archive: those ``decision_stats.summarise`` (accuracy, drafts,
oracle, post-hoc re-selection, self-reflection and rule variants, selection diagnosis,
verifier duplicates, fallback), ``decision.calibrate_tuning`` (``calibration.calibrate`` and
``report.rows.with_mean_logprob``: ``mode``, ``fast_path``, ``flags``, the scores) and the
product's resume planning (``run.answered_ids``: ``query_id``, ``error_reason``) read, and
``draft_rounds`` (``benchmarks/cost_model.py``, adaptive drafting's rounds). Left out: the
row's ``rationale`` (its selected draft's), ``num_documents``, the drafts' ``doc_ids``,
``exact_match``, ``f1``, ``first_score`` and the provenance columns (``drafter_model``,
``verifier_model``, ``run_id``, ``source_file``)."""

FORMAT = 1
"""Version of the entry layout, written in every ``.json``."""

COMPRESSION_LEVEL = 19
"""zstd level of the archived Parquet (a 10-row shard compresses in milliseconds at any level)."""

RESTORED_KEY = "machine"
"""Key a restored shard's done-marker ``result`` gets: the archived machine (:func:`this_machine`
dict), so the analysis and a later archive attribute it to the machine that computed it."""


@cache
def archive_schema() -> pa.Schema:
    """:data:`KEPT_COLUMNS` of ``schema.OUTPUT_SCHEMA`` in its types, ``drafts`` without
    ``doc_ids``."""
    from specrag_batch.schema import OUTPUT_SCHEMA

    fields = []
    for name in KEPT_COLUMNS:
        f = OUTPUT_SCHEMA.field(name)
        if name == "drafts":
            struct = f.type.value_type
            f = pa.field(name, pa.list_(pa.struct([s for s in struct if s.name != "doc_ids"])))
        fields.append(f)
    return pa.schema(fields)


def table_sha256(table: pa.Table) -> str:
    """sha256 (64 hex) of a table's content: its column names and types and its rows as
    canonical JSON (keys sorted, UTF-8), so it is the same for the same rows whatever Parquet
    writer, compression or file time made the file. List child names are left out of the
    types (pyarrow calls them ``item`` in memory and ``element`` when read from Parquet).
    Values JSON cannot hold (bytes, dates) are hashed by their ``repr``."""
    import re

    schema = [[f.name, re.sub(r"list<[^:<>]+: ", "list<", str(f.type))] for f in table.schema]
    blob = json.dumps({"schema": schema, "rows": table.to_pylist()}, sort_keys=True, ensure_ascii=False,
                      default=repr, allow_nan=True)
    return hashlib.sha256(blob.encode()).hexdigest()


_INPUT_HASHES: dict[tuple[str, int, str], str] = {}


def input_sha256(uri: str) -> str:
    """:func:`table_sha256` of the input shard at ``uri``, remembered per file version
    (``resume.input_fingerprint``: size and mtime/ETag, the product's own resume key), so the
    archive watcher does not read a cell's finished inputs again every minute.

    Raises:
        OSError, pyarrow.ArrowInvalid: the shard cannot be read as Parquet."""
    from specrag_batch import resume, storage

    fp = resume.input_fingerprint(uri)
    key = (uri, fp["size"], fp["tag"])
    if key not in _INPUT_HASHES:
        _INPUT_HASHES[key] = table_sha256(storage.read_parquet(uri))
    return _INPUT_HASHES[key]


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _cpu_model() -> str | None:
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def boot_time() -> dt.datetime | None:
    """When this machine booted (UTC, ``btime`` of ``/proc/stat``); None where unknown."""
    for line in (_read("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            return dt.datetime.fromtimestamp(int(line.split()[1]), dt.timezone.utc)
    return None


@cache
def this_machine() -> dict:
    """The machine this process runs on: ``{"id", "cpu_model", "cpus", "platform",
    "machine_id", "boot_id"}``. ``cpu_model`` from ``/proc/cpuinfo``, ``cpus`` =
    ``os.cpu_count()``, ``machine_id`` = ``/etc/machine-id``, ``boot_id`` =
    ``/proc/sys/kernel/random/boot_id`` (None where absent). ``id`` (12 hex) hashes
    machine-id and boot id: a session's new machine is a new boot and so a new id even when
    its image (and ``/etc/machine-id``) is the same; a reboot of the same machine also counts
    as another machine (time ratios across it are withheld: the cautious side)."""
    mid, boot = _read("/etc/machine-id"), _read("/proc/sys/kernel/random/boot_id")
    return {"id": hashlib.sha256(f"{mid}/{boot}".encode()).hexdigest()[:12], "cpu_model": _cpu_model(),
            "cpus": os.cpu_count(), "platform": platform.platform(), "machine_id": mid, "boot_id": boot}


UNKNOWN_MACHINE = {"id": None, "note": "finished before this machine booted and not restored from the archive"}
"""The machine of a shard whose marker predates this boot and carries no archived machine."""


def shard_machine(marker: dict) -> dict:
    """The machine a finished shard ran on, from its done marker (``resume.completed_shard``):
    the archived machine of a restored shard (``result["machine"]``, :data:`RESTORED_KEY`);
    else :func:`this_machine` when the marker was written after this machine booted; else
    :data:`UNKNOWN_MACHINE` (``id`` None). Each with ``date``: the UTC date (YYYY-MM-DD) the
    shard finished (the archived one for a restored shard), None when unknown."""
    res = marker.get("result") or {}
    if isinstance(res.get(RESTORED_KEY), dict):
        return dict(res[RESTORED_KEY])
    finished = _parse_time(marker.get("finished"))
    boot = boot_time()
    if finished is not None and boot is not None and finished >= boot:
        return {**this_machine(), "date": finished.date().isoformat()}
    return {**UNKNOWN_MACHINE, "date": finished.date().isoformat() if finished else None}


def _parse_time(value) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def entry_stem(archive: Path, cell, config_hash: str, shard_out: str, input_hash: str) -> Path:
    """``<archive>/<dataset>/<arm>/<config hash>/<shard stem>.<input hash[:16]>`` (add
    ``.parquet`` / ``.json``). ``cell``: a ``decision.Cell`` (``dataset``, ``arm``);
    ``shard_out``: the output shard's URI or name."""
    name = shard_out.rsplit("/", 1)[-1].removesuffix(".parquet")
    return archive / cell.dataset / cell.arm / config_hash / f"{name}.{input_hash[:16]}"


def machine_stem(stem: Path, machine_id: str) -> Path:
    """The stem of the entry another machine's computation of the shard at ``stem`` gets
    (``<stem>.<machine id>``; the first machine's entry keeps ``stem``)."""
    return stem.with_name(f"{stem.name}.{machine_id}")


def _entry_machine(stem: Path) -> str | None:
    """The machine id recorded in the entry at ``stem`` (None when unreadable or unknown)."""
    try:
        return (json.loads(stem.with_name(stem.name + ".json").read_text()).get("machine") or {}).get("id")
    except (OSError, ValueError, AttributeError):
        return None


def archive_machines(archive: Path) -> set[str]:
    """The machine ids recorded by the archive's entries (every ``*.json`` under
    ``archive``; unreadable entries and entries without an id are left out)."""
    return {m for j in archive.rglob("*.json") if (m := _entry_machine(j.with_suffix("")))}


def _shards(cell) -> tuple[str, str, list[tuple[str, str]]]:
    """(input URI, output URI, [(input shard URI, output shard URI)] sorted), by the product's
    rules (``run.plan_shards``, ``run.shard_output_uri``)."""
    from specrag_batch import storage
    from specrag_batch.run import plan_shards, shard_output_uri

    inp, out = storage.normalize_uri(str(cell.input_dir)), storage.normalize_uri(str(cell.output_dir))
    shards, _ = plan_shards(inp)
    return inp, out, [(s, shard_output_uri(inp, s, out)) for s in sorted(shards)]


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def archive_table(output: pa.Table) -> pa.Table:
    """An output shard's table cut to :func:`archive_schema`: kept
    columns only, drafts without ``doc_ids``; a kept column the shard lacks (an output written
    before it existed) comes out null.

    Raises:
        pyarrow.ArrowInvalid, pyarrow.ArrowTypeError: a kept column holds values its output
            type cannot (a shard the product did not write)."""
    keep = [c for c in KEPT_COLUMNS if c in output.column_names]
    rows = output.select(keep).to_pylist()
    for r in rows:
        for d in r.get("drafts") or []:
            if isinstance(d, dict):
                d.pop("doc_ids", None)
    return pa.Table.from_pylist(rows, schema=archive_schema())


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as zstd Parquet bytes (level :data:`COMPRESSION_LEVEL`), trimmed for 10-row
    shards, where the file's metadata outweighs its data: no column statistics and no stored
    Arrow schema (nothing reads them; :func:`restore_cell` reads the rows into
    ``OUTPUT_SCHEMA``), no dictionary pages. A realistic 10-row, 5-draft shard: about 13 KB,
    against about 25 KB for the product's whole output shard (``storage.write_parquet_atomic``)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", compression_level=COMPRESSION_LEVEL, write_statistics=False,
                   store_schema=False, use_dictionary=False)
    return buf.getvalue()


def archive_cell(cell, archive: Path) -> dict:
    """Copy every finished shard of ``cell`` (a ``decision.Cell``: its done marker valid for
    the cell's config and input, ``resume.completed_shard``) that the archive does not hold
    yet into ``archive`` (layout in the module docstring). Existing entries are never
    rewritten (so git sees no change). Input shards are hashed only for finished shards. A
    temporary file a killed archiver left in the cell's archive directory (``.*.tmp``) is
    removed first, so it is never committed. A shard that cannot be archived (its output or
    input unreadable, a kept column whose values no longer fit :func:`archive_schema`, a
    file the archive cannot take) is left out and listed, never raised: one shard must not
    stop a benchmark or its analysis.

    Returns ``{"added": int, "present": int, "failed": [(shard name, why)]}``: entries
    written now, finished shards already archived, finished shards not archived with why
    (``"<exception type>: <message>"``)."""
    from specrag_batch import resume, storage

    h = cell.config.config_hash()
    inp, out, pairs = _shards(cell)
    counts = {"added": 0, "present": 0, "failed": []}
    for stale in (archive / cell.dataset / cell.arm).glob("*/.*.tmp"):
        stale.unlink(missing_ok=True)
    if not storage.exists(out):
        return counts
    for s, o in pairs:
        try:
            done = _archive_shard(cell, archive, h, out, s, o)
            if done is not None:
                counts[done] += 1
        except Exception as e:  # noqa: BLE001 - one shard must not stop the others (listed)
            counts["failed"].append((o.rsplit("/", 1)[-1], f"{type(e).__name__}: {e}"))
    return counts


def _archive_shard(cell, archive: Path, h: str, out: str, s: str, o: str) -> str | None:
    """Archive one shard (input URI ``s``, output URI ``o`` in output directory ``out``) of
    ``cell`` under config hash ``h``; returns ``"added"``, ``"present"`` or None (no valid
    done marker: not finished).

    Raises:
        OSError, pyarrow.ArrowException, ValueError, TypeError: the shard's files cannot be
            read or archived (:func:`archive_cell` lists it)."""
    from specrag_batch import resume, storage

    marker = resume.completed_shard(out, o, h, resume.input_fingerprint(s))
    if marker is None:
        return None
    in_hash = input_sha256(s)
    stem = entry_stem(archive, cell, h, o, in_hash)
    machine = shard_machine(marker)
    if _complete(stem) and machine.get("id") is not None and _entry_machine(stem) not in (None, machine["id"]):
        stem = machine_stem(stem, machine["id"])  # computed again on another machine: its own entry
    if _complete(stem):
        return "present"
    pq_path, js_path = stem.with_name(stem.name + ".parquet"), stem.with_name(stem.name + ".json")
    data = parquet_bytes(archive_table(storage.read_parquet(o)))
    result = {k: v for k, v in marker["result"].items() if k != RESTORED_KEY}
    entry = {"format": FORMAT, "dataset": cell.dataset, "arm": cell.arm, "shard": o.rsplit("/", 1)[-1],
             "config_hash": h, "input_sha256": in_hash, "output_sha256": hashlib.sha256(data).hexdigest(),
             "finished": marker.get("finished"), "machine": machine,
             "result": result}
    _write_atomic(pq_path, data)  # the Parquet first: a .json always names a complete file
    _write_atomic(js_path, (json.dumps(entry, indent=1, sort_keys=True, default=str) + "\n").encode())
    return "added"


def _complete(stem: Path) -> bool:
    """Whether both files of the entry at ``stem`` exist."""
    return stem.with_name(stem.name + ".json").exists() and stem.with_name(stem.name + ".parquet").exists()


def _entry(stem: Path, config_hash: str, in_hash: str) -> tuple[dict | None, str | None]:
    """(entry, None) when ``stem``'s ``.json`` and ``.parquet`` exist, agree with the config
    hash and input hash and the Parquet has the recorded sha256; else (None, why not)."""
    js, pq_path = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".parquet")
    if not js.exists():
        return None, None
    try:
        entry = json.loads(js.read_text())
        data = pq_path.read_bytes()
    except (OSError, ValueError) as e:
        return None, f"unreadable archive entry ({type(e).__name__}: {e})"
    if not isinstance(entry, dict) or not isinstance(entry.get("result"), dict):
        return None, "archive entry is not a JSON object with a result"
    if entry.get("config_hash") != config_hash or entry.get("input_sha256") != in_hash:
        return None, "archive entry records another config or input"
    if hashlib.sha256(data).hexdigest() != entry.get("output_sha256"):
        return None, "archived Parquet does not match its recorded sha256"
    if entry["result"].get("status") != "ok":
        return None, f"archived shard status {entry['result'].get('status')!r}"
    entry["_data"] = data
    return entry, None


def _why_absent(archive: Path, cell, config_hash: str, shard_out: str) -> str | None:
    """Why the archive has no entry for this shard under this config and input: it holds the
    shard only for other input rows, or only under other config hashes; None when it never
    held the shard."""
    stem = shard_out.rsplit("/", 1)[-1].removesuffix(".parquet")
    arm_dir = archive / cell.dataset / cell.arm
    if not arm_dir.is_dir():
        return None
    others = [p.parent.name for p in arm_dir.glob(f"*/{glob.escape(stem)}.*.json")]  # a name's [ * ? are literal
    if config_hash in others:
        return "archived for other input rows"
    if others:
        return f"archived under other config hash {', '.join(sorted(set(others)))}"
    return None


def restore_cell(cell, archive: Path, machine: str | None = None) -> dict:
    """Write back every shard of ``cell`` that has no valid done marker in its runs directory
    but an archive entry for the cell's config hash and the input shard's current content
    (:func:`table_sha256`), through the product's API: the output with
    ``storage.write_parquet_atomic`` (every ``OUTPUT_SCHEMA`` column, the ones not archived
    null), then ``resume.mark_done`` with the input shard's current ``resume.input_fingerprint``,
    the archived ``result`` (its ``input``/``output`` set to this directory's URIs, plus
    :data:`RESTORED_KEY`: the archived machine) and the archived run id. Nothing is restored
    into an output directory that holds another config's or input's results
    (``resume.check_output`` refuses it; ``run_batch`` would too).

    Returns ``{"restored": int, "not_restored": [(shard name, why)], "refused": str | None}``:
    shards written back; shards the archive holds but not for this config and input, whose
    entry fails its checks, or that failed to restore (an unreadable archived Parquet, rows
    that no longer fit ``OUTPUT_SCHEMA``, an unwritable runs directory:
    ``"<exception type>: <message>"``), with why (the run computes them again); why nothing
    was restored (a run conflict). Shards never archived are in neither list. Never raises
    for one shard."""
    from specrag_batch import resume, storage

    h = cell.config.config_hash()
    inp, out, pairs = _shards(cell)
    got = {"restored": 0, "not_restored": [], "refused": None}
    todo = [(s, o) for s, o in pairs
            if not (storage.exists(out) and resume.completed_shard(out, o, h, resume.input_fingerprint(s)))]
    if not todo or not (archive / cell.dataset / cell.arm).is_dir():
        return got
    try:
        resume.check_output(out, inp, h)
    except resume.RunConflictError as e:
        got["refused"] = str(e)
        return got
    for s, o in todo:
        try:
            why = _restore_shard(cell, archive, h, out, s, o, machine)
        except Exception as e:  # noqa: BLE001 - one shard must not stop the others (listed, recomputed)
            why = f"{type(e).__name__}: {e}"
        if why == "":
            got["restored"] += 1
        elif why:
            got["not_restored"].append((o.rsplit("/", 1)[-1], why))
    return got


def _restore_shard(cell, archive: Path, h: str, out: str, s: str, o: str, machine: str | None = None) -> str | None:
    """Restore one shard (input URI ``s``, output URI ``o`` in ``out``) of ``cell`` under
    config hash ``h`` (:func:`restore_cell`), only an entry computed on ``machine`` when given:
    ``""`` when restored, why not when the archive holds it but not usably (or only from
    other machines), None when it never held it.

    Raises:
        OSError, pyarrow.ArrowException, ValueError, TypeError: the input shard or the
            archived Parquet cannot be read, its rows no longer fit ``OUTPUT_SCHEMA`` (a
            column whose type changed since it was archived), or the runs directory cannot be
            written (:func:`restore_cell` lists the shard)."""
    from specrag_batch import resume, storage
    from specrag_batch.schema import OUTPUT_SCHEMA

    in_hash = input_sha256(s)
    stem = entry_stem(archive, cell, h, o, in_hash)
    if machine is not None and _complete(stem) and _entry_machine(stem) != machine:
        stem = machine_stem(stem, machine)
        if not _complete(stem):
            return f"archived only from other machines than {machine} (--machine)"
    entry, why = _entry(stem, h, in_hash)
    if entry is None:
        return why or _why_absent(archive, cell, h, o)
    rows = pq.read_table(io.BytesIO(entry["_data"])).to_pylist()
    table = pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)  # before anything is written
    storage.write_parquet_atomic(o, table)
    result = {**entry["result"], "input": s, "output": o, RESTORED_KEY: entry.get("machine") or {"id": None}}
    resume.mark_done(out, o, h, resume.input_fingerprint(s), str(result.get("run_id") or "archive"), result)
    return ""


def failed_line(failed: list[tuple[str, str]]) -> str:
    """The line :func:`archive_cell`'s ``failed`` shards print (without the cell's prefix)."""
    return (f"{len(failed)} finished shard(s) not archived (kept in the runs directory only): "
            + "; ".join(f"{n}: {w}" for n, w in failed))


def restore_line(cell, got: dict, archive: Path, recompute: bool = True) -> str | None:
    """The one line :func:`restore_cell`'s outcome prints for a cell (None when the archive
    had nothing to say about it). ``recompute`` False (``--analyse-only``, which computes
    nothing): shards not restored are said to be left out of the analysis, not recomputed."""
    name = f"{cell.dataset}/{cell.arm}"
    if got["refused"]:
        return f"[decision] {name}: nothing restored from the archive: {got['refused']}"
    if not got["restored"] and not got["not_restored"]:
        return None
    parts = [f"[decision] {name}: {got['restored']} shard(s) restored from {archive}"]
    if got["not_restored"]:
        by_why: dict[str, list[str]] = {}  # one reason once, with every shard it holds for
        for n, w in got["not_restored"]:
            by_why.setdefault(w, []).append(n)
        fate = "recomputed" if recompute else "left out of the analysis"
        parts.append(f"not restored ({fate}): " + "; ".join(f"{', '.join(ns)}: {w}" for w, ns in by_why.items()))
    return "; ".join(parts)
