"""The dense part of an index: a FAISS index named by a factory string (``Flat``,
``IVF{nlist},Flat``, ``IVF{nlist},PQ{m}``, ``HNSW{M}``, or any string FAISS's
``index_factory`` reads) over inner products of L2-normalised vectors (cosine similarity),
trained on a seeded sample of the corpus's vectors, then filled shard by shard.

The default type follows the corpus size (:func:`default_index_type`). Search parameters
(``nprobe`` for IVF, ``efSearch`` for HNSW) are set per search from the run config. Where
faiss-gpu sees a GPU (``faiss.get_num_gpus()``), training, adding and searching run there for
the types FAISS has on GPU; the written index is always a CPU index.
"""

from __future__ import annotations

import math
import re
import threading
from typing import Callable, Sequence

import numpy as np

from .layout import IndexBuildError

EXACT_UP_TO = 100_000
"""Corpora up to this many passages get an exact ``Flat`` index by default."""
IVF_FLAT_UP_TO = 5_000_000
"""Larger corpora up to this size get ``IVF{nlist},Flat``; above it, ``IVF{nlist},PQ{m}``."""
TRAIN_PER_CENTROID = 50
"""Training sample: this many vectors per IVF list (FAISS warns below 39), at least 2^16."""
ADD_BLOCK = 65_536
"""Vectors added to the index per call."""
_LOCK = threading.Lock()


def default_index_type(n: int, d: int) -> str:
    """The index type for ``n`` passages of dimension ``d``: ``Flat`` up to
    :data:`EXACT_UP_TO`; ``IVF{nlist},Flat`` up to :data:`IVF_FLAT_UP_TO` with nlist the power of
    two nearest 4·sqrt(n) (FAISS's guideline, 4-16·sqrt(n)); beyond, ``IVF{nlist},PQ{m}`` with
    nlist nearest 16·sqrt(n) (at most 65536) and m = d/8 sub-quantisers of 8 bits (d/8 bytes a
    vector, 48 for d = 384; the largest divisor of d up to d/8 otherwise). Sub-quantisers of
    fewer than 8 dimensions train far slower in FAISS (PQ96 over 384 dimensions: 155 s against
    7 s for PQ8 on 20k vectors here, benchmarks/index_scale.md)."""
    if n <= EXACT_UP_TO:
        return "Flat"
    if n <= IVF_FLAT_UP_TO:
        return f"IVF{2 ** round(math.log2(4 * math.sqrt(n)))},Flat"
    nlist = min(65536, 2 ** round(math.log2(16 * math.sqrt(n))))
    m = max(k for k in range(1, max(1, d // 8) + 1) if d % k == 0)
    return f"IVF{nlist},PQ{m}"


def faiss_reason(e: Exception) -> str:
    """FAISS's own words from one of its C++ exceptions, without the source location."""
    text = " ".join(str(e).split())
    text = re.sub(r"^Error in .*? at \S+:\d+: ", "", text)
    return re.sub(r"^Error: '.*?' failed: ", "", text)


def new_index(index_type: str, d: int):
    """An empty FAISS inner-product index of type ``index_type`` for vectors of dimension ``d``.

    Raises:
        IndexBuildError: FAISS refuses the string (unparsable, or parameters that do not fit
            ``d``), in one line with FAISS's reason."""
    import faiss

    try:
        return faiss.index_factory(d, index_type, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise IndexBuildError(f"--index-type {index_type!r}: FAISS refuses it for {d}-dimensional vectors: "
                              f"{faiss_reason(e)}") from None


def min_training_points(index) -> int:
    """Fewest vectors FAISS trains ``index`` on: its IVF list count and its product
    quantiser's centroids (2^bits), whichever is larger; 0 for an index without training."""
    import faiss

    if index.is_trained:
        return 0
    need = 1
    try:
        need = max(need, faiss.extract_index_ivf(index).nlist)
    except RuntimeError:
        pass
    for holder in (index, _ivf_or_none(index)):
        pq = getattr(holder, "pq", None) if holder is not None else None
        if pq is not None:
            need = max(need, int(pq.ksub))
    return need


def _ivf_or_none(index):
    import faiss

    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


_ID_MAPS = re.compile(r"IDMap2?")
_ZERO_SIZES = ((re.compile(r"HNSW(\d+)"), 2, "an HNSW graph of {} links per vector (HNSW{{M}}: M >= 2)"),
               (re.compile(r"IVF(\d+)"), 1, "an IVF index of {} lists (IVF{{nlist}}: nlist >= 1)"))
"""Sizes FAISS's factory parses but cannot build or search: HNSW0 aborts the process at its
first ``add`` (a C++ assertion), HNSW1 crashes it, IVF0 builds an index every search refuses."""


def check_index_type(index_type: str | None) -> None:
    """Refuse, before the corpus is read, a factory string no corpus can be built into: one
    with an ``IDMap`` or ``IDMap2`` part (FAISS parses it, then refuses every ``add``: such an
    index takes an id with each vector, ``add_with_ids``; here a vector's row number is its
    passage's), or an HNSW of fewer than 2 links or an IVF of no lists (:data:`_ZERO_SIZES`;
    FAISS parses them, then ends the process in a C++ assertion or a crash once the corpus is
    embedded). None (the default type): nothing to check.

    Raises:
        IndexBuildError: naming the option, the part and the string without it (IDMap), or
            the part and the smallest size that works."""
    if not index_type:
        return
    for pattern, least, what in _ZERO_SIZES:
        for m in pattern.finditer(index_type):
            if int(m[1]) < least:
                raise IndexBuildError(f"--index-type {index_type!r}: {m[0]} is {what.format(int(m[1]))}, "
                                      "which FAISS cannot build")
    parts = [p.strip() for p in index_type.split(",")]
    maps = [p for p in parts if _ID_MAPS.fullmatch(p)]
    if maps:
        rest = ",".join(p for p in parts if not _ID_MAPS.fullmatch(p)) or "Flat"
        raise IndexBuildError(f"--index-type {index_type!r}: {maps[0]} is not supported (an {maps[0]} index takes an "
                              "id with each vector; the index numbers its vectors by passage itself): use "
                              f"{rest!r}")


def check_buildable(index_type: str, d: int, n: int) -> None:
    """Refuse, before anything is embedded, an index type FAISS cannot build over ``n``
    vectors of dimension ``d``.

    Raises:
        IndexBuildError: FAISS refuses the string (:func:`new_index`), or it needs more vectors
            to train than the corpus has."""
    need = min_training_points(new_index(index_type, d))
    if need > n:
        raise IndexBuildError(f"--index-type {index_type!r} needs at least {need} passages to train; "
                              f"the corpus has {n} (use fewer IVF lists, or Flat)")


def training_size(index, n: int, requested: int | None = None) -> int:
    """How many vectors to train ``index`` on: ``requested`` if given, else
    :data:`TRAIN_PER_CENTROID` per IVF list (at least 65536), never more than ``n``."""
    if index.is_trained:
        return 0
    want = requested or max(65_536, TRAIN_PER_CENTROID * min_training_points(index))
    return min(n, max(want, min_training_points(index)))


def gpus() -> int:
    """GPUs faiss-gpu can use here (0 with faiss-cpu)."""
    import faiss

    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def to_gpu(index):
    """``index`` on all GPUs when FAISS has one and a GPU version of this type, else itself."""
    import faiss

    if gpus() == 0:
        return index
    try:
        return faiss.index_cpu_to_all_gpus(index)
    except (RuntimeError, AttributeError):  # HNSW and some others have no GPU version
        return index


def to_cpu(index):
    """A CPU copy of a GPU index (``index`` itself when it is on the CPU)."""
    import faiss

    if gpus() == 0 or not hasattr(faiss, "index_gpu_to_cpu"):
        return index
    try:
        return faiss.index_gpu_to_cpu(index)
    except (RuntimeError, AttributeError):
        return index


def sample_rows(sizes: Sequence[int], k: int, seed: int) -> list[np.ndarray]:
    """``k`` distinct global rows drawn uniformly (seeded) from shards of ``sizes`` rows, as
    sorted row numbers within each shard."""
    total = int(sum(sizes))
    picked = np.sort(np.random.default_rng(seed).choice(total, size=min(k, total), replace=False))
    out, start = [], 0
    for size in sizes:
        lo, hi = np.searchsorted(picked, [start, start + size])
        out.append(picked[lo:hi] - start)
        start += size
    return out


def train(index_type: str, shards: Sequence[np.ndarray], *, train_size: int | None = None, seed: int = 0):
    """An empty CPU FAISS index of ``index_type`` for the vectors of ``shards`` (arrays of shape
    (rows, d), memory-mapped .npy files in the build), trained on a seeded sample of them
    (:func:`training_size`). Returns ``(index, number of training vectors)``; an index type
    without training comes back as it is, with 0.

    Raises:
        IndexBuildError: FAISS refuses the type or fails while training (one line)."""
    d = int(shards[0].shape[1])
    n = int(sum(len(s) for s in shards))
    index = new_index(index_type, d)
    k = training_size(index, n, train_size)
    if not k:
        return index, 0
    work = to_gpu(index)
    try:
        parts = [np.asarray(s[rows]) for s, rows in zip(shards, sample_rows([len(s) for s in shards], k, seed))]
        work.train(np.ascontiguousarray(np.concatenate(parts), dtype=np.float32))
        del parts
    except RuntimeError as e:
        raise IndexBuildError(f"--index-type {index_type!r}: FAISS failed to build it: {faiss_reason(e)}") from None
    return to_cpu(work), k


def add(index, index_type: str, shards: Sequence[np.ndarray], progress: Callable[[int], None] | None = None):
    """The trained ``index`` filled with the vectors of ``shards`` in order, :data:`ADD_BLOCK`
    at a time (a CPU index is returned).

    Raises:
        IndexBuildError: FAISS fails while adding (one line naming ``index_type``)."""
    work = to_gpu(index)
    try:
        for s in shards:
            for start in range(0, len(s), ADD_BLOCK):
                block = np.ascontiguousarray(s[start:start + ADD_BLOCK], dtype=np.float32)
                work.add(block)
                if progress:
                    progress(len(block))
    except RuntimeError as e:
        raise IndexBuildError(f"--index-type {index_type!r}: FAISS failed to build it: {faiss_reason(e)}") from None
    return to_cpu(work)


def build(index_type: str, shards: Sequence[np.ndarray], *, train_size: int | None = None, seed: int = 0,
          progress: Callable[[int], None] | None = None):
    """:func:`train` then :func:`add`: a CPU FAISS index of ``index_type`` over ``shards``.
    Returns ``(index, number of training vectors)``.

    Raises:
        IndexBuildError: FAISS refuses the type or fails while training or adding (one line)."""
    index, k = train(index_type, shards, train_size=train_size, seed=seed)
    return add(index, index_type, shards, progress), k


def search(index, queries: np.ndarray, k: int, *, nprobe: int | None = None, ef_search: int | None = None,
           block: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` (scores, row ids) of each query (float32 (q, d), L2-normalised), ``block``
    queries per FAISS call; ids -1 where the index holds fewer than ``k``. ``nprobe`` and
    ``ef_search`` apply to the index types that have them (IVF lists probed, HNSW's search
    breadth) and are ignored by the others."""
    import faiss

    k = max(1, min(k, index.ntotal)) if index.ntotal else 1
    scores = np.empty((len(queries), k), np.float32)
    ids = np.full((len(queries), k), -1, np.int64)
    with _LOCK:  # search parameters are set on the shared index: set and search together
        space = faiss.ParameterSpace()
        for name, value in (("nprobe", nprobe), ("efSearch", ef_search), ("quantizer_efSearch", ef_search)):
            if value is not None:
                try:
                    space.set_index_parameter(index, name, int(value))
                except RuntimeError:
                    pass  # this index type has no such parameter
        for start in range(0, len(queries), block):
            q = np.ascontiguousarray(queries[start:start + block], dtype=np.float32)
            scores[start:start + len(q)], ids[start:start + len(q)] = index.search(q, k)
    return scores, ids
