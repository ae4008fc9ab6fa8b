"""The decision benchmark's cell archive: finished shards kept in git, so that a benchmark
spread over several working sessions (each on a new machine whose ``benchmarks/runs/`` starts
empty) can be completed and analysed as one run.

Layout: ``<archive>`` (``decision.py --archive``, default :data:`ARCHIVE_DIR`,
``benchmarks/decision/archives/``) holds one xz-compressed tar per machine that computed
shards, ``<machine id>.tar.xz`` (:func:`archive_path`; ``unknown-machine.tar.xz`` for shards of
no known machine). Its members are the entries, one pair per finished output shard of a cell
(``decision.Cell``)::

    <dataset>/<arm>/<config hash>/<shard stem>.<input hash[:16]>.parquet
    <dataset>/<arm>/<config hash>/<shard stem>.<input hash[:16]>.json

A working session runs on one machine, and each session's machine is a new id
(:func:`this_machine`), so a session adds one archive and never rewrites another session's:
git keeps one compressed file per session's results instead of two loose files per shard.
:func:`write_archive` writes members in name order with fixed times, owners and modes (xz
preset :data:`XZ_PRESET`), so the same entries pack to the same bytes.

New entries are first *staged* as loose files under ``<archive>/staging/`` (ignored by git,
``<archive>/.gitignore``), so a shard that finishes while a cell computes costs a file write,
not a re-compression of the archive beside the measured shards. :func:`pack` moves the staged
entries into their machine's archive: :func:`archive_cell` packs when it is not told to stage
only (before cells run, on ``--analyse-only``, when a cell ends), and
``python benchmarks/cell_archive.py pack`` packs by hand (before a commit while a cell still
computes). :func:`entries` reads both, so a staged entry is restored and counted as present
like a packed one.

An entry is addressed by its content: the run config's hash (``RunConfig.config_hash``, 16
hex) and the input shard's *table content* hash (:func:`table_sha256`, not its bytes or file
version), so an entry is written once and never replaced: a cell re-run with another config or
other input rows gets entries of its own, and no archive of an earlier session changes
(:func:`archive_cell` stages nothing it already holds, so ``git status`` shows no diff).

* The ``.parquet`` holds only the output columns the analysis reads (:data:`KEPT_COLUMNS`;
  drafts without ``doc_ids``: :func:`archive_schema`), zstd-compressed: about 13 KB for a
  realistic 10-row shard of 5 drafts a row (:func:`parquet_bytes`).
* The ``.json`` (about 1.5-2 KB) holds the done marker's ``result`` (seconds, stage seconds,
  engine usage and dtypes, run id), its ``finished`` time, the config hash, the input hash, the
  sha256 of the ``.parquet`` bytes (checked before a restore) and the machine the shard ran on
  (:func:`shard_machine`: CPU model, cpus, platform, machine id, boot id, UTC date).

:func:`restore_cell` writes archived shards back into an empty (or partial) runs directory
through the product's own API (``storage.write_parquet_atomic``, ``resume.mark_done`` with the
input shard's current ``resume.input_fingerprint``), so ``resume.completed_shard`` accepts them
and ``run_batch`` skips them. A restored shard's output has every column of
``schema.OUTPUT_SCHEMA``; the columns not archived are null.

**One machine's run.** A shard computed again on another machine (``decision.py --machine``:
a run whose every cell is computed on one machine) gets a second entry beside the first, its
stem suffixed with that machine's id (:func:`machine_stem`), in that machine's archive; the
first entry stays as it was. :func:`restore_cell` with ``machine`` restores only entries that
ran on that machine (the first entry when it did, else its suffixed one), so the one-machine
run can be restored and analysed on any later machine.

Seconds measured on two machines cannot be divided by each other: each shard carries its
machine (:func:`shard_machine`) and ``decision_stats`` prints no time ratio between cells that
ran on different machines. The result's ``engine_dtypes`` (kept with it) lets
``decision_stats`` say when compared cells ran in different dtypes (``dtypes_differ``).

Command line (``--archive`` defaults to :data:`ARCHIVE_DIR`)::

    python benchmarks/cell_archive.py list                # archives, entries, machines
    python benchmarks/cell_archive.py pack                # staged entries into their archives
    python benchmarks/cell_archive.py import <dir>        # a loose <dataset>/<arm>/... tree
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import io
import json
import lzma
import os
import platform
import sys
import tarfile
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ARCHIVE_DIR = Path(__file__).resolve().parent / "decision" / "archives"
"""Default archive directory: one ``<machine id>.tar.xz`` per machine that computed shards."""

SUFFIX = ".tar.xz"
"""File name suffix of an archive in the archive directory."""

STAGING = "staging"
"""Subdirectory of the archive directory holding staged (not yet packed) entries; not in git."""

UNKNOWN_ARCHIVE = "unknown-machine"
"""Archive name (without :data:`SUFFIX`) of entries whose machine is unknown."""

XZ_PRESET = 6
"""xz preset of the archives (level 6, the xz default; 9 gives the same size here)."""

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
    from specrag_batch.core.schema import OUTPUT_SCHEMA

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
    from specrag_batch.run import resume
    from specrag_batch.core import storage

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


# --- the archive directory: archives, staged entries, packing -----------------------------

class ArchiveError(ValueError):
    """An archive file that cannot be read as an xz-compressed tar of entries."""


def archive_path(archive: Path, machine_id: str | None) -> Path:
    """The archive of the entries ``machine_id`` computed: ``<archive>/<machine id>.tar.xz``
    (``unknown-machine.tar.xz`` when None)."""
    return Path(archive) / f"{machine_id or UNKNOWN_ARCHIVE}{SUFFIX}"


def archive_files(archive: Path) -> list[Path]:
    """Every archive (``*.tar.xz``) in the archive directory, by name; [] when it is absent."""
    archive = Path(archive)
    return sorted(archive.glob(f"*{SUFFIX}")) if archive.is_dir() else []


def tar_xz_bytes(members: dict[str, bytes]) -> bytes:
    """``members`` (member path -> bytes) as an xz-compressed tar, deterministically: members
    in name order, modification time 0, owner and group 0 without names, mode 0644, PAX format,
    xz preset :data:`XZ_PRESET` with a CRC64 check. The same members give the same bytes."""
    buf = io.BytesIO()
    with lzma.LZMAFile(buf, "wb", format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=XZ_PRESET) as xz:
        with tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(members):
                data = members[name]
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_archive(path: Path, members: dict[str, bytes]) -> None:
    """Write ``members`` to the archive at ``path`` (:func:`tar_xz_bytes`) atomically: a
    reader sees the old archive or the new one, never half of one."""
    _write_atomic(Path(path), tar_xz_bytes(members))


_ARCHIVES: dict[Path, tuple[tuple[int, int, int], dict[str, bytes]]] = {}


def read_archive(path: Path) -> dict[str, bytes]:
    """The members of the archive at ``path`` (member path -> bytes), remembered per file
    version (size, modification time, inode), so an archive is decompressed once per process.

    Raises:
        ArchiveError: the file is not an xz-compressed tar of regular files (its path named)."""
    path = Path(path)
    st = path.stat()
    key = (st.st_size, st.st_mtime_ns, st.st_ino)
    got = _ARCHIVES.get(path)
    if got is None or got[0] != key:
        members = {}
        try:
            with tarfile.open(path, mode="r:xz") as tar:
                for info in tar:
                    if not info.isfile():
                        raise ArchiveError(f"{path}: member {info.name!r} is not a regular file")
                    members[info.name] = tar.extractfile(info).read()
        except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
            raise ArchiveError(f"{path}: not an xz-compressed tar ({type(e).__name__}: {e})") from e
        got = _ARCHIVES[path] = (key, members)
    return got[1]


def _staged(archive: Path) -> dict[str, Path]:
    """Staged entry files: member path -> file under ``<archive>/staging/`` (temporary and
    hidden files left out)."""
    root = Path(archive) / STAGING
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def entries(archive: Path) -> dict[str, bytes]:
    """Every entry file the archive directory holds, packed (:func:`archive_files`, the first
    archive by name wins for a member two hold) or staged: member path
    (``<dataset>/<arm>/<config hash>/<file>``) -> bytes.

    Raises:
        ArchiveError: an archive cannot be read."""
    out: dict[str, bytes] = {}
    for f in archive_files(archive):
        for name, data in read_archive(f).items():
            out.setdefault(name, data)
    for name, p in _staged(archive).items():
        if name not in out:
            try:
                out[name] = p.read_bytes()
            except FileNotFoundError:  # packed by another process meanwhile: in its archive now
                pass
    return out


@contextlib.contextmanager
def _locked(archive: Path):
    """An exclusive lock on the archive directory's staging area (``staging/.lock``), held
    while entries are staged or packed, so a pack never sees half an entry."""
    import fcntl

    root = Path(archive) / STAGING
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def stage_entry(archive: Path, stem: str, parquet: bytes, entry_json: bytes) -> None:
    """Stage one entry (its ``.parquet``, then its ``.json``) under ``<archive>/staging/``."""
    with _locked(archive) as root:
        _write_atomic(root / f"{stem}.parquet", parquet)
        _write_atomic(root / f"{stem}.json", entry_json)


def pack(archive: Path) -> dict[str, int]:
    """Move every staged entry into its machine's archive (:func:`archive_path`, from the
    machine id its ``.json`` records): each archive that gains entries is written again with
    its members and the new ones (an entry it already holds keeps its archived bytes); the
    archives of other machines are not touched. Staged files are removed once packed, as are
    temporary files and a ``.parquet`` without its ``.json`` (left by a killed process; the
    next :func:`archive_cell` stages it again). Returns archive file name -> entries added.

    Raises:
        ArchiveError: an archive that gains entries cannot be read.
        OSError: the archive directory cannot be written."""
    archive = Path(archive)
    if not (archive / STAGING).is_dir():
        return {}
    with _locked(archive) as root:
        for stale in [*root.rglob(".*.tmp"), *archive.glob(".*.tmp")]:
            stale.unlink(missing_ok=True)
        staged = _staged(archive)
        groups: dict[Path, dict[str, bytes]] = {}
        done: list[Path] = []
        for name, p in staged.items():
            if name.endswith(".parquet") and name.removesuffix(".parquet") + ".json" not in staged:
                done.append(p)  # half an entry: never packed
            if not name.endswith(".json") or (pq_name := name.removesuffix(".json") + ".parquet") not in staged:
                continue
            js = p.read_bytes()
            try:
                machine = (json.loads(js).get("machine") or {}).get("id")
            except (ValueError, AttributeError):
                machine = None
            groups.setdefault(archive_path(archive, machine), {}).update({name: js, pq_name: staged[pq_name].read_bytes()})
            done += [p, staged[pq_name]]
        packed = {}
        for path, new in sorted(groups.items()):
            old = read_archive(path) if path.exists() else {}
            add = {k: v for k, v in new.items() if k not in old}
            if add:
                write_archive(path, {**old, **add})
                packed[path.name] = len(add) // 2
        for p in done:
            p.unlink(missing_ok=True)
        for d in sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()  # empty directories only
    return packed


def import_loose(source: Path, archive: Path) -> dict[str, int]:
    """Pack a loose archive tree (``<source>/<dataset>/<arm>/<config hash>/<stem>.json`` and
    ``.parquet``, the layout kept in git before 2026-12-05) into the archive directory, one
    archive per machine (:func:`pack`); files are copied byte for byte. Returns archive file
    name -> entries added."""
    source = Path(source)
    for js in sorted(source.rglob("*.json")):
        stem = js.relative_to(source).as_posix().removesuffix(".json")
        pq_path = js.with_suffix(".parquet")
        if pq_path.is_file():
            stage_entry(archive, stem, pq_path.read_bytes(), js.read_bytes())
    return pack(archive)


# --- entries ----------------------------------------------------------------------------

def entry_stem(cell, config_hash: str, shard_out: str, input_hash: str) -> str:
    """``<dataset>/<arm>/<config hash>/<shard stem>.<input hash[:16]>`` (add ``.parquet`` /
    ``.json``): the member path of a shard's entry. ``cell``: a ``decision.Cell`` (``dataset``,
    ``arm``); ``shard_out``: the output shard's URI or name."""
    name = shard_out.rsplit("/", 1)[-1].removesuffix(".parquet")
    return f"{cell.dataset}/{cell.arm}/{config_hash}/{name}.{input_hash[:16]}"


def machine_stem(stem: str, machine_id: str) -> str:
    """The stem of the entry another machine's computation of the shard at ``stem`` gets
    (``<stem>.<machine id>``; the first machine's entry keeps ``stem``)."""
    return f"{stem}.{machine_id}"


def _entry_machine(have: dict[str, bytes], stem: str) -> str | None:
    """The machine id recorded in the entry at ``stem`` of ``have`` (:func:`entries`; None
    when absent, unreadable or unknown)."""
    try:
        return (json.loads(have[stem + ".json"]).get("machine") or {}).get("id")
    except (KeyError, ValueError, AttributeError):
        return None


def archive_machines(archive: Path) -> set[str]:
    """The machine ids recorded by the archive's entries (every ``.json`` entry, packed or
    staged; unreadable entries and entries without an id are left out)."""
    have = entries(archive)
    return {m for name in have if name.endswith(".json") and (m := _entry_machine(have, name.removesuffix(".json")))}


def _shards(cell) -> tuple[str, str, list[tuple[str, str]]]:
    """(input URI, output URI, [(input shard URI, output shard URI)] sorted), by the product's
    rules (``planning.plan_shards``, ``planning.shard_output_uri``)."""
    from specrag_batch.core import storage
    from specrag_batch.run.planning import plan_shards, shard_output_uri

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


def archive_cell(cell, archive: Path, stage_only: bool = False) -> dict:
    """Stage every finished shard of ``cell`` (a ``decision.Cell``: its done marker valid for
    the cell's config and input, ``resume.completed_shard``) that the archive directory does
    not hold yet (layout in the module docstring), then :func:`pack` the staged entries into
    their machine's archive unless ``stage_only`` (the watcher while a cell computes). Existing
    entries are never rewritten (so git sees no change). Input shards are hashed only for
    finished shards. A shard that cannot be archived (its output or input unreadable, a kept
    column whose values no longer fit :func:`archive_schema`, an archive that cannot be read
    or written) is left out and listed, never raised: one shard must not stop a benchmark or
    its analysis; a failed pack is listed under ``"(pack)"`` and its entries stay staged.

    Returns ``{"added": int, "present": int, "failed": [(shard name, why)]}``: entries
    staged now, finished shards already archived, finished shards not archived with why
    (``"<exception type>: <message>"``)."""
    from specrag_batch.core import storage

    h = cell.config.config_hash()
    inp, out, pairs = _shards(cell)
    counts = {"added": 0, "present": 0, "failed": []}
    if storage.exists(out):
        for s, o in pairs:
            try:
                done = _archive_shard(cell, archive, h, out, s, o)
                if done is not None:
                    counts[done] += 1
            except Exception as e:  # noqa: BLE001 - one shard must not stop the others (listed)
                counts["failed"].append((o.rsplit("/", 1)[-1], f"{type(e).__name__}: {e}"))
    if not stage_only:
        try:
            pack(archive)
        except Exception as e:  # noqa: BLE001 - the entries stay staged; the next pack takes them
            counts["failed"].append(("(pack)", f"{type(e).__name__}: {e}"))
    return counts


def _archive_shard(cell, archive: Path, h: str, out: str, s: str, o: str) -> str | None:
    """Stage one shard (input URI ``s``, output URI ``o`` in output directory ``out``) of
    ``cell`` under config hash ``h``; returns ``"added"``, ``"present"`` or None (no valid
    done marker: not finished).

    Raises:
        OSError, pyarrow.ArrowException, ValueError, TypeError: the shard's files cannot be
            read or archived (:func:`archive_cell` lists it)."""
    from specrag_batch.run import resume
    from specrag_batch.core import storage

    marker = resume.completed_shard(out, o, h, resume.input_fingerprint(s))
    if marker is None:
        return None
    in_hash = input_sha256(s)
    have = entries(archive)
    stem = entry_stem(cell, h, o, in_hash)
    machine = shard_machine(marker)
    if _complete(have, stem) and machine.get("id") is not None and _entry_machine(have, stem) not in (None, machine["id"]):
        stem = machine_stem(stem, machine["id"])  # computed again on another machine: its own entry
    if _complete(have, stem):
        return "present"
    data = parquet_bytes(archive_table(storage.read_parquet(o)))
    result = {k: v for k, v in marker["result"].items() if k != RESTORED_KEY}
    entry = {"format": FORMAT, "dataset": cell.dataset, "arm": cell.arm, "shard": o.rsplit("/", 1)[-1],
             "config_hash": h, "input_sha256": in_hash, "output_sha256": hashlib.sha256(data).hexdigest(),
             "finished": marker.get("finished"), "machine": machine,
             "result": result}
    stage_entry(archive, stem, data, (json.dumps(entry, indent=1, sort_keys=True, default=str) + "\n").encode())
    return "added"


def _complete(have: dict[str, bytes], stem: str) -> bool:
    """Whether both files of the entry at ``stem`` are in ``have`` (:func:`entries`)."""
    return stem + ".json" in have and stem + ".parquet" in have


def _entry(have: dict[str, bytes], stem: str, config_hash: str, in_hash: str) -> tuple[dict | None, str | None]:
    """(entry, None) when ``stem``'s ``.json`` and ``.parquet`` are in ``have``
    (:func:`entries`), agree with the config hash and input hash and the Parquet has the
    recorded sha256; else (None, why not; None when the ``.json`` is absent)."""
    if stem + ".json" not in have:
        return None, None
    try:
        entry = json.loads(have[stem + ".json"])
        data = have[stem + ".parquet"]
    except (KeyError, ValueError) as e:
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


def _why_absent(have: dict[str, bytes], cell, config_hash: str, shard_out: str) -> str | None:
    """Why ``have`` (:func:`entries`) has no entry for this shard under this config and input:
    it holds the shard only for other input rows, or only under other config hashes; None
    when it never held the shard. Names are compared literally (a ``[`` in a shard's name is
    no pattern)."""
    stem = shard_out.rsplit("/", 1)[-1].removesuffix(".parquet")
    prefix = f"{cell.dataset}/{cell.arm}/"
    others = []
    for name in have:
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        parts = name[len(prefix):].split("/")
        if len(parts) == 2 and parts[1].startswith(stem + "."):
            others.append(parts[0])
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
    (``resume.check_output`` refuses it; ``run_batch`` would too), nor from an archive
    directory that cannot be read.

    Returns ``{"restored": int, "not_restored": [(shard name, why)], "refused": str | None}``:
    shards written back; shards the archive holds but not for this config and input, whose
    entry fails its checks, or that failed to restore (an unreadable archived Parquet, rows
    that no longer fit ``OUTPUT_SCHEMA``, an unwritable runs directory:
    ``"<exception type>: <message>"``), with why (the run computes them again); why nothing
    was restored (a run conflict, an unreadable archive). Shards never archived are in neither
    list. Never raises for one shard."""
    from specrag_batch.run import resume
    from specrag_batch.core import storage

    h = cell.config.config_hash()
    inp, out, pairs = _shards(cell)
    got = {"restored": 0, "not_restored": [], "refused": None}
    todo = [(s, o) for s, o in pairs
            if not (storage.exists(out) and resume.completed_shard(out, o, h, resume.input_fingerprint(s)))]
    if not todo:
        return got
    try:
        have = entries(archive)
    except ArchiveError as e:
        got["refused"] = str(e)
        return got
    if not any(name.startswith(f"{cell.dataset}/{cell.arm}/") for name in have):
        return got
    try:
        resume.check_output(out, inp, h)
    except resume.RunConflictError as e:
        got["refused"] = str(e)
        return got
    for s, o in todo:
        try:
            why = _restore_shard(cell, have, h, out, s, o, machine)
        except Exception as e:  # noqa: BLE001 - one shard must not stop the others (listed, recomputed)
            why = f"{type(e).__name__}: {e}"
        if why == "":
            got["restored"] += 1
        elif why:
            got["not_restored"].append((o.rsplit("/", 1)[-1], why))
    return got


def _restore_shard(cell, have: dict[str, bytes], h: str, out: str, s: str, o: str,
                   machine: str | None = None) -> str | None:
    """Restore one shard (input URI ``s``, output URI ``o`` in ``out``) of ``cell`` under
    config hash ``h`` from ``have`` (:func:`entries`; :func:`restore_cell`), only an entry
    computed on ``machine`` when given: ``""`` when restored, why not when the archive holds
    it but not usably (or only from other machines), None when it never held it.

    Raises:
        OSError, pyarrow.ArrowException, ValueError, TypeError: the input shard or the
            archived Parquet cannot be read, its rows no longer fit ``OUTPUT_SCHEMA`` (a
            column whose type changed since it was archived), or the runs directory cannot be
            written (:func:`restore_cell` lists the shard)."""
    from specrag_batch.run import resume
    from specrag_batch.core import storage
    from specrag_batch.core.schema import OUTPUT_SCHEMA

    in_hash = input_sha256(s)
    stem = entry_stem(cell, h, o, in_hash)
    if machine is not None and _complete(have, stem) and _entry_machine(have, stem) != machine:
        stem = machine_stem(stem, machine)
        if not _complete(have, stem):
            return f"archived only from other machines than {machine} (--machine)"
    entry, why = _entry(have, stem, h, in_hash)
    if entry is None:
        return why or _why_absent(have, cell, h, o)
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The decision benchmark's cell archive: list its archives, pack "
                                 "staged entries, import a loose archive tree.")
    ap.add_argument("--archive", type=Path, default=ARCHIVE_DIR, help="archive directory (default %(default)s)")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="each archive's entries and machines, and the staged entries")
    sub.add_parser("pack", help="move staged entries into their machine's archive (before a commit while a "
                   "cell computes; decision.py packs when a cell ends)")
    imp = sub.add_parser("import", help="pack a loose <dataset>/<arm>/<config hash>/<entry>.json|.parquet tree")
    imp.add_argument("source", type=Path)
    a = ap.parse_args(argv)
    if a.command == "import":
        if not a.source.is_dir():
            ap.error(f"import: {a.source}: no such directory")
        got = import_loose(a.source, a.archive)
    elif a.command == "pack":
        got = pack(a.archive)
    else:
        for f in archive_files(a.archive):
            members = read_archive(f)
            machines = sorted({m for n in members if n.endswith(".json")
                               if (m := _entry_machine(members, n.removesuffix(".json")))})
            print(f"{f.name}: {len(members) // 2} entries, {f.stat().st_size} bytes, machines {', '.join(machines)}")
        staged = [n for n in _staged(a.archive) if n.endswith(".json")]
        print(f"staged (not packed): {len(staged)} entries")
        return 0
    for name, n in got.items():
        print(f"{a.archive / name}: {n} entries added")
    if not got:
        print("nothing to pack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
