"""``index build`` over a corpus of shards (docs/retrieval.md), with a stand-in encoder
(tests/unit/index_fakes.py): a prefix of shards streams into one index serving dense, BM25 and
hybrid retrieval; a build stopped halfway resumes without embedding finished shards again; a
corpus bringing its own vectors is not embedded; the default index type follows corpus size;
an index of the first layout still loads."""

from __future__ import annotations

import io
import json

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.config import RunConfig
from specrag_batch.config.hashing import hashed_view
from specrag_batch.index import IndexFormatError, build_index, get_retriever, open_index
from specrag_batch.index.dense import check_buildable, default_index_type
from specrag_batch.index.layout import IndexBuildError
from specrag_batch.core.records import QueryRow
from specrag_batch.stages.retrieval import Retrieval

from .index_fakes import DIM, CountingEmbedder, fake_embed, passages, patch_embedder, write_shards


@pytest.fixture(autouse=True)
def _fresh_index_cache():
    open_index.cache_clear()
    yield
    open_index.cache_clear()


def test_a_prefix_of_shards_serves_dense_bm25_and_hybrid(tmp_path, monkeypatch):
    patch_embedder(monkeypatch)
    corpus = write_shards(tmp_path / "corpus", [30, 40, 25])  # one shard in a subdirectory
    (tmp_path / "corpus" / "_SUCCESS").write_text("")  # not a .parquet file: not a shard
    meta = build_index(str(corpus), str(tmp_path / "index"))
    assert meta["documents"] == 95 and meta["shards"] == 3 and meta["dense"]["index_type"] == "Flat"
    assert meta["bm25"]["documents"] == 95 and meta["shards_embedded"] == 3
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == [meta["data"], "meta.json"]  # work area gone
    ids = {m: [[d.doc_id for d in docs] for docs in get_retriever(str(tmp_path / "index"), m).search(
        ["glacier ice melt", "solar panels energy"], 3)] for m in ("dense", "bm25", "hybrid")}
    for method, (glacier, solar) in ids.items():  # topic 0 = glacier, topic 3 = solar (index_fakes.TOPICS)
        assert len(glacier) == 3 and all(int(d[1:]) % 6 == 0 for d in glacier), (method, glacier)
        assert all(int(d[1:]) % 6 == 3 for d in solar), (method, solar)
    assert get_retriever(str(tmp_path / "index"), "bm25").search(["xyzzy"], 3) == [[]]


def test_the_retrieval_stage_searches_by_the_configured_method(tmp_path, monkeypatch):
    patch_embedder(monkeypatch)
    build_index(str(write_shards(tmp_path / "corpus", [20, 20])), str(tmp_path / "index"))
    for method in ("dense", "bm25", "hybrid"):
        cfg = RunConfig.model_validate({"retrieval": {"index": str(tmp_path / "index"), "method": method, "top_n": 4}})
        rows = [QueryRow(row_index=0, query_id="q", query="sea level coastal flooding", task="qa")]
        Retrieval(cfg)(rows)
        assert rows[0].error is None and rows[0].num_documents == 4
        assert all(int(d.doc_id[1:]) % 6 == 5 for d in rows[0].top_documents), method


def test_new_retrieval_fields_keep_the_config_hash():
    """Runs started before retrieval.method and the search parameters existed resume."""
    view = hashed_view(RunConfig().model_dump(mode="json"))["retrieval"]
    assert not {"method", "nprobe", "ef_search", "rrf_k", "hybrid_candidates"} & set(view)
    assert RunConfig.model_validate({"retrieval": {"method": "bm25"}}).config_hash() != RunConfig().config_hash()


def test_a_build_stopped_halfway_resumes_without_embedding_finished_shards(tmp_path, monkeypatch):
    corpus = write_shards(tmp_path / "corpus", [10, 12, 14, 16], nested=False)
    killed = patch_embedder(monkeypatch, CountingEmbedder(fail_after=2))  # batch_rows 10+: one call per shard
    with pytest.raises(KeyboardInterrupt):
        build_index(str(corpus), str(tmp_path / "index"), batch_rows=1000)
    assert not (tmp_path / "index" / "meta.json").exists()  # no index yet, only the work area
    assert len(list((tmp_path / "index" / "_build" / "_done").iterdir())) == 2
    resumed = patch_embedder(monkeypatch, CountingEmbedder())
    meta = build_index(str(corpus), str(tmp_path / "index"), batch_rows=1000)
    assert meta["shards_skipped"] == 2 and meta["shards_embedded"] == 2
    first_two = set(killed.texts)
    assert len(resumed.texts) == 14 + 16 and not first_two & set(resumed.texts)
    clean = patch_embedder(monkeypatch, CountingEmbedder())
    build_index(str(corpus), str(tmp_path / "clean"), batch_rows=1000)
    assert len(clean.texts) == 52
    query = ["ocean heat content", "forest drought"]
    a = open_index(str(tmp_path / "index")).store.get(range(52))
    b = open_index(str(tmp_path / "clean")).store.get(range(52))
    assert a == b
    for method in ("dense", "bm25"):
        assert (get_retriever(str(tmp_path / "index"), method).search(query, 5)
                == get_retriever(str(tmp_path / "clean"), method).search(query, 5))


def test_a_changed_shard_is_embedded_again_on_resume(tmp_path, monkeypatch):
    corpus = write_shards(tmp_path / "corpus", [10, 10], nested=False)
    patch_embedder(monkeypatch, CountingEmbedder(fail_after=1))
    with pytest.raises(KeyboardInterrupt):
        build_index(str(corpus), str(tmp_path / "index"))
    pq.write_table(passages(100, 11), corpus / "p0.parquet")  # the finished shard changed
    again = patch_embedder(monkeypatch, CountingEmbedder())
    meta = build_index(str(corpus), str(tmp_path / "index"))
    assert meta["shards_skipped"] == 0 and len(again.texts) == 21 and meta["documents"] == 21


def _vector_corpus(path, n: int, width: int = DIM, seed: int = 0, list_type=None):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(8, width))
    vecs = (centers[rng.integers(0, 8, n)] + 0.3 * rng.normal(size=(n, width))).astype(np.float32)
    typ = list_type or pa.list_(pa.float32(), width)
    emb = pa.array(list(vecs), type=typ) if list_type else pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), width)
    table = passages(0, n).append_column("emb", emb)
    pq.write_table(table, path)
    return vecs


def test_a_corpus_with_its_own_vectors_is_not_embedded(tmp_path, monkeypatch):
    counting = patch_embedder(monkeypatch, CountingEmbedder())
    vecs = _vector_corpus(tmp_path / "corpus.parquet", 3000)
    meta = build_index(str(tmp_path / "corpus.parquet"), str(tmp_path / "index"), embedding_column="emb",
                       index_type="IVF16,Flat", bm25=False)
    assert counting.texts == [] and meta["embedding_column"] == "emb" and meta["bm25"] is None
    op = meta["dense"].pop("operating_point")
    assert meta["dense"] == {"index_type": "IVF16,Flat", "vectors": 3000, "trained_on": 3000, "file": "dense.faiss"}
    assert op["parameter"] == "nprobe" and 1 <= op["value"] <= 16 and op["queries"] == 1000
    dense = get_retriever(str(tmp_path / "index"), "dense", nprobe=16)  # all lists: exact
    q = vecs[:5] / np.linalg.norm(vecs[:5], axis=1, keepdims=True)
    _, rows = dense.search_vectors(q, 1)
    assert rows[:, 0].tolist() == [0, 1, 2, 3, 4]  # stored normalised, in corpus order
    with pytest.raises(IndexFormatError, match="--no-bm25.*rebuild"):
        get_retriever(str(tmp_path / "index"), "hybrid")


def test_default_index_type_follows_corpus_size():
    assert default_index_type(50_000, 384) == "Flat"
    assert default_index_type(1_000_000, 384) == "IVF4096,Flat"
    assert default_index_type(21_000_000, 384) == "IVF65536,PQ48"
    assert default_index_type(21_000_000, 100) == "IVF65536,PQ10"
    for n in (200_000, 1_000_000, 20_000_000):
        check_buildable(default_index_type(n, 384), 384, n)


@pytest.mark.parametrize("index_type, n, message", [
    ("IVF64,PQ7", 10_000, "FAISS refuses it for 384-dimensional vectors: The dimension of the vector (d) "
                          "should be a multiple of the number of subquantizers (M)"),
    ("Foo", 10_000, "FAISS refuses it for 384-dimensional vectors: could not parse index string Foo"),
    ("IVF4096,Flat", 1000, "needs at least 4096 passages to train; the corpus has 1000"),
])
def test_an_index_type_faiss_cannot_build_is_one_line(index_type, n, message):
    with pytest.raises(IndexBuildError) as e:
        check_buildable(index_type, 384, n)
    assert message in str(e.value) and "\n" not in str(e.value) and "/project/faiss" not in str(e.value)


def test_an_index_of_the_first_layout_still_loads_for_dense_retrieval(tmp_path, monkeypatch):
    """index.faiss + docs.parquet + meta.json without ``format`` (written by the first
    ``index build``)."""
    patch_embedder(monkeypatch)
    docs = passages(0, 12)
    vecs = fake_embed("m", [f"{a}\n{b}" for a, b in zip(docs.column("title").to_pylist(), docs.column("text").to_pylist())])
    index = faiss.IndexFlatIP(DIM)
    index.add(vecs)
    root = tmp_path / "old"
    root.mkdir()
    (root / "index.faiss").write_bytes(faiss.serialize_index(index).tobytes())
    buf = io.BytesIO()
    pq.write_table(docs, buf)
    (root / "docs.parquet").write_bytes(buf.getvalue())
    (root / "meta.json").write_text(json.dumps({"documents": 12, "dimension": DIM, "embedding_model": "m",
                                                "metric": "inner_product_normalised", "corpus": "c", "seconds": 1}))
    [hits] = get_retriever(str(root)).search(["carbon dioxide emissions coal"], 2)
    assert {d.doc_id for d in hits} == {"d2", "d8"}
    with pytest.raises(IndexFormatError, match="first layout.*rebuild it with `specrag-batch index build`"):
        get_retriever(str(root), "bm25")
    # a new build over it replaces the old files once it is committed
    pq.write_table(docs, tmp_path / "c.parquet")
    build_index(str(tmp_path / "c.parquet"), str(root))
    assert not (root / "index.faiss").exists() and not (root / "docs.parquet").exists()


def test_not_an_index_says_to_build_one(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexFormatError, match="no index here.*index build"):
        open_index(str(tmp_path / "empty"))
