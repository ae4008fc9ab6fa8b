"""K-Means over all rows of a chunk at once, giving scikit-learn's partitions (paper §3.2's
clustering step of :mod:`specrag_batch.stages.sampling`; issue 38 item 1).

Per row, scikit-learn's ``KMeans(n_clusters=k, random_state=seed, n_init=n_init)`` costs about
0.2 s at n_init = 10, almost all of it per-call overhead on 10 points. :func:`kmeans_labels`
runs the same algorithm for every row of a chunk and every restart in one set of numpy array
operations (rows padded to the chunk's largest N and masked), reproducing scikit-learn's steps:

- the data centred on its mean, the tolerance ``tol`` times the mean per-feature variance;
- k-means++ with ``2 + int(log k)`` local trials, drawing from ``RandomState(seed)`` exactly as
  scikit-learn does (one uniform for the first centre, ``2 + int(log k)`` per further centre,
  restart after restart), so the same seed picks the same initial centres;
- Lloyd iterations (empty clusters aside): stop when the labels repeat (strict) or the squared
  centre shift is within the tolerance (then one more assignment to the final centres), at most
  ``max_iter``;
- of the ``n_init`` restarts, a later one replaces the best so far only when its inertia is
  lower *and* its partition differs (scikit-learn's ``_is_same_clustering``).

Where the arithmetic could decide differently from scikit-learn's (its BLAS calls sum in
another order), scikit-learn decides: a k-means++ draw within rounding of a boundary, or two
candidate centres within rounding of a tie (exact ties are common: two close points far from
the first centre give the same potential whichever is taken), and the row's initial centres
come from scikit-learn's own ``kmeans_plusplus`` on the same centred data and random stream
(:data:`SEEDED_BY_SKLEARN`); two cluster centres within rounding of a tie for a point, a
centre shift within rounding of the tolerance, two different partitions with inertias within
rounding of each other, or an empty cluster (scikit-learn relocates it), and the whole row is
clustered by scikit-learn (:data:`BY_SKLEARN`). So a row gets scikit-learn's partition either
way; only the cost differs.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Sequence

import numpy as np

BATCHED, SEEDED_BY_SKLEARN, BY_SKLEARN = 0, 1, 2
"""How :func:`kmeans_labels` clustered a row (module docstring)."""

EPS = 1e-9
"""Relative margin under which two computed values count as tied (rounding differs from
scikit-learn's at about 1e-16 relative; a margin this wide is still met by chance about once in
10^9 decisions)."""


def sklearn_labels(x: np.ndarray, k: int, seed: int, n_init: int = 10) -> np.ndarray:
    """scikit-learn's ``KMeans(n_clusters=k, random_state=seed, n_init=n_init).fit_predict``
    on the float64 copy of ``x`` (N, d): the per-row reference (and the fallback) of
    :func:`kmeans_labels`. Warnings about near-duplicate points are silenced."""
    from sklearn.cluster import KMeans

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning on near-duplicate points
        km = KMeans(n_clusters=k, random_state=seed, n_init=n_init)
        return km.fit_predict(np.asarray(x, dtype=np.float64))


@lru_cache(maxsize=64)
def _first_center_cdf(n: int) -> np.ndarray:
    """The cdf ``RandomState.choice(n, p=ones(n) / n)`` searches, computed as numpy does."""
    p = np.ones(n, dtype=np.float64) / float(n)
    cdf = p.cumsum()
    cdf /= cdf[-1]
    return cdf


def _point_ids(x: np.ndarray) -> list[int]:
    """An id per row of ``x``, equal for equal rows (compared by value: -0.0 == 0.0)."""
    ids: dict[bytes, int] = {}
    return [ids.setdefault(row.tobytes(), len(ids)) for row in np.ascontiguousarray(x) + 0.0]


def _sklearn_plusplus(x: np.ndarray, k: int, seed: int, n_init: int) -> np.ndarray:
    """The initial centres' indices (n_init, k) scikit-learn's ``KMeans`` draws for the centred
    data ``x``: ``kmeans_plusplus`` restart after restart on one ``RandomState(seed)``."""
    from sklearn.cluster import kmeans_plusplus

    random_state = np.random.RandomState(seed)
    return np.stack([kmeans_plusplus(x, k, random_state=random_state)[1] for _ in range(n_init)])


def kmeans_labels(blocks: Sequence[np.ndarray], ks: Sequence[int], seeds: Sequence[int],
                  n_init: int = 10, max_iter: int = 300,
                  tol: float = 1e-4) -> tuple[list[np.ndarray], np.ndarray]:
    """scikit-learn's K-Means labels for many rows at once (module docstring).

    Args:
        blocks: one float array (N_i, d) per row, N_i >= k_i (the same d for all rows). A row
            with fewer distinct points than k_i is clustered by scikit-learn (an empty cluster);
            :func:`specrag_batch.stages.sampling.cluster_rows` clamps k_i before.
        ks: clusters per row, k_i >= 1.
        seeds: ``random_state`` per row (an int for ``numpy.random.RandomState``).
        n_init, max_iter, tol: as scikit-learn's ``KMeans``.

    Returns:
        (labels, route): one int label array (N_i,) per row, the labels scikit-learn's
        ``fit_predict`` gives up to a permutation of the label ids; and an int array, how each
        row was clustered (:data:`BATCHED`, :data:`SEEDED_BY_SKLEARN` or :data:`BY_SKLEARN`).
    """
    out: list[np.ndarray | None] = [None] * len(blocks)
    route = np.full(len(blocks), BATCHED)
    ks = [int(k) for k in ks]
    for k in sorted(set(ks)):
        idx = [i for i, ki in enumerate(ks) if ki == k]
        if k == 1:
            for i in idx:
                out[i] = np.zeros(len(blocks[i]), dtype=np.int32)
            continue
        labels, ok, seeded = _batch(idx, blocks, k, seeds, n_init, max_iter, tol)
        for j, i in enumerate(idx):
            if ok[j]:
                out[i] = labels[j, :len(blocks[i])]
                route[i] = SEEDED_BY_SKLEARN if seeded[j] else BATCHED
            else:
                out[i] = sklearn_labels(blocks[i], k, int(seeds[i]), n_init)
                route[i] = BY_SKLEARN
    return out, route  # type: ignore[return-value]


def _batch(idx, blocks, k, seeds, n_init, max_iter, tol):
    """Rows ``idx`` of ``blocks`` with k clusters: (labels (B, N_max), ok (B,), seeded (B,))."""
    b_rows = len(idx)
    n = np.array([len(blocks[i]) for i in idx])
    n_max, d = int(n.max()), blocks[idx[0]].shape[1]
    x = np.zeros((b_rows, n_max, d))
    xsq = np.zeros((b_rows, n_max))
    tol_b = np.zeros(b_rows)
    dup = np.zeros((b_rows, n_max), dtype=np.int64)       # identical points share an id
    for j, i in enumerate(idx):  # per row, as KMeans.fit does it: the same bits
        row = np.array(blocks[i], dtype=np.float64, order="C")
        tol_b[j] = np.mean(np.var(row, axis=0)) * tol
        dup[j, :n[j]] = _point_ids(row)
        row -= row.mean(axis=0)
        x[j, :n[j]] = row
        xsq[j, :n[j]] = np.einsum("ij,ij->i", row, row)   # row_norms(X, squared=True)
    mask = np.arange(n_max)[None, :] < n[:, None]          # (B, N)
    w = mask.astype(np.float64)
    scale = xsq.max(1) + np.finfo(float).tiny              # (B,): the distances' magnitude
    ok = np.ones(b_rows, dtype=bool)

    chosen, seeded = _kmeans_plusplus(x, xsq, w, n, k, [seeds[i] for i in idx], n_init, dup, scale)
    for j in np.flatnonzero(seeded):
        chosen[j] = _sklearn_plusplus(x[j, :n[j]], k, int(seeds[idx[j]]), n_init)
    centers = x[np.arange(b_rows)[:, None, None], chosen]  # (B, R, k, d)
    labels, centers = _lloyd(x, w, centers, k, max_iter, tol_b, scale, ok)
    inertia = _inertia(x, xsq, w, centers, labels)         # (B, R)
    best, best_inertia = labels[:, 0], inertia[:, 0]
    for r in range(1, n_init):                             # scikit-learn's order
        different = ~_same_clustering(labels[:, r], best, mask, k)
        near = np.abs(inertia[:, r] - best_inertia) <= EPS * scale * n
        ok &= ~(different & near)
        take = (inertia[:, r] < best_inertia) & different
        best = np.where(take[:, None], labels[:, r], best)
        best_inertia = np.where(take, inertia[:, r], best_inertia)
    return best, ok, seeded


def _kmeans_plusplus(x, xsq, w, n, k, seeds, n_init, dup, scale):
    """The initial centres' indices (B, R, k) of the R = n_init restarts, drawn as
    scikit-learn's ``_kmeans_plusplus`` draws them from ``RandomState(seed)``, and a bool (B,)
    for the rows with a draw or a candidate choice within rounding of a tie (their indices are
    to be taken from scikit-learn)."""
    b_rows, n_max, d = x.shape
    trials = 2 + int(np.log(k))
    per_init = 1 + (k - 1) * trials
    u = np.stack([np.random.RandomState(int(s)).random_sample(n_init * per_init) for s in seeds])
    u = u.reshape(b_rows, n_init, per_init)
    cdf = np.full((b_rows, n_max), np.inf)
    for j in range(b_rows):
        cdf[j, :n[j]] = _first_center_cdf(int(n[j]))
    tied = np.zeros(b_rows, dtype=bool)
    rows, rr = np.arange(b_rows)[:, None], np.arange(n_init)[None, :]
    chosen = np.zeros((b_rows, n_init, k), dtype=np.int64)
    chosen[:, :, 0] = (cdf[:, None, :] <= u[:, :, :1]).sum(-1)        # searchsorted side=right
    closest = _sq_distances(x[rows, chosen[:, :, 0]][:, :, None, :], x, xsq)[:, :, 0] * w[:, None, :]
    pot = closest.sum(-1)                                             # (B, R)
    bound = (EPS * scale * n)[:, None, None]
    for c in range(1, k):
        rand = u[:, :, 1 + (c - 1) * trials:1 + c * trials] * pot[..., None]   # (B, R, L)
        cum = np.where(w[:, None, :] > 0, np.cumsum(closest, -1), np.inf)
        tied |= (np.abs(cum[:, :, None, :] - rand[..., None]).min(-1) <= bound).any((1, 2))
        cand = np.minimum((cum[:, :, None, :] < rand[..., None]).sum(-1), n[:, None, None] - 1)
        dist = _sq_distances(x[rows[:, :, None], cand], x, xsq)        # (B, R, L, N)
        dist = np.minimum(closest[:, :, None, :], dist) * w[:, None, None, :]
        cand_pot = dist.sum(-1)                                       # (B, R, L)
        pick = cand_pot.argmin(-1)                                    # (B, R), first on ties
        low = np.take_along_axis(cand_pot, pick[..., None], -1)
        cand_dup = np.take_along_axis(np.broadcast_to(dup[:, None, :], cand.shape[:2] + (n_max,)), cand, -1)
        pick_dup = np.take_along_axis(cand_dup, pick[..., None], -1)
        tied |= ((np.abs(cand_pot - low) <= bound) & (cand_dup != pick_dup)).any((1, 2))
        chosen[:, :, c] = np.take_along_axis(cand, pick[..., None], -1)[..., 0]
        closest = dist[rows, rr, pick]
        pot = low[..., 0]
    return chosen, tied


def _sq_distances(points, x, xsq):
    """Squared distances (B, R, P, N) of ``points`` (B, R, P, d) to every point of ``x``
    (B, N, d), as scikit-learn's ``_euclidean_distances``: -2 p.x + |p|^2 + |x|^2, clipped at 0."""
    b_rows, r, p, d = points.shape
    dot = np.matmul(points.reshape(b_rows, r * p, d), x.transpose(0, 2, 1)).reshape(b_rows, r, p, -1)
    psq = np.einsum("brpd,brpd->brp", points, points)
    return np.maximum(-2 * dot + psq[..., None] + xsq[:, None, None, :], 0)


def _assign(x, w, centers, scale, ok, active):
    """scikit-learn's E step: labels (B, R, N) = argmin_j |c_j|^2 - 2 x.c_j (first on ties);
    ``ok`` cleared for a row where an ``active`` restart has a point within rounding of a tie."""
    b_rows, r, k, d = centers.shape
    dot = np.matmul(centers.reshape(b_rows, r * k, d), x.transpose(0, 2, 1)).reshape(b_rows, r, k, -1)
    csq = np.einsum("brkd,brkd->brk", centers, centers)
    dist = csq[..., None] - 2 * dot                                    # (B, R, k, N)
    labels = dist.argmin(2)
    part = np.sort(dist, axis=2)
    near = ((part[:, :, 1] - part[:, :, 0]) <= EPS * scale[:, None, None]) & (w[:, None, :] > 0)
    ok &= ~(near.any(-1) & active).any(1)
    return labels


def _lloyd(x, w, centers, k, max_iter, tol_b, scale, ok):
    """scikit-learn's ``_kmeans_single_lloyd`` for every row and restart: (labels (B, R, N),
    final centres (B, R, k, d)); ``ok`` cleared for a row where an active restart empties a
    cluster or meets the tolerance within rounding."""
    b_rows, r, _, d = centers.shape
    active = np.ones((b_rows, r), dtype=bool)
    strict = np.zeros((b_rows, r), dtype=bool)
    labels_old = np.full((b_rows, r, x.shape[1]), -1)
    final = labels_old.copy()
    for _ in range(max_iter):
        labels = _assign(x, w, centers, scale, ok, active)
        onehot = (labels[:, :, None, :] == np.arange(k)[None, None, :, None]) * w[:, None, None, :]
        counts = onehot.sum(-1)                                        # (B, R, k)
        ok &= ~((counts == 0) & active[..., None]).any((1, 2))         # scikit-learn relocates
        sums = np.matmul(onehot.reshape(b_rows, r * k, -1), x).reshape(b_rows, r, k, d)
        new = sums * (1.0 / np.maximum(counts, 1))[..., None]
        shift = (np.sqrt(((new - centers) ** 2).sum(-1)) ** 2).sum(-1)  # (B, R)
        same = ((labels == labels_old) | (w[:, None, :] == 0)).all(-1)
        within = shift <= tol_b[:, None]
        ok &= ~(active & ~same & (np.abs(shift - tol_b[:, None]) <= EPS * tol_b[:, None])).any(1)
        centers = np.where(active[..., None, None], new, centers)
        stop = active & (same | within)
        strict |= active & same
        final = np.where((active & same)[..., None], labels, final)
        labels_old = np.where(active[..., None], labels, labels_old)
        active &= ~stop
        if not active.any():
            break
    # not strictly converged (tolerance or max_iter): assign once more to the final centres
    relabel = _assign(x, w, centers, scale, ok, ~strict)
    return np.where(strict[..., None], final, relabel), centers


def _inertia(x, xsq, w, centers, labels):
    """Sum of squared distances (B, R) of each point to its centre."""
    b_rows, r, k, d = centers.shape
    dot = np.matmul(centers.reshape(b_rows, r * k, d), x.transpose(0, 2, 1)).reshape(b_rows, r, k, -1)
    csq = np.einsum("brkd,brkd->brk", centers, centers)
    dist = csq[..., None] - 2 * dot
    own = np.take_along_axis(dist, labels[:, :, None, :], 2)[:, :, 0]  # (B, R, N)
    return ((own + xsq[:, None, :]) * w[:, None, :]).sum(-1)


def _same_clustering(labels1, labels2, mask, k):
    """scikit-learn's ``_is_same_clustering(labels1, labels2)`` per row (B,): every cluster of
    ``labels1`` lies within one cluster of ``labels2``."""
    same = np.ones(labels1.shape[0], dtype=bool)
    for a in range(k):
        sel = (labels1 == a) & mask
        low = np.where(sel, labels2, k).min(-1)
        high = np.where(sel, labels2, -1).max(-1)
        same &= ~sel.any(-1) | (low == high)
    return same
