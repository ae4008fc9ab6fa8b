"""Reading a retrieval corpus for ``index build``: one Parquet file or a prefix of Parquet shards
(local or ``s3://``), checked up front from the shards' footers and ``doc_id`` columns, then
streamed in record batches.

A corpus row is a passage: ``doc_id`` (a string or an integer, read as its decimal string;
unique across the corpus), ``text`` (a string), optional ``title`` (a string), and, when the
corpus brings its own embeddings, a ``fixed_size_list`` column of floats named by
``--embedding-column``. Every shard must have the same columns of the same kinds as the first.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core import storage
from ..core.storage import input_fingerprint
from ..core.schema import DOC_FIELDS, STRING_TYPES, InputSchemaError
from .layout import IndexBuildError

_STRING_INDEX = re.compile(r"Invalid UTF8 sequence at string index (\d+)")
_BLANK = r"^[\s\p{Z}\p{Cf}]*$"
"""A ``doc_id`` of nothing visible: empty, white space, invisible format characters (RE2, Arrow's regex)."""


@dataclass(frozen=True)
class CorpusShard:
    """One Parquet file of a corpus: its URI, the name of its work files (``key``, a hash of its
    path), its row count (from the footer), its fingerprint (size and ETag or mtime) and the
    width of its embedding column (None without one)."""

    uri: str
    key: str
    rows: int
    fingerprint: dict
    width: int | None = None


def _is_string(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _is_string(t.value_type) and not pa.types.is_null(t.value_type)
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
            or pa.types.is_null(t))


def list_corpus(corpus_uri: str) -> list[str]:
    """The Parquet shards of a corpus: ``corpus_uri`` itself when it is a file, else the
    ``.parquet`` files under the prefix, sorted, by the rules a run lists its input by
    (:func:`storage.parquet_files`: ``.``/``_`` names and files inside ``.``/``_`` directories,
    such as Spark's ``_temporary/``, are not shards; each skipped file is logged as a warning
    with its reason); each used as listed, never parsed again as a URL or glob.

    Raises:
        FileNotFoundError: nothing at ``corpus_uri``.
        IndexBuildError: a prefix without any ``.parquet`` file."""
    fs, path = storage.filesystem(corpus_uri)
    if not fs.exists(path):
        raise FileNotFoundError(f"corpus {corpus_uri!r} does not exist")
    if fs.isfile(path):
        return [corpus_uri]
    shards, skipped = storage.parquet_files(corpus_uri)
    for s in skipped:
        logging.getLogger(__name__).warning("index build: skipping %s: %s", s["input"], s["reason"])
    if not shards:
        raise IndexBuildError(f"{corpus_uri}: no .parquet file under this prefix")
    return shards


def open_shard(uri: str) -> pq.ParquetFile:
    """The Parquet file at ``uri``, opened for reading its footer and streaming its batches.

    Raises:
        FileNotFoundError: nothing at ``uri`` (or a link to nothing).
        IndexBuildError: not a Parquet file (a FIFO, socket or device is not opened:
            :func:`storage.check_regular_file`)."""
    fs, path = storage.filesystem(uri)
    try:
        storage.check_regular_file(uri)
        return pq.ParquetFile(fs.open(path, "rb"))
    except (pa.ArrowInvalid, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise IndexBuildError(f"{uri}: not a Parquet file ({e})") from None


def _kind(name: str, t: pa.DataType) -> str:
    """What a used column is, for comparing shards: ``string`` or ``integer`` (``doc_id``), or
    the embedding column's ``fixed_size_list<float, d>``."""
    if pa.types.is_fixed_size_list(t):
        return f"fixed_size_list<float, {t.list_size}>"
    return "integer" if pa.types.is_integer(t) else "string"


def check_schema(schema: pa.Schema, uri: str, embedding_column: str | None, dim: int | None = None) -> dict[str, str]:
    """Check the used columns of one shard's schema; returns column -> kind (:func:`_kind`).

    ``doc_id`` and ``text`` are required, ``title`` optional; ``doc_id`` a string or an
    integer, ``title`` and ``text`` strings (any Arrow layout); the embedding column, when
    named, a ``fixed_size_list`` of floats of width ``dim`` (the embedding model's).

    Raises:
        InputSchemaError: a used column missing, repeated or of another type; the embedding
            column of another width than ``dim``."""
    names = schema.names
    used = [*DOC_FIELDS, *([embedding_column] if embedding_column else [])]
    for col in used:
        if names.count(col) > 1:
            raise InputSchemaError(uri, col, f"appears {names.count(col)} times; a column name must be unique")
    for col in ("doc_id", "text", *([embedding_column] if embedding_column else [])):
        if col not in names:
            raise InputSchemaError(uri, col, f"required column missing (have: {sorted(names)})")
    kinds = {}
    for col in DOC_FIELDS:
        if col not in names:
            continue
        t = schema.field(col).type
        if not (_is_string(t) or (col == "doc_id" and pa.types.is_integer(t))):
            accepted = STRING_TYPES + (", or an integer type" if col == "doc_id" else "")
            raise InputSchemaError(uri, col, f"got {t}; accepted: {accepted}")
        kinds[col] = _kind(col, t)
    if embedding_column:
        t = schema.field(embedding_column).type
        if not (pa.types.is_fixed_size_list(t) and pa.types.is_floating(t.value_type)):
            raise InputSchemaError(uri, embedding_column, f"got {t}; embeddings need a fixed_size_list "
                                   "of floats (pyarrow: pa.list_(pa.float32(), width))")
        if dim is not None:
            check_width(t.list_size, dim, uri, embedding_column)
        kinds[embedding_column] = _kind(embedding_column, t)
    return kinds


def check_width(width: int, dim: int, uri: str, embedding_column: str) -> None:
    """Refuse vectors of another width than the embedding model's ``dim``.

    Raises:
        InputSchemaError: naming the file, the column and both widths."""
    if width != dim:
        raise InputSchemaError(uri, embedding_column, f"vectors of width {width}; the embedding model makes "
                               f"{dim} (--embedding-model names the model that made them; queries are "
                               "embedded with it and searched against them)")


def shard_key(corpus_uri: str, uri: str) -> str:
    """The name of a shard's work files: a hash of its path below the corpus prefix, so two
    shards of one name in different directories do not collide."""
    rel = uri[len(corpus_uri):] if uri.startswith(corpus_uri) else uri
    return "shard-" + hashlib.sha1(rel.encode()).hexdigest()[:16]


def preflight(corpus_uri: str, embedding_column: str | None, dim: int | None = None) -> list[CorpusShard]:
    """List and check every shard before anything is embedded: each is Parquet, has the used
    columns of accepted types and the same kinds as the first shard (:func:`check_schema`; the
    embedding column's width checked against ``dim`` when given), its strings are UTF-8 and its
    vectors whole (one streamed read of its rows, :func:`batches`), no ``doc_id`` is null, empty
    (nothing visible: :data:`_BLANK`) or repeated within or across shards, and the corpus has
    rows. Memory: a record batch, and the corpus's ``doc_id`` column (Arrow strings) for the
    duplicate check.

    Raises:
        FileNotFoundError: nothing at ``corpus_uri``.
        IndexBuildError: not Parquet, no shards, a shard whose schema differs from the first's.
        InputSchemaError: see :func:`check_schema` and :func:`batches`; a null, empty or
            repeated ``doc_id``; no rows."""
    uris = list_corpus(corpus_uri)
    shards, first = [], None
    ids, where = [], []
    for n, uri in enumerate(uris):
        pf = open_shard(uri)
        kinds = check_schema(pf.schema_arrow, uri, embedding_column, dim)
        if first is None:
            first = (uri, kinds)
        elif kinds != first[1]:
            raise IndexBuildError(f"{uri}: schema differs from the corpus's first shard {first[0]}: "
                                  + _schema_difference(kinds, first[1]))
        width = pf.schema_arrow.field(embedding_column).type.list_size if embedding_column else None
        shard = CorpusShard(uri, shard_key(corpus_uri, uri), pf.metadata.num_rows, input_fingerprint(uri), width)
        col = pa.chunked_array([b.column("doc_id") for b, _ in batches(shard, 65_536, embedding_column, pf)],
                               pa.string())
        nulls = pc.is_null(col).to_numpy(zero_copy_only=False)
        if nulls.any():
            raise InputSchemaError(uri, "doc_id", f"row {int(np.argmax(nulls))}: null; every passage needs an id")
        blank = pc.match_substring_regex(col, _BLANK).to_numpy(zero_copy_only=False)
        if blank.any():
            row = int(np.argmax(blank))
            raise InputSchemaError(uri, "doc_id", f"row {row}: {col[row].as_py()!r} is empty (nothing visible); "
                                   "every passage needs an id")
        ids.append(col)
        where.append(n)
        shards.append(shard)
    if not any(s.rows for s in shards):
        raise InputSchemaError(uris[0], "doc_id", "no rows: an index over an empty corpus retrieves nothing")
    _check_unique(ids, [s.uri for s in shards])
    return shards


def _schema_difference(kinds: dict, first: dict) -> str:
    for col in sorted(kinds.keys() | first.keys()):
        if col not in kinds:
            return f"column '{col}' missing (the first shard has it: {first[col]})"
        if col not in first:
            return f"column '{col}' is not in the first shard"
        if kinds[col] != first[col]:
            return f"column '{col}' is {kinds[col]} here, {first[col]} there"
    return "the used columns differ"


def _check_unique(ids: list[pa.ChunkedArray], uris: list[str]) -> None:
    """Raise on the first ``doc_id`` held twice, naming both places (Arrow kernels over the
    ids of all shards; no Python object per passage)."""
    if not ids:
        return
    shard_of = np.concatenate([np.full(len(c), i, np.int32) for i, c in enumerate(ids)])
    row_of = np.concatenate([np.arange(len(c), dtype=np.int64) for c in ids])
    table = pa.table({"id": pa.chunked_array([ch for c in ids for ch in c.chunks], pa.string()),
                      "i": pa.array(np.arange(len(shard_of), dtype=np.int64))})
    counts = table.group_by("id").aggregate([("i", "min"), ("i", "count")])
    dup = counts.filter(pc.greater(counts.column("i_count"), 1))
    if dup.num_rows == 0:
        return
    firsts = dup.column("i_min").to_numpy()
    a = int(firsts.min())
    doc_id = table.column("id")[a].as_py()
    same = np.flatnonzero(pc.equal(table.column("id"), doc_id).to_numpy(zero_copy_only=False))
    b = int(same[same > a][0])
    sa, sb = int(shard_of[a]), int(shard_of[b])
    if sa == sb:
        raise InputSchemaError(uris[sb], "doc_id", f"duplicate doc_id {doc_id!r} (rows {row_of[a]} and {row_of[b]})")
    raise InputSchemaError(uris[sb], "doc_id", f"duplicate doc_id {doc_id!r} (row {row_of[b]}; also "
                           f"{uris[sa]} row {row_of[a]}): doc_ids must be unique across the corpus")


def _utf8(arr: pa.Array, uri: str, name: str, offset: int) -> None:
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid as e:
        m = _STRING_INDEX.search(str(e))
        at = f"row {offset + int(m.group(1))}: " if m else ""
        raise InputSchemaError(uri, name, f"{at}not valid UTF-8 (Arrow: {e})") from None


def batches(shard: CorpusShard, batch_rows: int, embedding_column: str | None, pf: pq.ParquetFile | None = None
            ) -> Iterator[tuple[pa.RecordBatch, np.ndarray | None]]:
    """The shard's rows in order, ``batch_rows`` at a time: a record batch of ``doc_id``,
    ``title``, ``text`` as strings (a missing ``title`` null) and, with ``embedding_column``,
    the batch's vectors as a float32 array (rows, d); else None. ``pf``: the shard already
    open.

    Raises:
        InputSchemaError: a string that is not UTF-8, a null embedding or one with a null or
            non-finite value (naming the row)."""
    pf = pf or open_shard(shard.uri)
    names = pf.schema_arrow.names
    columns = [c for c in DOC_FIELDS if c in names] + ([embedding_column] if embedding_column else [])
    offset = 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
        n = batch.num_rows
        cols = {}
        for c in DOC_FIELDS:
            if c not in names:
                cols[c] = pa.nulls(n, pa.string())
                continue
            arr = batch.column(c).cast(pa.string())
            _utf8(arr, shard.uri, c, offset)
            cols[c] = arr
        vectors = None
        if embedding_column:
            emb = batch.column(embedding_column)
            if emb.null_count:
                row = int(np.argmax(pc.is_null(emb).to_numpy(zero_copy_only=False)))
                raise InputSchemaError(shard.uri, embedding_column, f"row {offset + row}: null; every passage needs a vector")
            width = emb.type.list_size
            vectors = np.asarray(emb.flatten().to_numpy(zero_copy_only=False), dtype=np.float32).reshape(n, width)
            bad = ~np.isfinite(vectors).all(axis=1)
            if bad.any():
                raise InputSchemaError(shard.uri, embedding_column, f"row {offset + int(np.argmax(bad))}: "
                                       "a null or non-finite value in the vector")
        yield pa.record_batch([cols[c] for c in DOC_FIELDS], names=list(DOC_FIELDS)), vectors
        offset += n
