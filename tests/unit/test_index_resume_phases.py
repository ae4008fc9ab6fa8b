"""A whole-build resume (docs/retrieval.md, "Resuming a build"): a build killed in each phase
after embedding (training, adding, measuring recall, the passage store, BM25) and started
again does only the phases it had not finished, and gives the index an uninterrupted build
gives: the same passages in the same order, the same dense and BM25 results, the same
operating point. The kill is a ``KeyboardInterrupt`` raised inside the phase (Ctrl-C);
tests/integration/test_index_resume_sigkill.py kills a build process with SIGKILL."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from specrag_batch.index import build_index, get_retriever, open_index
from specrag_batch.index import dense, tuning
from specrag_batch.index.bm25 import BM25Builder

from .index_fakes import CountingEmbedder, patch_embedder, write_shards

build_mod = importlib.import_module("specrag_batch.index.build")
PHASES = ["trained", "added", "tuned", "store", "bm25"]
QUERIES = ["glacier ice melt", "ocean heat", "solar panels energy", "coastal flooding"]


@pytest.fixture(autouse=True)
def _fresh_index_cache():
    open_index.cache_clear()
    yield
    open_index.cache_clear()


class Calls:
    """Counts the calls of each phase's function (and interrupts the one named ``kill``)."""

    def __init__(self, monkeypatch, kill: str | None = None):
        self.count = dict.fromkeys(PHASES, 0)
        for phase, owner, name in (("trained", dense, "train"), ("added", dense, "add"), ("tuned", tuning, "tune"),
                                   ("store", build_mod, "write_store"), ("bm25", BM25Builder, "add")):
            monkeypatch.setattr(owner, name, self._wrap(phase, getattr(owner, name), phase == kill))

    def _wrap(self, phase, real, kill):
        def call(*args, **kwargs):
            self.count[phase] += 1
            if kill:
                raise KeyboardInterrupt(f"killed while {phase}")
            return real(*args, **kwargs)
        return call


def _build(corpus, out):
    return build_index(str(corpus), str(out), index_type="IVF8,Flat", batch_rows=1000, holdout=100)


def _same_index(a, b) -> None:
    ra, rb = open_index(str(a)), open_index(str(b))
    assert ra.store.get(range(len(ra.store))) == rb.store.get(range(len(rb.store)))
    timed = ("queries_per_second",)  # a measured speed: all else of the operating point is equal
    assert ({k: v for k, v in ra.meta["dense"]["operating_point"].items() if k not in timed}
            == {k: v for k, v in rb.meta["dense"]["operating_point"].items() if k not in timed})
    assert ra.meta["bm25"] == rb.meta["bm25"] and ra.meta["dense"]["trained_on"] == rb.meta["dense"]["trained_on"]
    da, db = ra.dense(), rb.dense()
    assert da.ntotal == db.ntotal
    vectors = np.stack([da.quantizer.reconstruct(i) for i in range(da.quantizer.ntotal)])
    assert np.array_equal(vectors, np.stack([db.quantizer.reconstruct(i) for i in range(db.quantizer.ntotal)]))
    for method in ("dense", "bm25", "hybrid"):
        for nprobe in (None, 1, 8):
            assert (get_retriever(str(a), method, nprobe=nprobe).search(QUERIES, 10)
                    == get_retriever(str(b), method, nprobe=nprobe).search(QUERIES, 10)), (method, nprobe)


@pytest.mark.parametrize("phase", PHASES)
def test_a_build_killed_in_a_phase_resumes_from_it_and_equals_an_uninterrupted_build(tmp_path, monkeypatch, phase):
    corpus = write_shards(tmp_path / "corpus", [150, 120, 130])
    patch_embedder(monkeypatch, CountingEmbedder())
    Calls(monkeypatch, kill=phase)
    with pytest.raises(KeyboardInterrupt):
        _build(corpus, tmp_path / "index")
    assert not (tmp_path / "index" / "meta.json").exists()

    monkeypatch.undo()
    again = patch_embedder(monkeypatch, CountingEmbedder())
    calls = Calls(monkeypatch)
    meta = _build(corpus, tmp_path / "index")
    assert again.texts == [] and meta["shards_skipped"] == 3  # embedding: done before the kill
    done_before = PHASES[:PHASES.index(phase)]
    assert meta["phases_reused"] == done_before
    assert {p: n > 0 for p, n in calls.count.items()} == {p: p not in done_before for p in PHASES}, calls.count
    assert calls.count["trained"] <= 1 and calls.count["added"] <= 1 and calls.count["tuned"] <= 1
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == [meta["data"], "meta.json"]  # work area gone

    monkeypatch.undo()
    patch_embedder(monkeypatch)
    _build(corpus, tmp_path / "clean")
    _same_index(tmp_path / "index", tmp_path / "clean")


def test_a_checkpoint_of_other_options_is_not_taken(tmp_path, monkeypatch):
    """Killed while adding to an IVF8 index; started again for IVF4: trained again, not taken."""
    corpus = write_shards(tmp_path / "corpus", [200])
    patch_embedder(monkeypatch)
    Calls(monkeypatch, kill="added")
    with pytest.raises(KeyboardInterrupt):
        _build(corpus, tmp_path / "index")
    monkeypatch.undo()
    patch_embedder(monkeypatch)
    calls = Calls(monkeypatch)
    meta = build_index(str(corpus), str(tmp_path / "index"), index_type="IVF4,Flat", holdout=50)
    assert calls.count["trained"] == 1 and meta["phases_reused"] == [] and meta["dense"]["index_type"] == "IVF4,Flat"
    assert open_index(str(tmp_path / "index")).dense().nlist == 4
