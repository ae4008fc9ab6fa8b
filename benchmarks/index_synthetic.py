"""Synthetic embedding vectors whose neighbour structure is checked against real passages
(issue 51 item 3): the 1M-passage corpus of ``benchmarks/index_recall.py --synthetic``.

The generator is fitted to a real sample (unit MiniLM vectors of real passages): their mean
and principal axes with each axis's standard deviation, so the synthetic vectors have the real
spectrum. A synthetic passage is a topic centre plus a within-topic offset, both Gaussian along
the real axes: ``mean + (sqrt(a)·z_topic + sqrt(1 - a)·z_own)·std @ axes``, L2-normalised,
``m`` passages a topic (real passages come in groups too: the paragraphs of one article, the
passages retrieved for one question). Two parameters, matched to two statistics of the real
sample **at equal N** (held-out passages searched with themselves left out):

- ``a`` (the share of the variance between topics: how clustered, hence how easy) is bisected
  so that the **relative contrast** equals the real one (median over queries of the mean
  distance to random corpus vectors divided by the distance to the nearest neighbour; He,
  Kumar and Chang 2012, the standard hardness measure of nearest-neighbour search);
- ``m`` (the topic size) is the one of :data:`TOPIC_SIZES` whose **local intrinsic dimension**
  (MLE over the 20 nearest neighbours; Levina and Bickel 2005) is nearest the real one.

The ratio of the 10th to the 1st neighbour's distance is reported beside them, unmatched. The
queries the benchmark searches are new points of the generator (never in the corpus, never
tuned on); the build tunes on its own held-out queries.
"""

from __future__ import annotations

import numpy as np

TOPIC_SIZES = (2, 3, 4, 6, 8, 12, 16)
LID_K = 20


def fit(real: np.ndarray) -> dict:
    """Mean, principal axes (rows) and per-axis standard deviation of unit vectors ``real`` (n, d)."""
    mean = real.mean(0)
    _, s, vt = np.linalg.svd(real - mean, full_matrices=False)
    return {"mean": mean.astype(np.float32), "axes": vt.astype(np.float32),
            "std": (s / np.sqrt(len(real) - 1)).astype(np.float32)}


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def topics(model: dict, count: int, a: float, seed: int) -> np.ndarray:
    """``count`` topic centres (unnormalised offsets from the mean, real axes)."""
    z = np.random.default_rng([seed, 1]).standard_normal((count, len(model["std"])), dtype=np.float32)
    return np.sqrt(a) * z * model["std"]


def points(model: dict, centres: np.ndarray, topic: np.ndarray, a: float, seed: int) -> np.ndarray:
    """Unit vectors of the topics ``topic`` (indices into ``centres``)."""
    rng = np.random.default_rng([seed, 2])
    z = rng.standard_normal((len(topic), len(model["std"])), dtype=np.float32)
    off = centres[topic] + np.sqrt(1 - a) * z * model["std"]
    return _unit(model["mean"] + off @ model["axes"])


def corpus(model: dict, n: int, a: float, m: int, seed: int = 0, block: int = 131_072):
    """Yield the ``n`` corpus vectors in blocks (topic ``i // m`` for passage ``i``)."""
    centres = topics(model, -(-n // m), a, seed)
    for start in range(0, n, block):
        rows = np.arange(start, min(n, start + block))
        yield points(model, centres, rows // m, a, seed * 1_000_003 + start)


def queries(model: dict, n_corpus: int, count: int, a: float, m: int, seed: int) -> np.ndarray:
    """``count`` new points of the corpus's topics (seeded apart from the corpus)."""
    centres = topics(model, -(-n_corpus // m), a, seed)
    topic = np.random.default_rng([seed, 3]).integers(0, len(centres), count)
    return points(model, centres, topic, a, seed + 7_777_777)


def difficulty(vectors: np.ndarray, queries_: np.ndarray, exclude: np.ndarray | None = None, seed: int = 0) -> dict:
    """Relative contrast, local intrinsic dimension (MLE, :data:`LID_K`) and d10/d1 (medians
    over the queries) of ``queries_`` against ``vectors`` (unit rows; ``exclude[i]``: the row
    query ``i`` is, left out of its neighbours)."""
    import faiss

    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(np.ascontiguousarray(vectors))
    sims, ids = flat.search(np.ascontiguousarray(queries_), LID_K + 1)
    if exclude is not None:
        keep = ids != exclude[:, None]
        sims = np.stack([s[m][:LID_K] for s, m in zip(sims, keep)])
    sims = sims[:, :LID_K]
    dist = np.sqrt(np.maximum(2 - 2 * sims, 1e-12))
    sample = vectors[np.random.default_rng(seed).choice(len(vectors), min(2000, len(vectors)), replace=False)]
    mean_dist = np.sqrt(np.maximum(2 - 2 * queries_ @ sample.T, 0)).mean(1)
    lid = -1 / np.mean(np.log(dist / dist[:, -1:]), axis=1)
    return {"relative_contrast": round(float(np.median(mean_dist / dist[:, 0])), 4),
            "lid": round(float(np.median(lid)), 2),
            "d10_over_d1": round(float(np.median(dist[:, 9] / dist[:, 0])), 4)}


def _bisect(stat, goal: float, lo: float, hi: float, rising: bool, steps: int = 12) -> float:
    """The parameter in [lo, hi] where ``stat`` (monotone) meets ``goal``."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if (stat(mid) < goal) == rising:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def calibrate(real: np.ndarray, real_questions: np.ndarray, holdout: int = 1000, seed: int = 0) -> dict:
    """Fit the generator to ``real`` and choose ``a`` and ``m`` (module text) at N = len(real).
    Returns the model, ``a``, ``m``, each topic size's fit, and the real passages', real
    questions' and synthetic passages' difficulty figures side by side."""
    model, n = fit(real), len(real)
    hold = np.random.default_rng(seed).choice(n, min(holdout, n), replace=False)
    real_p = difficulty(real, real[hold], hold)

    def synthetic(a, m):
        return np.concatenate(list(corpus(model, n, a, m, seed)))

    def held_out(a, m):
        v = synthetic(a, m)
        return difficulty(v, v[hold], hold)

    fits = {}
    for m in TOPIC_SIZES:
        a = _bisect(lambda a: held_out(a, m)["relative_contrast"], real_p["relative_contrast"], 0.0, 0.999,
                    rising=True, steps=10)
        fits[m] = {"a": round(a, 4), **held_out(a, m)}
    m = min(fits, key=lambda m: abs(fits[m]["lid"] - real_p["lid"]))
    return {"model": model, "a": fits[m]["a"], "m": m, "n": n, "fits": fits,
            "real": {"passages": real_p, "questions": difficulty(real, real_questions[:holdout])},
            "synthetic": {"passages": {k: v for k, v in fits[m].items() if k != "a"}}}
