"""Reading a run's output for the report: the trusted output shards as one polars frame.

Only data objects that have a done marker in ``_shards/`` or are listed ``ok`` in
``_manifest.json`` are read (docs/data-contract.md, "What the output prefix holds"); ``_drafts/``, ``_report/`` and ``_shards/``
are never read as data. Each shard is a lazy polars scan (:func:`scan_shard`): only the
report's columns are fetched (projection pushdown), local or S3; listed paths are opened as
they are, never re-parsed as URL or glob.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import polars as pl

from ..core import storage
from ..core.polars_s3 import polars_s3_options
from .manifest import check_costs, check_manifest, manifest_field
from .layout import MANIFEST, RUN_FILE, SHARDS_DIR, marker_uri

log = logging.getLogger(__name__)

COLUMNS = ("query_id", "task", "answer", "score", "score_draft", "score_self_consistency",
           "score_self_reflection", "low_confidence", "fast_path", "drafts", "flags", "error",
           "correct", "exact_match", "f1", "mode")
OPTIONAL_COLUMNS = ("error_reason", "answer_source", "draft_rounds", "verifier_drafts_deduplicated",
                    "confidence", "reused_answer_source", "label_probability", "gold")
"""Read when a shard has them (outputs written before these columns were added lack them):
``error_reason`` the row error's code, ``answer_source`` which pass answered a row
(``selection.fallback``), ``draft_rounds`` adaptive drafting's rounds (``sampling.adaptive``),
``verifier_drafts_deduplicated`` verifier passes saved (``verifier.deduplicate_drafts``),
``confidence`` the calibrated probability of being right (``selection.confidence: calibrated``),
``reused_answer_source`` the pass that answered a row reused from an earlier run (:mod:`specrag_batch.run.reuse`).
``label_probability`` the answer's probability under the label distribution
(``selection.label_distribution``), ``gold`` the gold answers (the confusion matrix).
The rationale's text is not read (it is most of a shard's bytes); the selected draft's length
in drafter tokens is ``draft_tokens`` (:func:`with_mean_logprob`)."""


ESSENTIAL_COLUMNS = ("query_id", "task", "answer", "error")
"""Report columns a shard must have (refused naming shard and column when missing): without
them a row cannot be named, placed in its task, or told answered from failed. Another
:data:`COLUMNS` missing is read as null (a shard without ``correct`` counts as ungraded) and
the report lists it (``columns_read_as_null``)."""


def with_marker_usage(manifest: dict, prefix: str) -> dict:
    """``manifest`` as the report costs it. A manifest written before ``cost`` existed recorded
    ``engines: {}`` for resumed shards; their done markers under ``prefix`` kept the usage, so
    it is taken from there (``run.cost_of`` then sums the output's whole usage). A marker that
    is gone, not a JSON object, or without a well-formed ``result.engines`` leaves its shard as
    it was (the report names it under ``engines_unrecorded``). A manifest with ``cost`` is
    returned as it is."""
    if "cost" in manifest:
        return manifest
    shards = []
    for i, s in enumerate(manifest.get("shards") or []):
        if isinstance(s, dict) and s.get("resumed") and not s.get("engines") and isinstance(s.get("output"), str):
            uri = marker_uri(prefix, s["output"])
            try:
                m = storage.read_json_object(uri)
                eng = ((m or {}).get("result") or {}).get("engines")
                check_costs({"engines": eng}, uri, "result.")
            except (ValueError, AttributeError, OSError) as e:
                log.warning("%s: engine usage of resumed shard %d not read: %s", uri, i, e)
                eng = None
            if eng:
                s = {**s, "engines": eng}
        shards.append(s)
    return {**manifest, "shards": shards}


def listed_outputs(prefix: str, manifest: dict | None = None) -> list[str]:
    """Data objects of ``prefix`` that a done marker or the manifest lists as finished, sorted,
    whether or not they exist: each ``_shards/<name>.json`` done marker with status ``ok``
    names ``<prefix>/<name>``, and each manifest shard with status ``ok`` its output's name
    under ``prefix``. Draft shards (``_drafts/``) are never included.

    Raises:
        ValueError: a done marker that is not a JSON object (or whose ``result`` is not one),
            naming it."""
    names: set[str] = set()
    mdir = storage.join(prefix, SHARDS_DIR)
    if storage.exists(mdir):
        fs, path = storage.filesystem(mdir)
        for f in fs.ls(path, detail=False):
            base = f.rstrip("/").rsplit("/", 1)[-1]
            if not base.endswith(".json") or base.startswith("."):
                continue
            fs_path = f if "://" not in f else storage.split_uri(f)[1]
            with fs.open(fs_path, "rb") as fh:
                uri = storage.join(mdir, base)
                m = storage.json_object(fh.read(), uri)
            if (manifest_field(m, "result", dict, uri) or {}).get("status") == "ok":
                names.add(base[:-len(".json")])
    for s in (manifest or {}).get("shards") or []:
        if s.get("status") == "ok" and s.get("output"):
            names.add(s["output"].rsplit("/", 1)[-1])
    return sorted(storage.join(prefix, n) for n in names)


def trusted_outputs(prefix: str, manifest: dict | None = None) -> list[str]:
    """:func:`listed_outputs` that exist (readers may trust them)."""
    return [u for u in listed_outputs(prefix, manifest) if storage.exists(u)]


def scan_shard(uri: str, s3_options: dict[str, str] | None = None) -> pl.LazyFrame:
    """Lazy scan of one listed Parquet object (local path or URI): nothing is read until the
    frame is collected, and then only the selected columns' chunks (plus the footer).

    * local: ``pl.scan_parquet(path, glob=False)``.
    * ``s3://``/``s3a://``: polars' native reader on the exact key (``glob=False``: a key
      holding ``*``, ``?``, ``[``, ``#``, ``%`` or spaces names that one object; ranged GETs of
      the footer and the selected column chunks), with ``s3_options``
      (:func:`specrag_batch.core.polars_s3_options`, computed from the uri when not given)
      so it uses the endpoint, credentials and region the product's s3fs file system uses;
      polars' own credential lookup is off (``credential_provider=None``), the options decide.
    * any other fsspec protocol: a pyarrow dataset on the project's fsspec file system
      (``pyarrow.fs.FSSpecHandler``) through ``pl.scan_pyarrow_dataset``, also lazy with
      projection pushdown; the path is one file, never globbed.

    polars' native S3 reader rather than fsspec file handles or a pyarrow dataset on s3fs: it
    reaches any S3-compatible endpoint (MinIO, the tests' moto server) with the mapped options,
    fetches the selected column ranges concurrently, and the s3fs settings the product uses
    map onto its options (:func:`~specrag_batch.core.polars_s3_options`). It fetches a small
    object (under about 2 MB) whole in one request, its own choice. Hive partitioning is off:
    directory names such as ``date=2026-11-28/`` never become columns. Nested fields are not
    pruned: a selected ``drafts`` column (list of structs) is read whole.

    Raises:
        polars.exceptions.ComputeError: on collect, when the object cannot be read (missing,
            access denied, not Parquet)."""
    proto, path = storage.split_uri(uri)
    if proto == "file":
        return pl.scan_parquet(path, glob=False, hive_partitioning=False)
    if proto in storage.S3_PROTOCOLS:
        return pl.scan_parquet(f"s3://{path}", glob=False, hive_partitioning=False,
                               storage_options=s3_options if s3_options is not None else polars_s3_options(uri),
                               credential_provider=None)
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs, path = storage.filesystem(uri)
    return pl.scan_pyarrow_dataset(ds.dataset(path, filesystem=PyFileSystem(FSSpecHandler(fs)), format="parquet"))


@dataclass
class RunData:
    """Output rows of the trusted shards (``shards``, read) plus the run's manifest and config
    (dicts)."""

    prefix: str
    rows: pl.DataFrame
    shards: list[str]
    manifest: dict | None
    config: dict = field(default_factory=dict)
    shards_missing: list[str] = field(default_factory=list)
    """Shards listed as finished whose data object is gone (not read)."""
    columns_read_as_null: dict[str, list[str]] = field(default_factory=dict)
    """Shard -> report columns (:data:`COLUMNS`) it lacks, read as null."""


def with_mean_logprob(df: pl.DataFrame, selection: dict | None = None) -> pl.DataFrame:
    """Add ``mean_logprob`` (:func:`specrag_batch.stages.selection.mean_logprob` of the selected draft,
    nats per token) and ``draft_tokens`` (the selected draft's ``tokens_draft``: drafter tokens
    of its β and α) to output rows. The selected draft is the row's draft whose three score
    terms and answer equal the row's; terms switched off in ``selection`` (the run config's
    ``selection`` mapping) are left out, and so are ρ_SC/ρ_SR on fast-path rows and in
    standard mode, as ``select`` does."""
    sel = selection or {}
    terms = ("score_draft", "score_self_consistency", "score_self_reflection", "answer")
    toks = ("tokens_draft", "tokens_answer", "tokens_rationale")
    d = (df.select(pl.int_range(pl.len()).alias("_row"), *terms, "drafts").explode("drafts")
         .filter(pl.col("drafts").is_not_null())
         .with_columns([pl.col("drafts").struct.field(n).alias(f"_d_{n}") for n in (*terms, *toks)])
         .filter(pl.all_horizontal([pl.col(f"_d_{n}").eq_missing(pl.col(n)) for n in terms]))
         .group_by("_row", maintain_order=True).first()
         .select("_row", *[pl.col(f"_d_{n}").alias(f"_{n}") for n in toks]))
    out = df.with_columns(pl.int_range(pl.len()).alias("_row")).join(d, on="_row", how="left")
    full = (pl.col("mode") != "standard") & ~pl.col("fast_path").fill_null(False)
    parts = []
    if sel.get("use_draft_score", True):
        parts.append((pl.lit(True), pl.col("score_draft") / pl.col("_tokens_draft")))
    if sel.get("use_self_consistency", True):
        parts.append((full, pl.col("score_self_consistency")
                      / (pl.col("_tokens_answer").fill_null(0) + pl.col("_tokens_rationale").fill_null(0))))
    if sel.get("use_self_reflection", True):
        parts.append((full, pl.col("score_self_reflection")))
    total = pl.lit(0.0)
    for on, v in parts:
        v = pl.when(v.is_finite()).then(v)  # a zero token count gives inf/NaN: no value
        total = total + pl.when(on).then(v).otherwise(0.0)
    return out.with_columns(mean_logprob=pl.when(pl.col("score").is_not_null()).then(total)) \
        .rename({"_tokens_draft": "draft_tokens"}).drop("_row", "_tokens_answer", "_tokens_rationale")


@cache
def _output_types() -> pl.Schema:
    """:data:`specrag_batch.core.schema.OUTPUT_SCHEMA` as polars types."""
    from ..core.schema import OUTPUT_SCHEMA

    return pl.from_arrow(OUTPUT_SCHEMA.empty_table()).schema


def _conformed(e: pl.Expr, have: pl.DataType, want: pl.DataType, where: str) -> pl.Expr:
    """``e`` (of type ``have``) cast to ``want``, the output schema's type, when no value
    changes meaning: all-null (pandas' column of None), string / categorical / integer to
    string, any integer or float to float, integer to integer (an overflow fails on collect),
    lists element-wise, structs field by field (a field the shard lacks is null, one the
    output has no use for is dropped: older outputs' drafts lack later fields).

    Raises:
        ValueError: another type (e.g. a string score, a boolean as a number), naming
            ``where`` (shard and column)."""
    if have == want:
        return e
    if have == pl.Null:
        return e.cast(want)
    ok = False
    if want == pl.String:
        ok = have in (pl.String, pl.Categorical) or isinstance(have, pl.Enum) or have.is_integer()
    elif want.is_float():
        ok = have.is_integer() or have.is_float()
    elif want.is_integer():
        ok = have.is_integer()
    elif isinstance(want, pl.List) and isinstance(have, (pl.List, pl.Array)):
        inner = _conformed(pl.element(), have.inner, want.inner, f"{where} (list element)")
        return (e.cast(pl.List(have.inner)) if isinstance(have, pl.Array) else e).list.eval(inner)
    elif isinstance(want, pl.Struct) and isinstance(have, pl.Struct):
        got = {f.name: f.dtype for f in have.fields}
        if got.keys() & {f.name for f in want.fields}:
            return pl.struct([(_conformed(e.struct.field(f.name), got[f.name], f.dtype, f"{where} field '{f.name}'")
                               if f.name in got else pl.lit(None, f.dtype)).alias(f.name) for f in want.fields])
    if not ok:
        raise ValueError(f"{where}: got {have}; the output schema has {want}")
    return e.cast(want)


def _shard_frame(uri: str, s3_options: dict[str, str] | None) -> tuple[pl.LazyFrame, list[str]]:
    """One trusted shard as a lazy frame of the report's columns (:data:`COLUMNS`, then
    :data:`OPTIONAL_COLUMNS`) in the output schema's types (:func:`_conformed`), and the
    :data:`COLUMNS` it lacks, read as null. Only the footer is read here.

    Raises:
        ValueError: not Parquet (or unreadable), an :data:`ESSENTIAL_COLUMNS` column missing,
            or a column of a type the output schema cannot take; naming the shard (and column)."""
    lf = scan_shard(uri, s3_options)
    try:
        have = lf.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as e:
        raise ValueError(f"{uri}: not a readable Parquet output shard ({e})") from None
    for c in ESSENTIAL_COLUMNS:
        if c not in have:
            raise ValueError(f"{uri}: column '{c}': missing (an output shard has {', '.join(ESSENTIAL_COLUMNS)})")
    types = _output_types()
    cols = [_conformed(pl.col(c), have[c], types[c], f"{uri}: column '{c}'").alias(c) if c in have
            else pl.lit(None, types[c]).alias(c) for c in (*COLUMNS, *OPTIONAL_COLUMNS)]
    return lf.select(cols), [c for c in COLUMNS if c not in have]


def load_rows(prefix: str) -> RunData:
    """Read a run's trusted output shards under ``prefix`` (local path or URI): every shard
    the manifest or a done marker lists as finished (:func:`listed_outputs`), each a lazy scan
    conformed to the output schema (:func:`_shard_frame`), collected together. A listed shard
    whose object is gone is not read, logged as a warning and kept in
    :attr:`RunData.shards_missing`; report columns a shard lacks are null, kept in
    :attr:`RunData.columns_read_as_null`. Both go into the report.

    Raises:
        FileNotFoundError: ``prefix`` does not exist, lists no finished shard (no done
            marker, no ``ok`` manifest entry), or every listed one is gone (naming them).
        ValueError: an empty ``prefix`` or one that is a local file; the manifest,
            ``_run.json`` or a done marker is not a JSON object or has
            a field of the wrong type (naming the file and field; also the recorded config's
            ``claim_labels``, which the report reads); a listed shard is a
            directory, not Parquet, lacks an essential column, has a column of another type,
            or its values cannot be cast (naming the shard and column)."""
    if not prefix.strip():
        raise ValueError("an empty output prefix; give the run's output directory or URI")
    prefix = storage.normalize_uri(prefix)
    if storage.split_uri(prefix)[0] == "file" and Path(storage.split_uri(prefix)[1]).is_file():
        raise ValueError(f"{prefix!r}: a file, not a run's output prefix (the directory its shards and "
                         f"{MANIFEST} are in)")
    muri = storage.join(prefix, MANIFEST)
    manifest = storage.read_json_object(muri)
    if manifest is not None:
        check_manifest(manifest, muri)
    run_uri = storage.join(prefix, RUN_FILE)
    config = (manifest or {}).get("config") or manifest_field(storage.read_json_object(run_uri) or {}, "config", dict, run_uri) or {}
    labels = config.get("claim_labels") if isinstance(config, dict) else None
    if labels is not None and not (isinstance(labels, list) and all(isinstance(x, str) for x in labels)):
        where = muri if (manifest or {}).get("config") else run_uri
        raise ValueError(f"{where}: field 'config.claim_labels': expected a list of label strings, "
                         f"got {type(labels).__name__} {str(labels)[:80]!r}")
    listed = listed_outputs(prefix, manifest)
    if not listed and not storage.exists(prefix):
        raise FileNotFoundError(f"{prefix!r} does not exist")
    if not listed:
        raise FileNotFoundError(f"{prefix!r}: no finished output shard (no done marker in "
                                f"{SHARDS_DIR}/ and no shard listed ok in {MANIFEST})")
    shards, missing = [], []
    for u in listed:
        fs, path = storage.filesystem(u)
        try:
            kind = fs.info(path).get("type")
        except FileNotFoundError:
            missing.append(u)
            log.warning("%s: listed as a finished shard, but its data object is gone: not read", u)
            continue
        if kind == "directory":
            raise ValueError(f"{u}: a directory, not a Parquet output shard (listed as finished)")
        shards.append(u)
    if not shards:
        raise FileNotFoundError(f"{prefix!r}: every finished output shard is gone: {', '.join(missing)}")
    s3_options = polars_s3_options(prefix) if storage.split_uri(prefix)[0] in storage.S3_PROTOCOLS else None
    frames, nulls = [], {}
    for u in shards:
        lf, absent = _shard_frame(u, s3_options)
        frames.append(lf)
        if absent:
            nulls[u] = absent
    try:
        rows = pl.concat(frames, how="vertical").collect()
    except pl.exceptions.PolarsError as e:  # a value the cast refuses, a corrupt page: which shard?
        for u, lf in zip(shards, frames):
            try:
                lf.collect()
            except pl.exceptions.PolarsError as e1:
                raise ValueError(f"{u}: cannot be read as the output schema ({e1})") from None
        raise ValueError(f"{prefix}: shards cannot be read together ({e})") from None
    return RunData(prefix, with_mean_logprob(rows, config.get("selection")), shards, manifest, config,
                   missing, nulls)
