"""The operating point of an index: recall@k measured on the user's own corpus at build, and
the smallest search breadth reaching a target recall, as FAISS's auto-tuning
(``faiss.OperatingPoints``) picks operating points.

Held-out queries are the user's queries (``index build --queries``, embedded with the index's
model) or, by default, question-like queries made from a seeded sample of the corpus's own
passages (:data:`HOLDOUT`, fewer for a small corpus): each passage moved off itself along the
corpus's covariance by the distance at which passages have their nearest neighbour
(:func:`question_like`), its own passage left out of its lists. Each query is searched
exactly (``IndexFlatIP`` over the same vectors, block by block) and approximately; recall@k is the share of the exact top k the approximate top k holds
(a returned passage as similar as the exact k-th counts, so duplicate passages are no misses).

The searched parameter is ``nprobe`` for IVF indexes (1 to ``nlist``) and ``efSearch`` for
HNSW (``k`` to :data:`EF_SEARCH_MAX`). By default two kinds of held-out queries are measured:
the question-like ones and the same passages unchanged (a query drawn like the passages). Each
kind is split into :data:`FOLDS` disjoint folds (:func:`split`); the operating point is the
largest, over kinds and folds, of the smallest value whose lower confidence bound of the
fold's mean recall (:func:`lower_bound`) reaches the target, the bounds holding for all folds
at once at 95% (:func:`joint_z`, Bonferroni). Each fold's recall at the value the other fold
picked is the recall of queries that did not choose it (``check``). ``Flat`` is exact: recall
1.0 by construction (docs/decisions/014-operating-point-cross-fitted.md).

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
"""z of a one-sided 95% lower confidence bound (:func:`lower_bound`'s default)."""
CONFIDENCE = 0.95
"""Confidence with which the bounds of all folds of all kinds of held-out queries hold at once."""
FOLDS = 2
"""Disjoint folds of each kind of held-out queries, each of which the operating point must hold on."""
RULE = ("largest over kinds of held-out queries and 2 disjoint folds of the smallest value whose lower bound "
        "of recall reaches the target, the bounds holding jointly at 95% (Bonferroni)")
"""The rule :func:`tune` picks the operating point by (recorded in meta.json)."""
QUESTION_LIKE = "corpus passages moved off by the nearest-neighbour distance"
"""``source`` of held-out queries made by :func:`question_like` (the default)."""
UNCHANGED = "the same passages unchanged"
"""``source`` of the second kind of default held-out queries (the passages themselves)."""
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


def split(count: int, seed: int, folds: int = 2) -> list[np.ndarray]:
    """``folds`` disjoint folds (seeded) covering ``count`` held-out queries, the larger first;
    sorted row numbers."""
    order = np.random.default_rng(seed).permutation(count)
    return [np.sort(f) for f in np.array_split(order, folds)]


def joint_z(tests: int, confidence: float = CONFIDENCE) -> float:
    """z of one-sided lower bounds that hold for ``tests`` samples at once with ``confidence``
    (Bonferroni: each at ``1 - (1 - confidence) / tests``); 1.645 for one test at 95%."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(1 - (1 - confidence) / max(1, tests))


def smallest_reaching(bound: Callable[[int], float], lo: int, hi: int, target: float) -> int:
    """The smallest value in [lo, hi] whose ``bound`` reaches ``target`` (doubled until reached,
    then bisected: recall grows with nprobe / efSearch); when none does, the smallest value
    giving the best bound of those tried."""
    value, previous, tried = lo, None, {}

    def at(v: int) -> float:
        tried.setdefault(v, bound(v))
        return tried[v]

    while at(value) < target and value < hi:
        previous, value = value, min(hi, value * 2)
    if at(value) >= target and previous is not None:
        below, above = previous, value
        while above - below > 1:
            mid = (below + above) // 2
            below, above = (below, mid) if at(mid) >= target else (mid, above)
        return above
    if at(value) >= target:
        return value
    best = max(tried.values())
    return min(v for v, b in tried.items() if b == best)


def tune(index, shards: Sequence[np.ndarray], queries: np.ndarray, *, exclude: np.ndarray | None = None,
         unchanged: np.ndarray | None = None, target: float = TARGET_RECALL, k: int = RECALL_K,
         source: str = "corpus sample", seed: int = 0, log: Callable[[str], None] | None = None) -> dict:
    """The operating point of ``index`` (built over ``shards``) on ``queries`` (float32 (q, d),
    L2-normalised; ``exclude[i]``: the row of the passage query ``i`` is made from, left out of
    its lists) and, when given, on the ``unchanged`` held-out passages (rows ``exclude``).

    Each kind of held-out query is split (:func:`split`, ``seed``) into :data:`FOLDS` disjoint
    folds. The operating point is the **largest**, over kinds and folds, of the smallest search
    parameter whose recall@``k`` against exact search on that fold has a one-sided lower bound
    (:func:`lower_bound`) of at least ``target``, the bounds holding for all those folds at once
    with 95% confidence (:func:`joint_z`): a point no single sample chose alone (cross-fitting),
    for queries between passages (questions) and queries drawn like the passages alike (a fold
    reaching no value gives the smallest with its best bound). ``check``: each fold's recall at
    the value the other folds picked (queries that did not choose it).

    Returns ``meta.json``'s ``dense.operating_point``: ``parameter`` (``nprobe``, ``efSearch``
    or None), ``value``, ``recall`` (the lowest mean recall of a kind at ``value``),
    ``recall_lower_bound`` (the lowest fold bound), ``z``, ``k``, ``target``, ``reached``,
    ``check`` (``queries``, ``recall``, ``recall_lower_bound`` at 95%; None for fewer than
    :data:`FOLDS` queries), ``picks`` (per kind, each fold's value), ``queries_per_second``
    (searching ``queries`` at ``value``), ``queries``, ``tuned_on``, ``folds``, ``rule``,
    ``source`` (one per kind, joined by `` + ``), ``exact`` (``Flat``: recall 1.0 by
    construction) and ``tried`` (each value searched, the lowest mean and fold bound of the
    kinds searched there)."""
    name, lo, hi = search_parameter(index)
    n = int(index.ntotal)
    kk = max(0, min(k, n - (1 if exclude is not None else 0)))
    depth = max(1, min(n, kk + (1 if exclude is not None else 0)))
    exact = _is_exact(index)
    kinds = [queries] + ([unchanged] if unchanged is not None else [])
    folds = split(len(queries), seed, FOLDS) if len(queries) >= FOLDS else [np.arange(len(queries))]
    z = joint_z(len(kinds) * len(folds))
    truths = [None if exact else similarities(shards, q, top_k(exact_neighbours(shards, q, depth)[1], exclude, kk))
              for q in kinds]
    measured: dict[tuple[int, int | None], tuple[np.ndarray, float]] = {}

    def shares(kind: int, value: int | None) -> np.ndarray:
        """Each query's recall of kind ``kind`` at ``value`` (searched once)."""
        if (kind, value) not in measured:
            params = {"nprobe": value} if name == "nprobe" else {"ef_search": value} if name else {}
            t0 = time.perf_counter()
            ids = dense.search(index, kinds[kind], depth, **params)[1]
            seconds = time.perf_counter() - t0
            found = None if exact else similarities(shards, kinds[kind], top_k(ids, exclude, kk))
            measured[kind, value] = (np.ones(len(ids)) if exact else recall_shares(found, truths[kind]), seconds)
        return measured[kind, value][0]

    def bound(kind: int, fold: np.ndarray, value: int | None) -> float:
        return lower_bound(shares(kind, value)[fold], z)

    lo = max(lo, kk) if name == "efSearch" else lo
    picks = [[None if name is None else smallest_reaching(lambda v: bound(i, f, v), lo, hi, target) for f in folds]
             for i in range(len(kinds))]
    value = max(picks[0] + [v for p in picks[1:] for v in p]) if name else None
    values = sorted({v for kind, v in measured}, key=lambda v: -1 if v is None else v)

    def mean(a):
        return float(a.mean()) if len(a) else 1.0

    def worst(v, kinds_at=range(len(kinds))):
        return (min(mean(shares(i, v)) for i in kinds_at), min(bound(i, f, v) for i in kinds_at for f in folds))

    recall_, bound_ = worst(value)
    out_of_fold = [shares(i, max([p for j, p in enumerate(picks[i]) if j != m] or [value]))[f]
                   for i in range(len(kinds)) for m, f in enumerate(folds)] if len(folds) > 1 else []
    oof = np.concatenate(out_of_fold) if out_of_fold else np.zeros(0)
    seconds = measured[0, value][1]
    return {"parameter": name, "value": value, "recall": round(recall_, 4), "recall_lower_bound": round(bound_, 4),
            "z": round(z, 3), "k": kk, "target": target, "reached": bound_ >= target,
            "check": {"queries": int(len(oof)), "recall": round(mean(oof), 4),
                      "recall_lower_bound": round(lower_bound(oof), 4)} if len(oof) else None,
            "picks": picks, "queries_per_second": round(len(queries) / seconds, 1) if seconds > 0 else None,
            "queries": int(len(queries)), "tuned_on": int(len(queries)) * len(kinds), "folds": len(folds),
            "rule": RULE, "source": source + (f" + {UNCHANGED}" if unchanged is not None else ""), "exact": exact,
            "tried": [[v, *(round(x, 4) for x in worst(v, [i for i, w in measured if w == v]))] for v in values]}


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
    print): the recall at it and its lower bound, and the out-of-fold recall (decision 013's
    points: the check half's); an unreached target is said with the best recall reached."""
    if not op:
        return (f"no operating point (built before recall was measured at build): searched at nprobe "
                f"{DEFAULT_NPROBE} / efSearch {DEFAULT_EF_SEARCH}; rebuild to measure it")
    k, qps = op["k"], op.get("queries_per_second")
    speed = f", {qps:,.0f} queries/s" if qps else ""
    tuned_on = op.get("tuned_on", op["queries"])
    on = (f"on {op['queries']} held-out queries ({op['source']}) in {op['folds']} folds" if "folds" in op else
          f"on {tuned_on} of {op['queries']} held-out queries ({op['source']})")
    if op.get("exact"):
        return (f"exact search ({index_type or 'Flat'}): recall@{k} 1.0 by construction{speed}, on "
                f"{op['queries']} held-out queries ({op['source']})")
    at = f" at {op['parameter']} {op['value']}" if op.get("parameter") else ""
    joint = "joint 95% lower bound" if "folds" in op else "95% lower bound"
    bound = f", {joint} {op['recall_lower_bound']:.3f}" if "recall_lower_bound" in op else ""
    check = op.get("check")
    checked = ((f"; out of fold {check['recall']:.3f} on {check['queries']}" if "folds" in op else
                f"; {check['recall']:.3f} on the other {check['queries']}, not tuned on") if check else "")
    if op["reached"]:
        return f"recall@{k} {op['recall']:.3f}{at} (target {op['target']}{bound}){speed}, {on}{checked}"
    return (f"target recall@{k} {op['target']} not reached by {index_type or 'this index'}: best "
            f"{op['recall']:.3f}{at}{bound}{speed}, {on}{checked}")
