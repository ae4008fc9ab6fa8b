"""Operating-point rules compared on a built index, without building it again (issue 51).

Loads an index ``benchmarks/index_recall.py`` built and cached (``--work``): the 1M synthetic
``IVF4096,Flat`` (``--synthetic 1000000``) or the real passages' ``IVF512,Flat`` (HNSW's points
come from ``index_recall.py``'s builds), with the corpus's vectors, and the queries the build was never tuned on (new generator points;
the real questions). A pool of held-out queries is made once the way ``index build`` makes them
(:func:`specrag_batch.index.tuning.holdout`, :func:`~specrag_batch.index.tuning.question_like`
and the unchanged passages); each rule (:data:`RULES`) is then applied to ``--draws`` seeded
draws of held-out samples from the pool, and the recall@10 of the new queries at the value it
picks is reported: how often the rule's point reaches the target on queries it was not tuned on,
and what it costs (the value: nprobe / efSearch).

Recall of an IVF-Flat index at every nprobe at once: a query's approximate top k is the exact
top k of the vectors in the lists it probes, and it probes its ``nprobe`` nearest centroids; so a
passage of its exact top k (or one as similar as the k-th: duplicates) is found at ``nprobe``
exactly when its list is among the query's ``nprobe`` nearest centroids. Each query's share at
every nprobe follows from the rank of each such passage's list among its centroids (checked
against a FAISS search at one value: ``check``).

    python benchmarks/index_retune.py --synthetic 1000000     # minutes; the index is loaded, not built
    python benchmarks/index_retune.py                         # the real passages (IVF and HNSW)

Figures: printed and written to ``--out`` (default ``benchmarks/index_retune[_synthetic].json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

K = 10
EPS = 1e-5


def load_index(path: Path):
    import faiss

    meta = json.loads((path / "meta.json").read_text())
    return faiss.read_index(str(path / meta["data"] / meta["dense"]["file"])), meta


def corpus_vectors(parquet: Path) -> np.ndarray:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(parquet)
    out, start = None, 0
    for b in pf.iter_batches(columns=["emb"], batch_size=65_536):  # one batch of Arrow memory at a time
        col = b.column(0)
        block = col.values.to_numpy(zero_copy_only=False).reshape(len(col), -1)
        if out is None:
            out = np.empty((pf.metadata.num_rows, block.shape[1]), np.float32)
        out[start:start + len(block)] = block
        start += len(block)
    return out


def truth(vecs: np.ndarray, queries: np.ndarray, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the ids (-1 padded) of every passage as similar as its exact k-th (own row
    left out), and the exact top-k inner products (the ``tuning`` truth)."""
    from specrag_batch.index import tuning

    sims, ids = tuning.exact_neighbours([vecs], queries, K + 6)
    if exclude is not None:
        own = ids == exclude[:, None]
        sims, ids = np.where(own, -np.inf, sims), np.where(own, -1, ids)
        order = np.argsort(-sims, axis=1, kind="stable")
        sims, ids = np.take_along_axis(sims, order, 1), np.take_along_axis(ids, order, 1)
    kth = sims[:, K - 1:K]
    cand = np.where(sims >= kth - EPS, ids, -1)
    return cand, sims[:, :K]


class IvfShares:
    """Per-query recall@k of an IVF-Flat index at every nprobe (module text)."""

    def __init__(self, index):
        import faiss

        ivf = faiss.extract_index_ivf(index)
        self.nlist = int(ivf.nlist)
        self.centroids = ivf.quantizer.reconstruct_n(0, self.nlist)
        lists = ivf.invlists
        self.list_of = np.empty(int(index.ntotal), np.int32)
        for lst in range(self.nlist):
            size = lists.list_size(lst)
            if size:
                self.list_of[faiss.rev_swig_ptr(lists.get_ids(lst), size).copy()] = lst

    def table(self, queries: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """(q, nlist + 1) uint8: the query's found share x k at nprobe p (column p)."""
        out = np.zeros((len(queries), self.nlist + 1), np.uint8)
        for s in range(0, len(queries), 512):
            c = queries[s:s + 512] @ self.centroids.T
            ids = cand[s:s + 512]
            lst = np.where(ids >= 0, self.list_of[np.maximum(ids, 0)], 0)
            own = np.take_along_axis(c, lst, 1)
            rank = (c[:, None, :] > own[:, :, None]).sum(2)  # 0 = nearest centroid
            rank = np.where(ids >= 0, rank, self.nlist + 1)
            for i, r in enumerate(rank):
                counts = np.bincount(np.minimum(r, self.nlist) + 1, minlength=self.nlist + 2)[:self.nlist + 1]
                out[s + i] = np.minimum(np.cumsum(counts), K)
        return out


def lower(shares: np.ndarray, z: float) -> float:
    from specrag_batch.index import tuning

    return tuning.lower_bound(shares, z)


def point(table: np.ndarray, rows: np.ndarray, lo: int, hi: int, target: float, z: float) -> int:
    """The smallest value (the build's search, :func:`specrag_batch.index.tuning.smallest_reaching`)
    whose lower bound on ``rows`` of ``table`` reaches the target."""
    from specrag_batch.index import tuning

    return tuning.smallest_reaching(lambda v: lower(table[rows, v] / K, z), lo, hi, target)


RULES = {
    # name: (holdout, kinds, folds, z): the point is the largest over kinds and folds of the
    # smallest value whose bound on that fold of that kind reaches the target; folds 1: one
    # half of the held-out sample (the other is the check half, as in decision 013)
    "013: question-like, tuning half, 95% bound": (1000, ("ql",), "half", 1.645),
    "question-like, 99% bound": (1000, ("ql",), "half", 2.326),
    "question-like, 2 folds (cross-fit)": (1000, ("ql",), 2, 1.645),
    "question-like 4000, half": (4000, ("ql",), "half", 1.645),
    "question-like 4000, 2 folds": (4000, ("ql",), 2, 1.645),
    "unchanged passages, half, 95% bound": (1000, ("same",), "half", 1.645),
    "max(question-like, unchanged), half each": (1000, ("ql", "same"), "half", 1.645),
    "max(question-like, unchanged), 2 folds each": (1000, ("ql", "same"), 2, 1.645),
    "max(question-like, unchanged) 2000, 2 folds each": (2000, ("ql", "same"), 2, 1.645),
    "max(question-like, unchanged), 3 folds each": (1000, ("ql", "same"), 3, 1.645),
    "max(question-like, unchanged), 2 folds, 99% bound": (1000, ("ql", "same"), 2, 2.326),
    "max(question-like, unchanged), half, 99% bound": (1000, ("ql", "same"), "half", 2.326),
    "max(question-like, unchanged), 4 folds each": (1000, ("ql", "same"), 4, 1.645),
    "max(question-like, unchanged), 2 folds, joint 95% (Bonferroni /4)": (1000, ("ql", "same"), 2, 2.241),
    "max(question-like, unchanged) 2000, 2 folds, joint 95% (Bonferroni /4)": (2000, ("ql", "same"), 2, 2.241),
}


def simulate(tables: dict, new: np.ndarray, lo: int, hi: int, target: float, draws: int) -> dict:
    """Each rule on ``draws`` seeded samples of the pool: the values picked and the new queries'
    recall at them."""
    pool = len(next(iter(tables.values())))
    out = {}
    for name, (hold, kinds, folds, z) in RULES.items():
        values, recalls = [], []
        for d in range(draws):
            rng = np.random.default_rng([d, 51])
            rows = rng.choice(pool, min(hold, pool), replace=False)
            parts = [rows[: (len(rows) + 1) // 2]] if folds == "half" else np.array_split(rows, folds)
            v = max(point(tables[kind], part, lo, hi, target, z) for kind in kinds for part in parts)
            values.append(v)
            recalls.append(float(new[:, v].mean() / K))
        values, recalls = np.array(values), np.array(recalls)
        out[name] = {"value_median": int(np.median(values)), "value_p10_p90": [int(np.percentile(values, 10)),
                                                                            int(np.percentile(values, 90))],
                     "new_recall_median": round(float(np.median(recalls)), 4),
                     "new_recall_min": round(float(recalls.min()), 4),
                     "share_of_draws_reaching_target": round(float(np.mean(recalls >= target)), 3)}
        print(f"{name:52s} value {out[name]['value_median']:5d} {out[name]['value_p10_p90']}  new recall "
              f"median {out[name]['new_recall_median']:.4f} min {out[name]['new_recall_min']:.4f}  reach "
              f"{out[name]['share_of_draws_reaching_target']:.2f}", flush=True)
    return out


def pool_queries(vecs: np.ndarray, size: int, seed: int) -> dict:
    """The held-out pool: ``size`` passages sampled as ``index build`` samples them, unchanged
    and moved off themselves (``question_like``), with their own rows."""
    from specrag_batch.index import tuning

    rows, exclude = tuning.holdout([len(vecs)], size, seed + 1)
    passages = np.asarray(vecs[rows[0]], dtype=np.float32)
    return {"same": passages, "ql": tuning.question_like([vecs], passages, exclude, seed + 3), "exclude": exclude}


def ivf_tables(index, vecs, pool_size, new_q, cache: Path):
    """The held-out pool's tables (question-like, unchanged) and the new queries' (cached in ``cache``)."""
    t0 = time.perf_counter()
    shares = IvfShares(index)
    tables = {}
    files = {kind: cache / f"table-{kind}-{len(vecs)}-{size}.npy"
             for kind, size in (("ql", pool_size), ("same", pool_size), ("new", len(new_q)))}
    if not (files["ql"].exists() and files["same"].exists()):
        pool = pool_queries(vecs, pool_size, 0)
        for kind in ("ql", "same"):
            cand, _ = truth(vecs, pool[kind], pool["exclude"])
            np.save(files[kind], shares.table(pool[kind], cand))
            print(f"{kind}: table in {time.perf_counter() - t0:.0f} s", flush=True)
    if not files["new"].exists():
        cand, _ = truth(vecs, new_q, None)
        np.save(files["new"], shares.table(new_q, cand))
        print(f"new: table in {time.perf_counter() - t0:.0f} s", flush=True)
    tables = {kind: np.load(files[kind]) for kind in ("ql", "same")}
    return shares, tables, np.load(files["new"])


def build_point(index, vecs, shares: IvfShares, new: np.ndarray, new_q: np.ndarray, holdout: int = 1000,
                seed: int = 0) -> dict:
    """The point ``index build`` (seed ``seed``) picks under the rule in force, from tables of
    the build's own held-out queries (its seeds; the same values ``tuning.tune`` finds), and the
    new queries' recall there: from the table and from a FAISS search."""
    from specrag_batch.index import dense, tuning

    rows, exclude = tuning.holdout([len(vecs)], holdout, seed + 1)
    passages = np.asarray(vecs[rows[0]], dtype=np.float32)
    kinds = {"question-like": tuning.question_like([vecs], passages, exclude, seed + 3), "unchanged": passages}
    folds = tuning.split(len(passages), seed + 2, tuning.FOLDS)
    z = tuning.joint_z(len(kinds) * len(folds))
    picks = {}
    for name, q in kinds.items():
        table = shares.table(q, truth(vecs, q, exclude)[0])
        picks[name] = [tuning._smallest(lambda v: tuning.lower_bound(table[f, v] / K, z), 1, shares.nlist, 0.95)
                       for f in folds]
    value = max(v for p in picks.values() for v in p)
    ids = dense.search(index, new_q, K, nprobe=value)[1]
    t = tuning.similarities([vecs], new_q, tuning.exact_neighbours([vecs], new_q, K)[1])
    return {"rule": tuning.RULE, "z": round(z, 3), "picks": picks, "nprobe": value,
            "new_recall_table": round(float(new[:, value].mean() / K), 4),
            "new_recall_faiss": round(tuning.recall(tuning.similarities([vecs], new_q, ids), t), 4)}


def product_tune(index, vecs, new_q: np.ndarray, holdout: int = 1000, seed: int = 0) -> dict:
    """``tuning.tune`` itself on the loaded index, with the held-out queries ``index build``
    (seed ``seed``) makes (``build._tune``), and a FAISS search of the new queries at its point."""
    from specrag_batch.index import dense, tuning

    t0 = time.perf_counter()
    rows, exclude = tuning.holdout([len(vecs)], holdout, seed + 1)
    passages = np.asarray(vecs[rows[0]], dtype=np.float32)
    moved = tuning.question_like([vecs], passages, exclude, seed + 3)
    op = tuning.tune(index, [vecs], moved, exclude=exclude, unchanged=passages, seed=seed + 2,
                     source=tuning.QUESTION_LIKE)
    ids = dense.search(index, new_q, K, nprobe=op["value"])[1]
    t = tuning.similarities([vecs], new_q, tuning.exact_neighbours([vecs], new_q, K)[1])
    return {"operating_point": op, "new_recall_faiss": round(tuning.recall(tuning.similarities([vecs], new_q, ids), t), 4),
            "seconds": round(time.perf_counter() - t0, 1)}


def topic_mates(vecs, shares: IvfShares, new_q: np.ndarray, a: float, m: int, n: int, nprobe: int = 873,
                count: int = 1000) -> dict:
    """Recall at ``nprobe`` of the first ``count`` new generator points, as they are (a new point
    has all ``m`` passages of its topic in the corpus) and with one of its topic's passages left
    out of its results (``m - 1``, as a held-out passage has)."""
    q = new_q[:count]
    topic = np.random.default_rng([0, 3]).integers(0, -(-n // m), len(new_q))[:count]  # index_synthetic.queries
    mate = topic * m + np.random.default_rng(9).integers(0, m, count)
    full = shares.table(q, truth(vecs, q, None)[0])
    less = shares.table(q, truth(vecs, q, mate)[0])
    return {"nprobe": nprobe, "queries": count, "new_points": round(float(full[:, nprobe].mean() / K), 4),
            "new_points_one_mate_left_out": round(float(less[:, nprobe].mean() / K), 4)}


def check(index, vecs, queries, new, value) -> dict:
    """The table's recall of the first 300 new queries at ``value`` against a FAISS search."""
    from specrag_batch.index import dense, tuning

    q = queries[:300]
    ids = dense.search(index, q, K, nprobe=value)[1]
    t = tuning.similarities([vecs], q, tuning.exact_neighbours([vecs], q, K)[1])
    real = tuning.recall(tuning.similarities([vecs], q, ids), t)
    return {"nprobe": value, "faiss_search": round(real, 4), "table": round(float(new[:300, value].mean() / K), 4)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "specrag-batch" / "bench-index-recall")
    ap.add_argument("--synthetic", type=int, default=None)
    ap.add_argument("--pool", type=int, default=8000, help="held-out passages in the pool")
    ap.add_argument("--new", type=int, default=4000, help="new generator points (synthetic)")
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--tune", action="store_true", help="run tuning.tune itself on the loaded index (the "
                    "build's held-out queries; slower: it searches at each value tried) instead of the rules")
    ap.add_argument("--cache", type=Path, default=None, help="where the tables are kept (default: --work)")
    args = ap.parse_args(argv)
    args.cache = args.cache or args.work
    from benchmarks import index_recall_tables  # noqa: F401 - benchmarks importable
    from benchmarks import index_synthetic as syn

    from benchmarks.index_recall import host

    t0 = time.perf_counter()
    result = {**host(), "target": args.target, "draws": args.draws, "pool": args.pool}
    if args.synthetic:
        n = args.synthetic
        index, meta = load_index(args.work / f"index-synthetic-{n}")
        vecs = corpus_vectors(args.work / f"synthetic-{n}.parquet")
        cal = json.loads((ROOT / "benchmarks" / "index_recall_synthetic.json").read_text())["calibration"]
        real_p = np.load(args.work / f"passages-{cal['n']}.npy")
        new_q = syn.queries(syn.fit(real_p), n, args.new, cal["a"], cal["m"], 0)
        print(f"loaded in {time.perf_counter() - t0:.0f} s", flush=True)
        if args.tune:
            result.update(index_type=meta["dense"]["index_type"], passages=n, new_queries=len(new_q),
                          tune=product_tune(index, vecs, new_q))
            print(json.dumps(result["tune"]), flush=True)
            (args.out or ROOT / "benchmarks" / "index_retune_tune.json").write_text(json.dumps(result, indent=2) + "\n")
            return result
        shares, tables, new = ivf_tables(index, vecs, args.pool, new_q, args.cache)
        result.update(index_type=meta["dense"]["index_type"], passages=n, new_queries=len(new_q),
                      check=check(index, vecs, new_q, new, 873))
        print(json.dumps(result["check"]), flush=True)
        result["rules"] = simulate(tables, new, 1, shares.nlist, args.target, args.draws)
        result["build"] = build_point(index, vecs, shares, new, new_q)
        print(json.dumps(result["build"]), flush=True)
        result["topic_mates"] = {**topic_mates(vecs, shares, new_q, cal["a"], cal["m"], n),
                                 "held_out_passages": round(float(tables["same"][:, 873].mean() / K), 4)}
        print(json.dumps(result["topic_mates"]), flush=True)
    else:
        n = 14637
        vecs = np.load(args.work / f"passages-{n}.npy").astype(np.float32)
        new_q = np.load(args.work / "questions-5263.npy").astype(np.float32)
        index, meta = load_index(args.work / "index-IVF512_Flat")
        shares, tables, new = ivf_tables(index, vecs, args.pool, new_q, args.cache)
        result.update(index_type=meta["dense"]["index_type"], passages=n, new_queries=len(new_q),
                      check=check(index, vecs, new_q, new, 61))
        print(json.dumps(result["check"]), flush=True)
        result["rules"] = simulate(tables, new, 1, shares.nlist, args.target, args.draws)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    out = args.out or ROOT / "benchmarks" / ("index_retune_synthetic.json" if args.synthetic else "index_retune.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
