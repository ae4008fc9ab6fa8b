"""Synthetic embedding vectors whose neighbour structure is checked against real passages
(issue 51 item 3): the 1M-passage corpus of ``benchmarks/index_recall.py --synthetic``.

The generator is fitted to a real sample (unit MiniLM vectors of real passages): their mean
and principal axes with each axis's standard deviation (so the synthetic vectors have the real
spectrum, hence its intrinsic dimension). A synthetic passage is a topic centre plus a
within-topic offset, both Gaussian along the real axes: ``mean + (sqrt(a)·z_topic +
sqrt(1 - a)·z_own)·std @ axes``, L2-normalised, :data:`TOPIC_SIZE` passages a topic (as the
real data's passages come in groups: 10 HotpotQA paragraphs, 20-25 retrieved passages a
question). ``a`` (the share of the variance between topics) sets how clustered, hence how easy,
the corpus is; it is chosen by bisection so that the **relative contrast** of held-out passages
(median over them of the mean distance to random corpus vectors divided by the distance to the
nearest neighbour; He, Kumar and Chang 2012, the standard hardness measure of nearest-neighbour
search) equals the real sample's **at equal N**. The local intrinsic dimension (MLE over the 20
nearest neighbours; Levina and Bickel 2005) and the ratio of the 10th to the 1st neighbour's
distance are reported beside it as independent checks.

Queries: ``passage-like`` are new points of existing topics (not in the corpus);
``question-like`` are new points of existing topics moved off by a further Gaussian offset of
scale ``b`` along the real axes, ``b`` chosen so that their relative contrast matches the real
questions' against the real passages (questions sit farther from any passage than passages
from each other).
"""

from __future__ import annotations

import numpy as np

TOPIC_SIZE = 16
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


def points(model: dict, centres: np.ndarray, topic: np.ndarray, a: float, seed: int, b: float = 0.0) -> np.ndarray:
    """Unit vectors of the topics ``topic`` (indices into ``centres``); ``b`` > 0 adds the
    question offset (``b`` times a real-spectrum Gaussian)."""
    rng = np.random.default_rng([seed, 2])
    z = rng.standard_normal((len(topic), len(model["std"])), dtype=np.float32)
    off = centres[topic] + np.sqrt(1 - a) * z * model["std"]
    if b:
        off += b * rng.standard_normal(off.shape, dtype=np.float32) * model["std"]
    return _unit(model["mean"] + off @ model["axes"])


def corpus(model: dict, n: int, a: float, seed: int = 0, block: int = 131_072):
    """Yield the ``n`` corpus vectors in blocks (topic ``i // TOPIC_SIZE`` for passage ``i``)
    and return nothing; :func:`topics` with the same ``seed`` gives their centres."""
    centres = topics(model, -(-n // TOPIC_SIZE), a, seed)
    for start in range(0, n, block):
        rows = np.arange(start, min(n, start + block))
        yield points(model, centres, rows // TOPIC_SIZE, a, seed * 1_000_003 + start)


def queries(model: dict, n_corpus: int, count: int, a: float, seed: int, b: float = 0.0) -> np.ndarray:
    """``count`` new points of the corpus's topics (seeded apart from the corpus)."""
    centres = topics(model, -(-n_corpus // TOPIC_SIZE), a, seed)
    topic = np.random.default_rng([seed, 3]).integers(0, len(centres), count)
    return points(model, centres, topic, a, seed + 7_777_777, b)


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
    """Fit the generator to ``real`` and choose ``a`` and ``b`` (see the module text) so the
    relative contrast of synthetic held-out passages and question-like queries equals the real
    ones' at N = len(real). Returns the model, ``a``, ``b`` and the real and synthetic
    difficulty figures side by side."""
    model, n = fit(real), len(real)
    hold = np.random.default_rng(seed).choice(n, min(holdout, n), replace=False)
    real_p = difficulty(real, real[hold], hold)
    real_q = difficulty(real, real_questions[:holdout])

    def synthetic(a):
        return np.concatenate(list(corpus(model, n, a, seed)))

    def passage_rc(a):
        v = synthetic(a)
        return difficulty(v, v[hold], hold)["relative_contrast"]

    a = _bisect(passage_rc, real_p["relative_contrast"], 0.0, 0.999, rising=True)
    v = synthetic(a)
    syn_p = difficulty(v, v[hold], hold)
    b = _bisect(lambda b: difficulty(v, queries(model, n, len(hold), a, seed, b))["relative_contrast"],
                real_q["relative_contrast"], 0.0, 3.0, rising=False)
    syn_q = difficulty(v, queries(model, n, len(hold), a, seed, b))
    return {"model": model, "a": round(a, 4), "b": round(b, 4), "n": n,
            "real": {"passages": real_p, "questions": real_q},
            "synthetic": {"passages": syn_p, "questions": syn_q}}
