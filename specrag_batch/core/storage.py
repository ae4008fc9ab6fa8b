"""Object storage through fsspec: local paths, ``file://`` and ``s3://`` (s3fs).

Writes are atomic for readers: on a local file system the bytes go to a hidden temporary file
in the destination directory and are renamed into place; on S3 an object becomes visible only
once its upload completes (single PUT or completed multipart upload), so a reader never sees a
partial file. S3 endpoint and credentials come from the usual AWS variables or from
``SPECRAG_S3_ENDPOINT_URL`` (e.g. MinIO, or a moto server in tests).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import stat
import time
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq


def storage_options(uri: str) -> dict:
    """fsspec options for ``uri``; S3 honours ``SPECRAG_S3_ENDPOINT_URL``/``AWS_ENDPOINT_URL``."""
    if uri.startswith(("s3://", "s3a://")):
        ep = os.environ.get("SPECRAG_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
        # other processes write here too (resumed runs, readers): never trust a cached listing
        opts: dict = {"skip_instance_cache": False, "use_listings_cache": False}
        if ep:
            opts["client_kwargs"] = {"endpoint_url": ep}
        return opts
    return {}


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
S3_VERSION_MARK = "?versionId="  # s3fs reads the rest of a key after this as an object version


def split_uri(uri: str) -> tuple[str, str]:
    """(fsspec protocol, path on that file system) of a URI or local path.

    Only a leading ``scheme://`` is looked at: the rest is the path as it is, so a name that
    came from a listing (``ns::part-0.parquet``, ``a#b?c*[d].parquet``) is never read again as
    a URL chain, fragment, query or glob. No scheme (or ``file://``) is a local path."""
    m = _SCHEME.match(uri)
    if m is None:
        return "file", uri
    proto, rest = uri[:m.end() - 3], uri[m.end():]
    if proto == "file":
        return "file", rest
    return proto, rest


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(file system, plain path inside it) for a URI or local path (see :func:`split_uri`).

    The file system is resolved once per protocol and options (fsspec's instance cache: every
    shard of a run shares one S3 client); paths are handed to it without URL parsing or
    globbing (``url_to_fs`` is never called on a listed path)."""
    proto, path = split_uri(uri)
    return fsspec.filesystem(proto, **storage_options(uri)), path


S3_PROTOCOLS = ("s3", "s3a")


def normalize_uri(uri: str) -> str:
    """One spelling per location, so a run key and shard names do not depend on how a path was
    typed: local paths (and ``file://``) become absolute without a trailing ``/``; other URIs
    lose trailing ``/``. ``in/``, ``./in`` and ``/abs/in`` are the same input."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    if "://" not in uri:
        return os.path.abspath(os.path.expanduser(uri))
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{rest.rstrip('/')}"


def is_within(inner: str, outer: str) -> bool:
    """True when normalized URI ``inner`` is ``outer`` or below it."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def join(base: str, *parts: str) -> str:
    """Join URI components with ``/`` (works for local paths and ``s3://``)."""
    out = base.rstrip("/")
    for p in parts:
        out += "/" + p.strip("/")
    return out


def exists(uri: str) -> bool:
    """True when a file or directory exists at ``uri`` (see :func:`filesystem`)."""
    fs, path = filesystem(uri)
    return fs.exists(path)


def read_bytes(uri: str) -> bytes:
    """The whole object at ``uri``.

    Raises:
        FileNotFoundError: nothing at ``uri``."""
    fs, path = filesystem(uri)
    return fs.cat_file(path)


def json_object(raw: bytes, uri: str) -> dict:
    """``raw`` (the bytes of the file at ``uri``) parsed as a JSON object.

    Raises:
        ValueError: not JSON (or not UTF-8), nested deeper than Python's recursion limit, or
            JSON that is not an object, naming ``uri``."""
    try:
        v = json.loads(raw)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{uri}: not JSON ({e})") from None
    except RecursionError:  # arrays or objects nested deeper than the parser's recursion limit
        raise ValueError(f"{uri}: not a JSON file this reads (nested too deep)") from None
    if not isinstance(v, dict):
        raise ValueError(f"{uri}: expected a JSON object, got {type(v).__name__}")
    return v


def read_json_object(uri: str) -> dict | None:
    """The JSON object at ``uri``, None when nothing is there.

    Raises:
        ValueError: not a JSON object (:func:`json_object`)."""
    try:
        return json_object(read_bytes(uri), uri)
    except FileNotFoundError:
        return None


def write_bytes_atomic(uri: str, data: bytes) -> None:
    """Write ``data`` so that readers see either nothing or the whole object.

    Raises:
        OSError: the object cannot be written (a read-only directory, a directory in its
            place), naming ``uri``'s path, never the local temporary it goes through (which
            is removed)."""
    fs, path = filesystem(uri)
    if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        parent = os.path.dirname(path) or "."  # a bare file name: the working directory
        os.makedirs(parent, exist_ok=True)
        # a short name of its own: the target's name may already use the whole NAME_MAX
        tmp = os.path.join(parent, f".{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            if os.path.lexists(tmp):
                os.remove(tmp)
            if e.filename != tmp:
                raise
            raise type(e)(e.errno, e.strerror, path) from None
    else:
        fs.pipe_file(path, data)
        fs.invalidate_cache(path)


def create_exclusive(uri: str, data: bytes) -> bool:
    """Create the object at ``uri`` holding ``data`` unless something is there already, in one
    step that two writers cannot both win (a run claiming its output's key). Returns True when
    this call created it, False when an object already existed (left as it was). Readers see
    nothing or the whole object, as with :func:`write_bytes_atomic`.

    Local: the bytes go to a temporary file (``.<hex>.claim``), then ``os.link`` gives it the
    name, which fails when the name exists (atomic on POSIX file systems, NFS included); where
    hard links are not supported, ``O_CREAT | O_EXCL``. S3: a conditional PUT
    (``If-None-Match: *``, s3fs' ``mode="create"``; AWS S3, MinIO and moto 5 honour it),
    refused with 412 when the key exists; a 409 (another conditional write to the key in
    flight) is retried. A store that ignores the condition overwrites: check-then-write again.

    Raises:
        OSError: the object cannot be written (as :func:`write_bytes_atomic`)."""
    fs, path = filesystem(uri)
    if "file" not in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        for attempt in range(5):
            try:
                fs.pipe_file(path, data, mode="create")
                return True
            except FileExistsError:
                return False
            except OSError as e:  # 409 ConditionalRequestConflict: s3fs maps it to EBUSY
                conflict = "ConditionalRequestConflict" in str(e) or e.errno == errno.EBUSY
                if not conflict or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
            finally:
                fs.invalidate_cache(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # not ``.tmp``: a run starting beside this one removes stale ``.tmp`` files of its output
    tmp = os.path.join(os.path.dirname(path), f".{uuid.uuid4().hex}.claim")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            return _create_excl_open(path, data)
        return True
    except OSError as e:
        if e.filename != tmp:
            raise
        raise type(e)(e.errno, e.strerror, path) from None
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


def _create_excl_open(path: str, data: bytes) -> bool:
    """:func:`create_exclusive` on a local file system without hard links: ``O_EXCL`` create,
    then the bytes (a reader may see the file empty for that moment)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return True


NAME_MAX_BYTES = 255
"""Longest file name (one path component, UTF-8 bytes) on common local file systems."""
S3_KEY_MAX_BYTES = 1024
"""Longest S3 object key (UTF-8 bytes)."""


def name_too_long(uri: str) -> str | None:
    """Why an object at ``uri`` cannot be written (its file name over :data:`NAME_MAX_BYTES` on a
    local file system, its key over :data:`S3_KEY_MAX_BYTES` on S3), or None when it can."""
    proto, path = split_uri(uri)
    if proto == "file":
        n = len(path.rstrip("/").rsplit("/", 1)[-1].encode())
        return f"file name of {n} bytes (limit {NAME_MAX_BYTES} bytes)" if n > NAME_MAX_BYTES else None
    if proto in ("s3", "s3a"):
        n = len(path.split("/", 1)[-1].encode())
        return f"S3 key of {n} bytes (limit {S3_KEY_MAX_BYTES} bytes)" if n > S3_KEY_MAX_BYTES else None
    return None


def check_regular_file(uri: str) -> None:
    """Refuse a local path that is listed but holds no file to read: a symbolic link to nothing
    (an unfetched git-annex or DVC file) or a FIFO, socket or device (a read would wait for
    ever). Object stores hold only objects: nothing is checked there.

    Raises:
        FileNotFoundError: a symbolic link whose target does not exist, naming both.
        OSError: not a regular file, naming its kind."""
    proto, path = split_uri(uri)
    if proto != "file":
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise FileNotFoundError(f"{uri}: a symbolic link to {os.readlink(path)!r}, which does not exist") from None
        raise
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise OSError(f"{uri}: {kind}, not a regular file (not read)")


def read_parquet(uri: str) -> pa.Table:
    """Read one Parquet file (the whole object, then parsed in memory).

    Raises:
        FileNotFoundError: nothing at ``uri`` (or a link to nothing, :func:`check_regular_file`).
        OSError: a FIFO, socket or device (:func:`check_regular_file`).
        pyarrow.ArrowInvalid: the object is not Parquet."""
    check_regular_file(uri)
    return pq.read_table(io.BytesIO(read_bytes(uri)))


def write_parquet_atomic(uri: str, table: pa.Table) -> None:
    """Write ``table`` as one zstd-compressed Parquet file, atomically (:func:`write_bytes_atomic`)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    write_bytes_atomic(uri, buf.getvalue())


def _is_directory_marker(info: dict) -> bool:
    """A zero-byte object whose key ends in ``/``: what S3 consoles create for a "folder"."""
    return info.get("type") == "directory" or (info["name"].endswith("/") and not info.get("size"))


def list_files(prefix: str) -> list[str]:
    """All files under a prefix (recursively) as full URIs, sorted; a single file lists itself.
    S3 directory-marker keys (zero bytes, ending in ``/``) are not files and are left out.
    Each returned URI is the listed path behind the prefix's scheme, unparsed.

    Raises:
        FileNotFoundError: nothing exists at ``prefix``.
    """
    fs, path = filesystem(prefix)
    proto = prefix[:_SCHEME.match(prefix).end()] if _SCHEME.match(prefix) else ""
    if proto == "file://":
        proto = ""
    if fs.isfile(path):
        return [prefix]
    if not fs.exists(path):
        raise FileNotFoundError(f"input {prefix!r} does not exist")
    found = fs.find(path, detail=True)
    files = sorted(name for name, info in found.items() if not _is_directory_marker({**info, "name": name}))
    return [proto + f if proto and not f.startswith(proto) else f for f in files]


def parquet_files(prefix: str) -> tuple[list[str], list[dict]]:
    """(Parquet file URIs, skipped files with reasons) under ``prefix``: ``.``/``_`` names
    (``_SUCCESS``, ``.crc``) are left out silently; files inside a ``.``/``_`` directory (Spark's
    ``_temporary/``), names not ending in ``.parquet`` and S3 keys holding ``?versionId=`` (read
    by s3fs as a version of another key) are skipped. Paths are used as listed (:func:`split_uri`).

    Raises:
        FileNotFoundError: nothing exists at ``prefix`` (:func:`list_files`)."""
    shards, skipped = [], []
    base = prefix.rstrip("/")
    for f in list_files(prefix):
        name = f.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            continue
        rel = f[len(base):].lstrip("/") if f.startswith(base + "/") else name
        if any(part.startswith((".", "_")) for part in rel.split("/")[:-1]):
            skipped.append({"input": f, "reason": "inside a hidden or temporary directory (. or _)"})
        elif S3_VERSION_MARK in f and split_uri(f)[0] in ("s3", "s3a"):
            skipped.append({"input": f, "reason": f"key contains {S3_VERSION_MARK!r}, which "
                                                  "the S3 client reads as an object version"})
        elif name.endswith(".parquet"):
            shards.append(f)
        else:
            skipped.append({"input": f, "reason": "not a .parquet file"})
    return shards, skipped



def require_bucket(uri: str, what: str) -> None:
    """Refuse an S3 URI whose bucket is not there (404 to ``HeadBucket``), naming the bucket and
    ``what`` the URI is for; S3 says only "The specified bucket does not exist". Credentials that
    may not probe the bucket (403: a policy granting a prefix) and other URIs pass.

    Raises:
        FileNotFoundError: ``<what>: bucket '<name>' does not exist``."""
    proto, path = split_uri(uri)
    bucket = path.split("/", 1)[0]
    if proto not in S3_PROTOCOLS:
        return
    try:
        filesystem(uri)[0].call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what}: bucket {bucket!r} does not exist") from None
    except Exception:  # noqa: BLE001 - not allowed to probe, or no answer: not a refusal
        return


def input_fingerprint(uri: str) -> dict:
    """Size and version tag of an input file: ``{"size": bytes, "tag": str}``, the tag being
    the ETag (S3) or the mtime (local disk; as a string).

    Raises:
        FileNotFoundError: nothing at ``uri``."""
    fs, path = filesystem(uri)
    info = fs.info(path)
    tag = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified")
    return {"size": int(info.get("size") or 0), "tag": str(tag)}
