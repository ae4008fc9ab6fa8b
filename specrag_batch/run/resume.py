"""Crash-safe, resumable runs.

A run is keyed by (input URI, output URI, config hash). The output prefix holds:

* ``_run.json``: the key of the results it holds (input, config hash, config, first run id);
* ``<shard>.parquet``: one data object per input shard, written whole (atomic rename locally,
  single completed upload on S3);
* ``_shards/<shard>.json``: the shard's *done marker*, written only after its data object is
  complete: config hash, input fingerprint (size + ETag/mtime), row counts, run id, metrics;
* ``_manifest.json``: the run manifest, rewritten at the end of every run;
* ``_drafts/``: in disaggregated runs, the intermediate draft shards and their own
  ``_drafts/_shards/`` done markers, same rules: a verifier re-run reuses finished drafts.

Readers trust only shards that have a done marker. Re-running the same command skips shards
whose marker matches the config hash and the input fingerprint, recomputes the rest, and
overwrites any unmarked (partial) output. A different config into the same output refuses
(:class:`RunConflictError`) unless ``overwrite`` is given, which removes the previous results
first, so results of two configs never mix.

A done marker that is not one the pipeline writes (not a JSON object, or its ``result`` or
``output`` of another type) is not trusted: its shard is recomputed, with a warning naming it.
A ``_run.json`` that is not a JSON object cannot be checked against this run: refused like a
conflict (``overwrite`` replaces it).

The key is claimed by exclusive create (:func:`claim_output`), so that of two runs started
into one prefix at once exactly one writes it; the other is refused unless it is the same run
(same input and config).

A run that fails before computing anything leaves no key behind: the config's model names are
checked before ``_run.json`` is written (:func:`models.check_config_models`), and when the
engines then fail to load, the run removes the ``_run.json`` it wrote while no done marker
exists (:func:`release_output`). A ``_run.json`` left by a run killed while loading still
refuses another config (two runs may be writing into one prefix); the conflict message then
says that the output holds no finished shard, so ``--overwrite`` discards nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from ..core import storage
from ..core.redaction import redact, redact_text
from ..core.storage import input_fingerprint  # noqa: F401  (re-exported: resume.input_fingerprint)
from .layout import DRAFTS_DIR, RUN_FILE, SHARDS_DIR, marker_uri


log = logging.getLogger(__name__)


class RunConflictError(RuntimeError):
    """The output prefix holds results of another input or config."""


def read_marker(uri: str) -> dict | None:
    """The done marker at ``uri`` when it is one the pipeline writes (a JSON object whose
    ``result`` is an object and ``output`` a string), else None: absent, or (with a warning
    naming it) damaged, so that its shard is recomputed rather than trusted or a crash."""
    try:
        m = storage.read_json_object(uri)
    except ValueError as e:
        log.warning("%s; not a done marker this pipeline wrote: its shard is recomputed", redact_text(str(e)))
        return None
    if m is not None and not (isinstance(m.get("result"), dict) and isinstance(m.get("output"), str)):
        log.warning("%s: done marker without an object 'result' and a string 'output': its shard "
                    "is recomputed", redact_text(uri))
        return None
    return m


def _remove(uri: str) -> None:
    fs, path = storage.filesystem(uri)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass


def _conflicts(existing: dict, input_uri: str, config_hash: str) -> bool:
    return (existing.get("config_hash") != config_hash
            or existing.get("input") not in (input_uri, redact_text(input_uri)))


def check_output(output_uri: str, input_uri: str, config_hash: str, overwrite: bool = False,
                 config: dict | None = None) -> dict | None:
    """Read-only: the output prefix's ``_run.json`` (None if absent), after checking that it
    belongs to this input and config. Called before a flow starts, so that a conflict is a
    clean error (CLI exit 2) and not a failed flow run with Prefect's traceback in the log.
    Given this run's ``config`` (``RunConfig.model_dump(mode="json")``), a config conflict
    names the config keys that differ from the stored run's (``config.config_differences``;
    e.g. ``verifier.deduplicate_drafts``, whose default changed).

    A ``_run.json`` that is not a JSON object cannot be checked: with ``overwrite`` it is
    returned as ``{}`` (a key no run matches, so :func:`claim_output` replaces it).

    Raises:
        RunConflictError: the prefix holds results of another input or config, or a
            ``_run.json`` that is not a JSON object (named), and ``overwrite`` is false; or
            ``output_uri`` is a file (whatever ``overwrite``).
    """
    uri = storage.join(output_uri, RUN_FILE)
    _refuse_file_output(output_uri)
    try:
        existing = storage.read_json_object(uri)
    except ValueError as e:
        if overwrite:
            return {}
        raise RunConflictError(
            f"{redact_text(str(e))}: the key of the results in output {redact_text(output_uri)!r} "
            "cannot be checked against this run. Use another output URI, or --overwrite to "
            "replace the previous results.") from None
    if existing is not None and not overwrite and _conflicts(existing, input_uri, config_hash):
        raise RunConflictError(
            f"output {redact_text(output_uri)!r} holds results of input "
            f"{redact_text(str(existing.get('input')))!r} with config "
            f"{existing.get('config_hash')} (run {existing.get('run_id')}); this run is input "
            f"{redact_text(input_uri)!r} with config {config_hash}."
            f"{_config_diff_text(existing, config, config_hash)} Use another output URI, or "
            "--overwrite to replace the previous results."
            + ("" if finished_shards(output_uri) else " It holds no finished shard, so "
               "--overwrite discards no result."))
    return existing


def _refuse_file_output(output_uri: str) -> None:
    """Raise :class:`RunConflictError` when ``output_uri`` is a file, not a directory or prefix
    (reading ``<file>/_run.json`` would raise NotADirectoryError further on)."""
    fs, path = storage.filesystem(output_uri)
    if fs.isfile(path):
        raise RunConflictError(f"output {redact_text(output_uri)!r} is a file; give a directory or "
                               "prefix for the output shards")


def finished_shards(output_uri: str) -> int:
    """Done markers (final or draft shards) under ``output_uri``: files in ``_shards/`` and
    ``_drafts/_shards/``, damaged ones included (0 when the prefix does not exist)."""
    fs, _ = storage.filesystem(output_uri)
    n = 0
    for mdir in (storage.join(output_uri, SHARDS_DIR), storage.join(output_uri, DRAFTS_DIR, SHARDS_DIR)):
        if storage.exists(mdir):
            n += len(fs.find(storage.filesystem(mdir)[1]))
    return n


def release_output(output_uri: str, run_id: str) -> bool:
    """Remove the ``_run.json`` run ``run_id`` wrote (:func:`claim_output`) when the output
    holds no done marker (:func:`finished_shards`): a run that failed before computing anything
    (its engines did not load, or every shard failed) leaves no key that would refuse a
    corrected config. A key of
    another run, or one with finished shards, stays. Returns whether it was removed."""
    uri = storage.join(output_uri, RUN_FILE)
    _refuse_file_output(output_uri)
    try:
        existing = storage.read_json_object(uri)
    except ValueError:
        return False
    if existing is None or existing.get("run_id") != run_id or finished_shards(output_uri):
        return False
    _remove(uri)
    log.info("%s removed: run %s computed no shard", redact_text(uri), run_id)
    return True


def _config_diff_text(existing: dict, config: dict | None, config_hash: str) -> str:
    """`` Config keys that differ from the stored run's: ...`` (:func:`config.config_differences`
    of the ``_run.json`` config and this run's, both redacted) when the hashes differ and both
    configs are known; else empty."""
    from ..config import config_differences

    stored = existing.get("config")
    if config is None or not isinstance(stored, dict) or existing.get("config_hash") == config_hash:
        return ""
    diff = config_differences(stored, redact(config))
    return f" Config keys that differ from the stored run's: {'; '.join(diff)}." if diff else ""


def claim_output(output_uri: str, input_uri: str, config_hash: str, config: dict, run_id: str,
                 overwrite: bool = False) -> dict:
    """Bind the output prefix to this run key, or check that it already is.

    Returns the (possibly pre-existing) ``_run.json`` content, as written: secret-looking
    config values and URL passwords replaced by their hash (:func:`redaction.redact`).

    The key is created exclusively (:func:`storage.create_exclusive`: a hard link locally, a
    conditional PUT on S3), never check-then-write: of two runs claiming one output at once,
    exactly one creates it; the other reads it and goes on when it is the same input and
    config (as a resumed run does), else is refused, ``overwrite`` or not (the other run is
    writing its results now).

    Raises:
        RunConflictError: the prefix holds results of another input or config (or a
            ``_run.json`` that is not a JSON object) and ``overwrite`` is false; another run
            with another input or config claimed the prefix while this one was claiming it;
            or ``output_uri`` is a file (:func:`check_output`).
    """
    uri = storage.join(output_uri, RUN_FILE)
    existing = check_output(output_uri, input_uri, config_hash, overwrite, config)
    if existing is not None and _conflicts(existing, input_uri, config_hash):
        clear_previous(output_uri)
        existing = None
    if existing is not None:
        return existing
    # secrets in the config are written as hashes (see redaction)
    key = redact({"input": input_uri, "output": output_uri, "config_hash": config_hash,
                  "run_id": run_id, "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                  "config": config})
    for _ in range(3):  # exclusive create: of two runs claiming at once, exactly one writes it
        if storage.create_exclusive(uri, json.dumps(key, indent=2).encode()):
            return key
        try:
            other = storage.read_json_object(uri)
        except ValueError:
            other = {}
        if other is None:  # removed again meanwhile (a run that failed to start): claim again
            continue
        if not _conflicts(other, input_uri, config_hash):
            return other  # the same input and config: the runs share the key, as a resume does
        raise RunConflictError(
            f"output {redact_text(output_uri)!r} was claimed by another run (run "
            f"{other.get('run_id')}, input {redact_text(str(other.get('input')))!r}, config "
            f"{other.get('config_hash')}) while this run (input {redact_text(input_uri)!r}, "
            f"config {config_hash}) was starting: two runs into one output at once. Use another "
            "output URI, or wait for that run to end (--overwrite then replaces its results).")
    raise RunConflictError(f"output {redact_text(output_uri)!r}: its run key was claimed and "
                           "removed again three times while this run was starting; try again")


def clear_previous(output_uri: str) -> None:
    """Remove a previous run's markers, the data objects they name, its manifest and key.
    Files the pipeline did not write are left alone."""
    fs, path = storage.filesystem(output_uri)
    proto = output_uri.split("://", 1)[0] + "://" if "://" in output_uri else ""
    for mdir in (storage.join(output_uri, SHARDS_DIR), storage.join(output_uri, DRAFTS_DIR, SHARDS_DIR)):
        if not storage.exists(mdir):
            continue
        for f in fs.find(storage.filesystem(mdir)[1]):
            m = read_marker(proto + f if proto and not f.startswith(proto) else f)
            if m and m["output"]:  # a damaged marker names no data object: only the marker goes
                _remove(m["output"])
            fs.rm_file(f)
    for name in ("_manifest.json", RUN_FILE):
        _remove(storage.join(output_uri, name))


def completed_shard(output_uri: str, shard_out_uri: str, config_hash: str, fingerprint: dict,
                    claims_digest: str | None = None) -> dict | None:
    """The done marker of a shard when it matches this config and input version (and, given
    ``claims_digest``, the duplicate ids it was made with: draft shards,
    ``ShardJob.claims_digest``), else None."""
    m = read_marker(marker_uri(output_uri, shard_out_uri))
    if (m and m.get("config_hash") == config_hash and m.get("fingerprint") == fingerprint
            and m["result"].get("status") == "ok" and storage.exists(shard_out_uri)
            and (claims_digest is None or m["result"].get("claims_digest") == claims_digest)):
        return m
    return None


def mark_done(output_uri: str, shard_out_uri: str, config_hash: str, fingerprint: dict,
              run_id: str, result: dict) -> None:
    """Write the shard's done marker (after its data object is complete)."""
    body = {"config_hash": config_hash, "fingerprint": fingerprint, "run_id": run_id,
            "output": shard_out_uri, "finished": dt.datetime.now(dt.timezone.utc).isoformat(),
            "result": result}
    storage.write_bytes_atomic(marker_uri(output_uri, shard_out_uri), json.dumps(body, indent=2).encode())


def remove_stale_temporaries(output_uri: str) -> int:
    """Delete temporary files left by a killed local writer (``.<hex>.tmp``,
    :func:`storage.write_bytes_atomic`) anywhere under ``output_uri``; returns how many were
    removed (0 when the prefix does not exist)."""
    fs, path = storage.filesystem(output_uri)
    if not fs.exists(path):
        return 0
    n = 0
    for f in fs.find(path):
        base = f.rsplit("/", 1)[-1]
        if base.startswith(".") and base.endswith(".tmp"):
            fs.rm_file(f)
            n += 1
    return n


def discard(output_uri: str, shard_out_uri: str) -> None:
    """Remove a shard's done marker, then its data object (used for intermediate draft shards
    once the final output is done; marker first, so a crash never leaves a marker without data)."""
    _remove(marker_uri(output_uri, shard_out_uri))
    _remove(shard_out_uri)
