"""Reading a run's output for the report: the trusted output shards as one polars frame.

Only data objects that have a done marker in ``_shards/`` or are listed ``ok`` in
``_manifest.json`` are read (README "Operations"); ``_drafts/``, ``_report/`` and ``_shards/``
are never read as data. Each shard is a lazy polars scan (:func:`scan_shard`): only the
report's columns are fetched (projection pushdown), local or S3; listed paths are opened as
they are, never re-parsed as URL or glob.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import polars as pl

from .. import storage
from ..resume import RUN_FILE, SHARDS_DIR

MANIFEST = "_manifest.json"
COLUMNS = ("query_id", "task", "answer", "score", "score_draft", "score_self_consistency",
           "score_self_reflection", "low_confidence", "fast_path", "drafts", "flags", "error",
           "correct", "exact_match", "f1", "mode")
OPTIONAL_COLUMNS = ("error_reason", "answer_source", "draft_rounds", "verifier_drafts_deduplicated")
"""Read when a shard has them (outputs written before these columns were added lack them):
``error_reason`` the row error's code, ``answer_source`` which pass answered a row
(``selection.fallback``), ``draft_rounds`` adaptive drafting's rounds (``sampling.adaptive``),
``verifier_drafts_deduplicated`` verifier passes saved (``verifier.deduplicate_drafts``)."""


def _read_json(uri: str) -> dict | None:
    try:
        return json.loads(storage.read_bytes(uri))
    except FileNotFoundError:
        return None


def trusted_outputs(prefix: str, manifest: dict | None = None) -> list[str]:
    """Data objects of ``prefix`` that readers may trust, sorted: each ``_shards/<name>.json``
    done marker with status ``ok`` names ``<prefix>/<name>``, and each manifest shard with
    status ``ok`` its output's name under ``prefix``; only objects that exist. Draft shards
    (``_drafts/``) are never included."""
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
                m = json.loads(fh.read())
            if m.get("result", {}).get("status") == "ok":
                names.add(base[:-len(".json")])
    for s in (manifest or {}).get("shards", []):
        if s.get("status") == "ok" and s.get("output"):
            names.add(s["output"].rsplit("/", 1)[-1])
    return [u for u in sorted(storage.join(prefix, n) for n in names) if storage.exists(u)]


def scan_shard(uri: str, s3_options: dict[str, str] | None = None) -> pl.LazyFrame:
    """Lazy scan of one listed Parquet object (local path or URI): nothing is read until the
    frame is collected, and then only the selected columns' chunks (plus the footer).

    * local: ``pl.scan_parquet(path, glob=False)``.
    * ``s3://``/``s3a://``: polars' native reader on the exact key (``glob=False``: a key
      holding ``*``, ``?``, ``[``, ``#``, ``%`` or spaces names that one object; ranged GETs of
      the footer and the selected column chunks), with ``s3_options``
      (:func:`specrag_batch.storage.polars_s3_options`, computed from the uri when not given)
      so it uses the endpoint, credentials and region the product's s3fs file system uses;
      polars' own credential lookup is off (``credential_provider=None``), the options decide.
    * any other fsspec protocol: a pyarrow dataset on the project's fsspec file system
      (``pyarrow.fs.FSSpecHandler``) through ``pl.scan_pyarrow_dataset``, also lazy with
      projection pushdown; the path is one file, never globbed.

    polars' native S3 reader rather than fsspec file handles or a pyarrow dataset on s3fs: it
    reaches any S3-compatible endpoint (MinIO, the tests' moto server) with the mapped options,
    fetches the selected column ranges concurrently, and the s3fs settings the product uses
    map onto its options (:func:`~specrag_batch.storage.polars_s3_options`). It fetches a small
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
                               storage_options=s3_options if s3_options is not None else storage.polars_s3_options(uri),
                               credential_provider=None)
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs, path = storage.filesystem(uri)
    return pl.scan_pyarrow_dataset(ds.dataset(path, filesystem=PyFileSystem(FSSpecHandler(fs)), format="parquet"))


@dataclass
class RunData:
    """Output rows of the trusted shards plus the run's manifest and config (dicts)."""

    prefix: str
    rows: pl.DataFrame
    shards: list[str]
    manifest: dict | None
    config: dict = field(default_factory=dict)


def with_mean_logprob(df: pl.DataFrame, selection: dict | None = None) -> pl.DataFrame:
    """Add ``mean_logprob`` (:func:`specrag_batch.selection.mean_logprob` of the selected draft,
    nats per token) to output rows. The selected draft is the row's draft whose three score
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
        .drop("_row", "_tokens_draft", "_tokens_answer", "_tokens_rationale")


def load_rows(prefix: str) -> RunData:
    """Read a run's trusted output shards under ``prefix`` (local path or URI).

    Raises:
        FileNotFoundError: ``prefix`` holds no trusted shard (no done marker, no ``ok``
            manifest entry)."""
    prefix = storage.normalize_uri(prefix)
    manifest = _read_json(storage.join(prefix, MANIFEST))
    config = (manifest or {}).get("config") or (_read_json(storage.join(prefix, RUN_FILE)) or {}).get("config") or {}
    shards = trusted_outputs(prefix, manifest)
    if not shards:
        raise FileNotFoundError(f"{prefix!r}: no finished output shard (no done marker in "
                                f"{SHARDS_DIR}/ and no shard listed ok in {MANIFEST})")
    s3_options = storage.polars_s3_options(prefix) if storage.split_uri(prefix)[0] in storage.S3_PROTOCOLS else None
    frames = []
    for u in shards:
        lf = scan_shard(u, s3_options)
        have = lf.collect_schema().names()
        frames.append(lf.select([c for c in (*COLUMNS, *OPTIONAL_COLUMNS) if c in have]))
    rows = pl.concat(frames, how="diagonal_relaxed").collect()
    return RunData(prefix, with_mean_logprob(rows, config.get("selection")), shards, manifest, config)
