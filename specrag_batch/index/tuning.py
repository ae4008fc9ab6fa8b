"""The operating point of an index: recall@k measured on the user's own corpus at build, and
the smallest search breadth reaching a target recall, as FAISS's auto-tuning
(``faiss.OperatingPoints``) picks operating points.

Held-out queries are the user's queries (``index build --queries``, embedded with the index's
model) or, by default, question-like queries made from a seeded sample of the corpus's own
passages (:data:`HOLDOUT`, fewer for a small corpus): each passage moved off itself along the
corpus's covariance by the distance at which passages have their nearest neighbour
(:func:`question_like`), its own passage left out of its lists. A passage taken unchanged sits
on an indexed vector and overstates the recall of queries that sit between passages, such as
questions. Each query is searched exactly (``IndexFlatIP`` over the same vectors, block by
block) and approximately; recall@k is the share of the exact top k the approximate top k holds
(a returned passage as similar as the exact k-th counts, so duplicate passages are no misses).

The queries are split in two disjoint halves (:func:`split`). The searched parameter is
``nprobe`` for IVF indexes (1 to ``nlist``) and ``efSearch`` for HNSW (``k`` to
:data:`EF_SEARCH_MAX`); the operating point is its smallest value at which the one-sided 95%
lower confidence bound of the tuning half's mean recall (:func:`lower_bound`) reaches the
target: doubled until reached, then bisected (recall grows with either; for IVF-Flat it never
falls). The other half is then searched at that value: its recall is that of queries the point
was not tuned on. ``Flat`` is exact: recall 1.0 by construction.

``meta.json``'s ``dense.operating_point`` records the result; a run and
:func:`~specrag_batch.index.search.get_retriever` search with it unless told otherwise
(:func:`search_defaults`); an index without one (built before it existed) searches with
:data:`DEFAULT_NPROBE` / :data:`DEFAULT_EF_SEARCH`.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from ..core import storage
from . import dense
from .layout import IndexBuildError

DEFAULT_NPROBE = 128
"""IVF lists probed by an index without an operating point (docs/decisions/010-ivf-nprobe-128.md)."""
DEFAULT_EF_SEARCH = 128
"""HNSW efSearch of an index without an operating point."""
TARGET_RECALL = 0.95
RECALL_K = 10
HOLDOUT = 1000
"""Held-out queries sampled from the corpus by default (all passages of a smaller corpus)."""
EF_SEARCH_MAX = 4096
CONFIDENCE_Z = 1.645
"""z of the one-sided 95% lower confidence bound the operating point's recall must reach."""
RULE = "smallest value whose one-sided 95% lower confidence bound of recall on the tuning half reaches the target"
"""The rule :func:`tune` picks the operating point by (recorded in meta.json)."""
QUESTION_LIKE = "corpus passages moved off by the nearest-neighbour distance"
"""``source`` of held-out queries made by :func:`question_like` (the default)."""
_EXACT_BLOCK = 65_536
SPECTRUM_SAMPLE = 65_536
"""Corpus vectors (at most) whose covariance the question-like held-out queries move along."""


def search_parameter(index) -> tuple[str | None, int, int]:
    """(name, smallest, largest) of the search breadth of ``index``: ``nprobe`` (1..nlist) for
    IVF, ``efSearch`` (1..:data:`EF_SEARCH_MAX`) for HNSW, ``(None, 0, 0)`` for an index
    without one (``Flat``, ``PQ``, ...)."""
    import faiss

    try:
        return "nprobe", 1, int(faiss.extract_index_ivf(index).nlist)
    except RuntimeError:
        pass
    if getattr(index, "hnsw", None) is not None or isinstance(index, faiss.IndexHNSW):
        return "efSearch", 1, EF_SEARCH_MAX
    return None, 0, 0


def exact_neighbours(shards: Sequence[np.ndarray], queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(inner products, row ids), each (q, k), of the exact top-``k`` of ``queries`` over the
    vectors of ``shards`` in order (rows numbered across shards), -1 past the last; memory: one
    block of :data:`_EXACT_BLOCK` vectors (``faiss.ResultHeap`` merges the blocks)."""
    import faiss

    heap = faiss.ResultHeap(len(queries), k, keep_max=True)
    q = np.ascontiguousarray(queries, dtype=np.float32)
    offset = 0
    for s in shards:
        for start in range(0, len(s), _EXACT_BLOCK):
            block = np.ascontiguousarray(s[start:start + _EXACT_BLOCK], dtype=np.float32)
            flat = faiss.IndexFlatIP(block.shape[1])
            flat.add(block)
            d, i = flat.search(q, min(k, len(block)))
            if d.shape[1] < k:
                d = np.pad(d, ((0, 0), (0, k - d.shape[1])), constant_values=-np.inf)
                i = np.pad(i, ((0, 0), (0, k - i.shape[1])), constant_values=-1)
            heap.add_result(np.ascontiguousarray(d, dtype=np.float32), np.where(i >= 0, i + offset + start, -1))
        offset += len(s)
    heap.finalize()
    return heap.D, heap.I


def top_k(ids: np.ndarray, exclude: np.ndarray | None, k: int) -> np.ndarray:
    """Each query's first ``k`` row ids (of ``ids``, best first) other than -1 and other than
    its own row ``exclude[i]`` (None: nothing excluded), -1 padded to (q, k)."""
    out = np.full((len(ids), k), -1, np.int64)
    for i, row in enumerate(ids):
        own = -2 if exclude is None else int(exclude[i])
        keep = [int(j) for j in row if j >= 0 and j != own][:k]
        out[i, :len(keep)] = keep
    return out


def similarities(shards: Sequence[np.ndarray], queries: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Exact inner products (q, k) of each query with the vectors of rows ``ids`` (numbered
    across ``shards``; -inf where -1)."""
    starts = np.cumsum([0] + [len(s) for s in shards])
    flat = ids.ravel()
    vecs = np.zeros((len(flat), queries.shape[1]), np.float32)
    which = np.searchsorted(starts, flat, side="right") - 1
    for b in np.unique(which[flat >= 0]):
        at = np.flatnonzero((which == b) & (flat >= 0))
        vecs[at] = shards[b][np.asarray(flat[at] - starts[b])]
    sims = np.einsum("qkd,qd->qk", vecs.reshape(*ids.shape, -1), queries.astype(np.float32))
    return np.where(ids >= 0, sims, -np.inf)


def recall_shares(found_sims: np.ndarray, truth_sims: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Per query, recall@k with ties (duplicate passages) counted as found: the share of its
    exact top k (``truth_sims``, exact inner products, -inf past the last) matched by a returned
    row whose exact inner product (``found_sims``) is at least the k-th exact one (less
    ``eps``); queries with an empty truth are left out (an empty array when none has one)."""
    shares = []
    for f, t in zip(found_sims, truth_sims):
        valid = np.isfinite(t)
        if valid.any():
            shares.append(min(int(valid.sum()), int(np.sum(f >= t[valid].min() - eps))) / int(valid.sum()))
    return np.asarray(shares, dtype=np.float64)


def recall(found_sims: np.ndarray, truth_sims: np.ndarray, eps: float = 1e-5) -> float:
    """recall@k (:func:`recall_shares`) averaged over queries with a non-empty truth (1.0
    when none has one)."""
    shares = recall_shares(found_sims, truth_sims, eps)
    return float(shares.mean()) if len(shares) else 1.0


def lower_bound(shares: np.ndarray, z: float = CONFIDENCE_Z) -> float:
    """One-sided lower confidence bound of the mean recall of the population the queries were
    sampled from: ``mean - z * sd / sqrt(n)`` (normal approximation of the sample mean, sd
    with n - 1; ``z`` :data:`CONFIDENCE_Z`, 95%); the mean itself for fewer than 2 queries,
    1.0 for none. Every query's recall is in [0, 1], so n of some hundreds makes the sample
    mean close to normal (central limit theorem)."""
    if len(shares) == 0:
        return 1.0
    if len(shares) < 2:
        return float(shares.mean())
    return float(shares.mean() - z * shares.std(ddof=1) / np.sqrt(len(shares)))


def split(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint halves of ``count`` held-out queries (seeded): the rows the operating point is
    tuned on (the larger half) and the rows it is checked on; sorted row numbers."""
    order = np.random.default_rng(seed).permutation(count)
    half = (count + 1) // 2
    return np.sort(order[:half]), np.sort(order[half:])


def tune(index, shards: Sequence[np.ndarray], queries: np.ndarray, *, exclude: np.ndarray | None = None,
         target: float = TARGET_RECALL, k: int = RECALL_K, source: str = "corpus sample", seed: int = 0,
         log: Callable[[str], None] | None = None) -> dict:
    """The operating point of ``index`` (built over ``shards``) on ``queries`` (float32 (q, d),
    L2-normalised; ``exclude[i]``: the row of the passage query ``i`` is, left out of its
    lists).

    The queries are split (:func:`split`, ``seed``) into a tuning half and a check half. The
    operating point is the smallest search parameter whose recall@``k`` against exact search on
    the tuning half has a one-sided 95% lower confidence bound (:func:`lower_bound`) of at least
    ``target``; when none has, the smallest giving the best bound. The check half, never used to
    choose, is searched at it: its recall is what queries the point was not tuned on get.

    Returns ``meta.json``'s ``dense.operating_point``: ``parameter`` (``nprobe``, ``efSearch``
    or None), ``value``, ``recall`` and ``recall_lower_bound`` (tuning half), ``k``,
    ``target``, ``reached`` (the bound reaches the target), ``check`` (``queries``, ``recall``,
    ``recall_lower_bound`` of the check half at ``value``; None for fewer than 2 queries),
    ``queries_per_second`` (searching all queries in one call at ``value``), ``queries``,
    ``tuned_on`` (tuning-half size), ``rule``, ``source``, ``exact`` (True for an index
    searching exhaustively, recall 1.0 by construction) and ``tried`` (each value searched, its
    recall and lower bound on the tuning half)."""
    name, lo, hi = search_parameter(index)
    n = int(index.ntotal)
    kk = max(0, min(k, n - (1 if exclude is not None else 0)))
    depth = max(1, min(n, kk + (1 if exclude is not None else 0)))
    exact = _is_exact(index)
    fit, check = split(len(queries), seed) if len(queries) >= 2 else (np.arange(len(queries)), np.arange(0))
    truth = None if exact else similarities(shards, queries, top_k(exact_neighbours(shards, queries, depth)[1],
                                                                     exclude, kk))
    measured: dict[int | None, tuple[np.ndarray, np.ndarray, float]] = {}

    def measure(value: int | None) -> float:
        """The lower bound of the tuning half's recall at ``value``."""
        if value not in measured:
            params = {"nprobe": value} if name == "nprobe" else {"ef_search": value} if name else {}
            t0 = time.perf_counter()
            ids = dense.search(index, queries, depth, **params)[1]
            seconds = time.perf_counter() - t0
            if exact:
                shares = np.ones(len(queries))
                measured[value] = (shares[fit], shares[check], seconds)
            else:
                found = similarities(shards, queries, top_k(ids, exclude, kk))
                measured[value] = (recall_shares(found[fit], truth[fit]), recall_shares(found[check], truth[check]),
                                   seconds)
        return lower_bound(measured[value][0])

    if name is None:
        value = None
        measure(None)
    else:
        lo = max(lo, kk) if name == "efSearch" else lo
        value, previous = lo, None
        while measure(value) < target and value < hi:
            previous, value = value, min(hi, value * 2)
        if measure(value) >= target and previous is not None:  # the smallest value in (previous, value]
            below, above = previous, value
            while above - below > 1:
                mid = (below + above) // 2
                below, above = (below, mid) if measure(mid) >= target else (mid, above)
            value = above
        elif measure(value) < target:  # unreachable: the smallest value giving the best bound
            best = max(measure(v) for v in measured)
            value = min(v for v in measured if measure(v) == best)
    fit_shares, check_shares, seconds = measured[value]

    def mean(shares):
        return float(shares.mean()) if len(shares) else 1.0

    bound = lower_bound(fit_shares)
    return {"parameter": name, "value": value, "recall": round(mean(fit_shares), 4),
            "recall_lower_bound": round(bound, 4), "k": kk, "target": target, "reached": bound >= target,
            "check": {"queries": int(len(check)), "recall": round(mean(check_shares), 4),
                      "recall_lower_bound": round(lower_bound(check_shares), 4)} if len(check) else None,
            "queries_per_second": round(len(queries) / seconds, 1) if seconds > 0 else None,
            "queries": int(len(queries)), "tuned_on": int(len(fit)), "rule": RULE, "source": source, "exact": exact,
            "tried": [[v, round(mean(measured[v][0]), 4), round(lower_bound(measured[v][0]), 4)]
                      for v in sorted(measured, key=lambda v: -1 if v is None else v)]}


def _is_exact(index) -> bool:
    """True for an index searching every vector with exact inner products (``Flat``)."""
    import faiss

    return isinstance(index, faiss.IndexFlat)


def holdout(sizes: Sequence[int], count: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """``count`` passages (all of a smaller corpus) drawn (seeded) as held-out queries from
    shards of ``sizes``: their row numbers within each shard, and their global row numbers."""
    rows = dense.sample_rows(sizes, count, seed)
    starts = np.cumsum([0, *sizes[:-1]])
    return rows, np.concatenate([r + s for r, s in zip(rows, starts)]).astype(np.int64)


def question_like(shards: Sequence[np.ndarray], passages: np.ndarray, exclude: np.ndarray, seed: int) -> np.ndarray:
    """Held-out queries made from held-out ``passages`` (float32 (q, d), unit rows; rows
    ``exclude`` of the corpus of ``shards``): each passage moved off itself, along a random
    direction drawn from the corpus's own covariance (a Gaussian with the mean-centred spectrum
    of a seeded sample of at most :data:`SPECTRUM_SAMPLE` vectors), until its inner product
    with that passage is the passages' median inner product with their nearest other passage.

    A passage taken as a query unchanged sits on an indexed vector: its neighbours are its own
    cell's (IVF) or its own node's (HNSW), and it overstates the recall a query gets that sits
    between passages, as a question does. The moved query is as far from its passage as a
    passage is from its nearest neighbour, and its passage is still left out of its lists."""
    sizes = [len(v) for v in shards]
    exact = exact_neighbours(shards, passages, 2)[1]
    nearest = similarities(shards, passages, top_k(exact, exclude, 1))[:, 0]
    cos = float(np.clip(np.median(nearest[np.isfinite(nearest)]) if np.isfinite(nearest).any() else 1.0, 0.0, 1.0))
    rows = dense.sample_rows(sizes, SPECTRUM_SAMPLE, seed)
    sample = np.concatenate([np.asarray(v[r], dtype=np.float32) for v, r in zip(shards, rows)])
    _, sv, axes = np.linalg.svd(sample - sample.mean(0), full_matrices=False)
    std = sv / np.sqrt(max(1, len(sample) - 1))
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal((len(passages), len(std))) * std) @ axes
    g -= np.sum(g * passages, axis=1, keepdims=True) * passages  # the part off the passage
    norm = np.linalg.norm(g, axis=1, keepdims=True)
    g = np.divide(g, norm, out=np.zeros_like(g), where=norm > 0)
    q = passages * cos + g * np.sqrt(1.0 - cos * cos)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def read_queries(uri: str, limit: int = HOLDOUT, seed: int = 0) -> list[str]:
    """The ``query`` column of the Parquet file at ``uri`` (the run's input format), at most
    ``limit`` of them (a seeded sample of a longer file).

    Raises:
        IndexBuildError: no such file, not Parquet, no string ``query`` column, no rows, or a
            null or blank query (naming its row); one line starting with ``--queries``."""
    import pyarrow.parquet as pq

    try:
        fs, path = storage.filesystem(uri)
        if not fs.isfile(path):
            raise IndexBuildError(f"--queries {uri}: no such file")
        with fs.open(path, "rb") as f:
            pf = pq.ParquetFile(f)
            if "query" not in pf.schema_arrow.names:
                raise IndexBuildError(f"--queries {uri}: no 'query' column (columns: {', '.join(pf.schema_arrow.names)})")
            column = pf.read(columns=["query"]).column("query")
    except IndexBuildError:
        raise
    except Exception as e:  # noqa: BLE001 - Arrow, OSError: not a readable Parquet file
        raise IndexBuildError(f"--queries {uri}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    import pyarrow as pa

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise IndexBuildError(f"--queries {uri}: column 'query' is {column.type}, not strings")
    queries = column.to_pylist()
    if not queries:
        raise IndexBuildError(f"--queries {uri}: no rows")
    for i, q in enumerate(queries):
        if q is None or not q.strip():
            raise IndexBuildError(f"--queries {uri}: row {i}: {'null' if q is None else 'blank'} query")
    if len(queries) > limit:
        keep = np.sort(np.random.default_rng(seed).choice(len(queries), size=limit, replace=False))
        queries = [queries[i] for i in keep]
    return queries


def operating_point(meta: dict) -> dict | None:
    """The operating point ``meta.json`` recorded (None for an index built before it existed)."""
    return (meta.get("dense") or {}).get("operating_point")


def search_defaults(meta: dict) -> tuple[int, int]:
    """(nprobe, efSearch) a search of the index of ``meta`` uses when not told: its operating
    point's value for its parameter, else :data:`DEFAULT_NPROBE` / :data:`DEFAULT_EF_SEARCH`."""
    op = operating_point(meta) or {}
    nprobe = op.get("value") if op.get("parameter") == "nprobe" and op.get("value") else DEFAULT_NPROBE
    ef = op.get("value") if op.get("parameter") == "efSearch" and op.get("value") else DEFAULT_EF_SEARCH
    return int(nprobe), int(ef)


def describe(op: dict | None, index_type: str = "") -> str:
    """One line saying the operating point ``op`` (what ``index build`` and ``index info``
    print): the tuning half's recall and its lower bound, and the recall of the check half it
    was not tuned on; an unreached target is said with the best recall reached."""
    if not op:
        return (f"no operating point (built before recall was measured at build): searched at nprobe "
                f"{DEFAULT_NPROBE} / efSearch {DEFAULT_EF_SEARCH}; rebuild to measure it")
    k, qps = op["k"], op.get("queries_per_second")
    speed = f", {qps:,.0f} queries/s" if qps else ""
    tuned_on = op.get("tuned_on", op["queries"])
    on = f"on {tuned_on} of {op['queries']} held-out queries ({op['source']})"
    if op.get("exact"):
        return (f"exact search ({index_type or 'Flat'}): recall@{k} 1.0 by construction{speed}, on "
                f"{op['queries']} held-out queries ({op['source']})")
    at = f" at {op['parameter']} {op['value']}" if op.get("parameter") else ""
    bound = f", 95% lower bound {op['recall_lower_bound']:.3f}" if "recall_lower_bound" in op else ""
    check = op.get("check")
    checked = (f"; {check['recall']:.3f} on the other {check['queries']}, not tuned on" if check else "")
    if op["reached"]:
        return f"recall@{k} {op['recall']:.3f}{at} (target {op['target']}{bound}){speed}, {on}{checked}"
    return (f"target recall@{k} {op['target']} not reached by {index_type or 'this index'}: best "
            f"{op['recall']:.3f}{at}{bound}{speed}, {on}{checked}")
