"""The index directory on disk or S3: its files, ``meta.json`` (the commit point), the work area
of a build, local copies of a remote index, and the errors of building and opening one.

```
<index>/
  meta.json                  written last: an index exists once this names its data directory
  data-<build id>/
    dense.faiss              FAISS index (inner product over L2-normalised embeddings)
    passages.arrow           doc_id, title, text in index order (Arrow IPC, memory-mapped)
    bm25/                    bm25s index (CSC score matrix, vocabulary, tokenizer)
  _build/                    a build in progress: per corpus shard its embeddings (.npy),
                             passages (.arrow) and done marker (_done/<shard>.json)
```

A build writes into a new ``data-<build id>/`` and the work area, then replaces ``meta.json``
in one atomic write; only then are the previous data directory and the work area removed. A
build that fails or is killed leaves the previous index (if any) as it was. Indexes written
before this layout (``index.faiss``, ``docs.parquet`` and a ``meta.json`` without ``format``)
still load, for dense retrieval.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..core import storage

FORMAT = 2
"""``meta.json``'s ``format`` of this layout; a meta without ``format`` is the first layout."""
META = "meta.json"
WORK_DIR = "_build"
DONE_DIR = "_done"
DENSE_FILE = "dense.faiss"
PASSAGES_FILE = "passages.arrow"
BM25_DIR = "bm25"
LEGACY_FILES = ("index.faiss", "docs.parquet")
_DATA_DIR = re.compile(r"data-[0-9a-f]{12}$")


class IndexBuildError(ValueError):
    """The corpus or the options cannot give an index: ``str()`` is one line naming the file
    (or the option) and what is wrong with it. Raised before anything is written in place of
    an index."""


class IndexFormatError(ValueError):
    """An index directory that cannot serve what is asked of it (not an index, a layout of a
    newer version, a retrieval method it was built without): ``str()`` says what to rebuild."""


def new_build_id() -> str:
    """A fresh name for a build's data directory (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def data_dir(index_uri: str, build_id: str) -> str:
    """URI of the data directory of build ``build_id`` under ``index_uri``."""
    return storage.join(index_uri, f"data-{build_id}")


def is_local(uri: str) -> bool:
    """True when ``uri`` is a path on this machine's file system (no scheme, or ``file://``)."""
    return storage.split_uri(uri)[0] == "file"


def read_meta(index_uri: str) -> dict:
    """The ``meta.json`` of the index at ``index_uri``.

    Raises:
        IndexFormatError: no ``meta.json`` there (not an index, or a build that never
            finished), or one of a newer layout than this version reads."""
    uri = storage.join(index_uri, META)
    try:
        meta = storage.read_json_object(uri)
    except ValueError as e:
        raise IndexFormatError(f"{e}; rebuild the index with `specrag-batch index build`") from None
    if meta is None:
        raise IndexFormatError(f"{index_uri}: no index here ({META} missing; a build that did not "
                               "finish leaves none): build one with `specrag-batch index build`")
    if int(meta.get("format", 1)) > FORMAT:
        raise IndexFormatError(f"{index_uri}: index format {meta['format']} is newer than this "
                               f"version reads ({FORMAT}); upgrade specrag-batch or rebuild the index")
    return meta


def is_legacy(meta: dict) -> bool:
    """True for an index of the first layout (``index.faiss`` + ``docs.parquet``)."""
    return "format" not in meta


def cache_root() -> Path:
    """Where remote indexes are copied to be memory-mapped: ``$SPECRAG_INDEX_CACHE``, else
    ``~/.cache/specrag-batch/index``."""
    env = os.environ.get("SPECRAG_INDEX_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "specrag-batch" / "index"


def local_data_dir(index_uri: str, meta: dict) -> Path:
    """A local directory holding the data directory named by ``meta`` (format 2): the directory
    itself for a local index; for a remote one, a copy in :func:`cache_root` made once per
    build (downloaded to a temporary directory, then renamed into place, so a reader never sees
    a partial copy).

    Raises:
        FileNotFoundError: the data directory ``meta`` names is not there."""
    remote = storage.join(index_uri, meta["data"])
    if is_local(index_uri):
        path = Path(storage.split_uri(remote)[1])
        if not path.is_dir():
            raise FileNotFoundError(f"{remote}: the data directory {META} names is missing; rebuild the index")
        return path
    key = hashlib.sha256(storage.normalize_uri(index_uri).encode()).hexdigest()[:16]
    target = cache_root() / f"{key}-{meta['data']}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    try:
        fs, path = storage.filesystem(remote)
        if not fs.exists(path):
            raise FileNotFoundError(f"{remote}: the data directory {META} names is missing; rebuild the index")
        fs.get(path.rstrip("/") + "/", str(tmp) + "/", recursive=True)
        try:
            tmp.rename(target)
        except OSError:  # another process finished the same copy first
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def publish(local_path: str | Path, uri: str) -> None:
    """Move the finished local file ``local_path`` to ``uri`` so that readers see all of it or
    nothing: a rename on the local file system (``local_path`` should be on the same one), an
    upload that completes as a whole on S3 (the local file is then removed)."""
    local_path = str(local_path)
    if is_local(uri):
        dest = storage.split_uri(uri)[1]
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        try:
            os.replace(local_path, dest)
        except OSError as e:
            if e.errno != 18:  # EXDEV: another file system, copy then rename
                raise
            tmp = os.path.join(os.path.dirname(dest) or ".", f".{uuid.uuid4().hex}.tmp")
            shutil.copyfile(local_path, tmp)
            os.replace(tmp, dest)
            os.remove(local_path)
        return
    fs, path = storage.filesystem(uri)
    fs.put_file(local_path, path)
    fs.invalidate_cache(path)
    os.remove(local_path)


@contextmanager
def scratch(near: str) -> Iterator[Path]:
    """A local temporary directory for files to :func:`publish` under ``near``: inside it when
    ``near`` is local (one file system, so publishing is a rename), else in the system's
    temporary directory. Removed on exit, with whatever was not published."""
    parent = None
    if is_local(near):
        parent = storage.split_uri(near)[1]
        os.makedirs(parent, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=".scratch-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fetch(uri: str, scratch_dir: Path) -> Path:
    """A local path to read the file at ``uri`` from: the file itself when local, else a copy
    downloaded into ``scratch_dir``."""
    if is_local(uri):
        return Path(storage.split_uri(uri)[1])
    fs, path = storage.filesystem(uri)
    local = scratch_dir / f"{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}"
    fs.get_file(path, str(local))
    return local


def remove(uri: str) -> None:
    """Remove the file or directory tree at ``uri`` (nothing there: nothing to do)."""
    fs, path = storage.filesystem(uri)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def stale_entries(index_uri: str, keep: str) -> list[str]:
    """URIs under ``index_uri`` that a committed build ``keep`` (a ``data-<id>`` name)
    replaced: other data directories, the first layout's files and the work area."""
    fs, path = storage.filesystem(index_uri)
    out = []
    for info in fs.ls(path, detail=True):
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if (_DATA_DIR.match(name) and name != keep) or name in LEGACY_FILES or name == WORK_DIR:
            out.append(storage.join(index_uri, name))
    return out
