"""The operating point ``index build`` measures (docs/retrieval.md, "Recall measured at build"):
recall@k of held-out queries against exact search, the smallest nprobe/efSearch reaching the
target, recorded in meta.json and used by a run and by ``get_retriever`` when neither sets it
(issue 47 item 7: the API left FAISS at nprobe 1); a target the index cannot reach said in one
line; ``index info``; a corpus bringing its vectors built without loading the encoder."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli.commands import app
from specrag_batch.config import RunConfig
from specrag_batch.index import IndexFormatError, build_index, get_retriever, open_index, retriever_for
from specrag_batch.index import embed_shards as shards_mod
from specrag_batch.index import tuning

from .index_fakes import DIM, passages, patch_embedder, write_shards


@pytest.fixture(autouse=True)
def _fresh_index_cache():
    open_index.cache_clear()
    yield
    open_index.cache_clear()


def _hard_vectors(n: int, width: int = DIM, clusters: int = 400, seed: int = 0) -> np.ndarray:
    """Many overlapping clusters: an IVF index needs many lists probed for a good recall."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, width))
    v = centers[rng.integers(0, clusters, n)] + 0.9 * rng.normal(size=(n, width))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _vector_corpus(path, vecs: np.ndarray) -> str:
    emb = pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), vecs.shape[1])
    pq.write_table(passages(0, len(vecs)).append_column("emb", emb), path)
    return str(path)


def _never_load(name, texts, batch_size=64):
    raise AssertionError(f"the encoder was asked to embed {len(texts)} texts")


def _recall_on(index_uri: str, queries: np.ndarray, vecs: np.ndarray, k: int = 10, **params) -> float:
    truth = np.argsort(-(queries @ vecs.T), axis=1)[:, :k]
    _, found = get_retriever(index_uri, "dense", **params).search_vectors(queries, k)
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(found.tolist(), truth.tolist())]))


def test_the_operating_point_reaches_the_target_on_queries_it_was_not_tuned_on(tmp_path, monkeypatch):
    patch_embedder(monkeypatch, _never_load)  # the column gives the width: no encoder at build
    vecs = _hard_vectors(6000)
    meta = build_index(_vector_corpus(tmp_path / "c.parquet", vecs), str(tmp_path / "index"), embedding_column="emb",
                       index_type="IVF64,Flat", bm25=False, holdout=500)
    op = meta["dense"]["operating_point"]
    assert op["parameter"] == "nprobe" and op["reached"] and op["recall"] >= 0.95 and op["queries"] == 500
    assert 1 < op["value"] < 64 and op["k"] == 10 and op["queries_per_second"] > 0
    bound = {v: lb for v, _, lb in op["tried"]}  # the rule: every fold's joint lower bound reaches it
    assert bound[op["value"]] >= 0.95 and bound.get(op["value"] - 1, 0) < 0.95  # the smallest that reaches it
    assert op["tuned_on"] == 1000 and op["folds"] == 2  # question-like and unchanged, 2 folds each
    assert op["check"]["queries"] == 1000 and op["check"]["recall"] >= 0.93
    rng = np.random.default_rng(1)  # the corpus's clusters, new points: queries the build never saw
    centers = np.random.default_rng(0).normal(size=(400, DIM))
    fresh = centers[rng.integers(0, 400, 300)] + 0.9 * rng.normal(size=(300, DIM))
    fresh = (fresh / np.linalg.norm(fresh, axis=1, keepdims=True)).astype(np.float32)
    assert _recall_on(str(tmp_path / "index"), fresh, vecs) >= 0.93  # the default the API takes
    assert _recall_on(str(tmp_path / "index"), fresh, vecs, nprobe=1) < 0.8  # what it took before: nprobe 1


def test_the_api_and_a_run_default_to_the_operating_point(tmp_path, monkeypatch):
    """Issue 47 item 7: ``get_retriever`` without nprobe searched at FAISS's nprobe 1."""
    patch_embedder(monkeypatch)
    vecs = _hard_vectors(3000)
    meta = build_index(_vector_corpus(tmp_path / "c.parquet", vecs), str(tmp_path / "index"), embedding_column="emb",
                       index_type="IVF32,Flat", bm25=False, holdout=200)
    value = meta["dense"]["operating_point"]["value"]
    assert get_retriever(str(tmp_path / "index")).nprobe == value
    run = retriever_for(RunConfig.model_validate({"retrieval": {"index": str(tmp_path / "index")}}).retrieval)
    assert run.nprobe == value
    assert get_retriever(str(tmp_path / "index"), nprobe=7).nprobe == 7  # a setting wins
    # an index built before the operating point existed: 128, the run's default of then, on both paths
    meta["dense"].pop("operating_point")
    (tmp_path / "index" / "meta.json").write_text(json.dumps(meta))
    open_index.cache_clear()
    assert get_retriever(str(tmp_path / "index")).nprobe == tuning.DEFAULT_NPROBE == 128
    assert retriever_for(RunConfig.model_validate({"retrieval": {"index": str(tmp_path / "index")}}).retrieval).nprobe == 128


def test_hnsw_gets_the_smallest_ef_search_and_flat_is_exact(tmp_path, monkeypatch):
    patch_embedder(monkeypatch)
    vecs = _hard_vectors(3000, clusters=100)
    corpus = _vector_corpus(tmp_path / "c.parquet", vecs)
    hnsw = build_index(corpus, str(tmp_path / "hnsw"), embedding_column="emb", index_type="HNSW8", bm25=False,
                       holdout=300, target_recall=0.97)["dense"]["operating_point"]
    assert hnsw["parameter"] == "efSearch" and hnsw["reached"] and hnsw["recall"] >= 0.97 and hnsw["value"] >= 10
    assert get_retriever(str(tmp_path / "hnsw")).ef_search == hnsw["value"]
    flat = build_index(corpus, str(tmp_path / "flat"), embedding_column="emb", bm25=False)["dense"]["operating_point"]
    assert flat["exact"] and flat["recall"] == 1.0 and flat["parameter"] is None
    assert tuning.describe(flat, "Flat").startswith("exact search (Flat): recall@10 1.0 by construction")


def test_a_target_the_index_cannot_reach_is_one_line_with_the_best_reached(tmp_path, monkeypatch):
    patch_embedder(monkeypatch)
    corpus = _vector_corpus(tmp_path / "c.parquet", _hard_vectors(3000))
    r = CliRunner().invoke(app, ["index", "build", "--corpus", corpus, "-o", str(tmp_path / "index"),
                                 "--embedding-column", "emb", "--index-type", "IVF16,PQ4x4", "--no-bm25",
                                 "--target-recall", "0.99", "--holdout", "200"])
    assert r.exit_code == 0, r.output
    [line] = [x for x in r.output.splitlines() if x.startswith("operating point:")]
    op = json.loads((tmp_path / "index" / "meta.json").read_text())["dense"]["operating_point"]
    assert not op["reached"] and op["recall"] < 0.99 and op["recall_lower_bound"] == max(lb for _, _, lb in op["tried"])
    assert f"target recall@10 0.99 not reached by IVF16,PQ4x4: best {op['recall']:.3f} at nprobe {op['value']}" in line
    info = CliRunner().invoke(app, ["index", "info", str(tmp_path / "index")])
    assert info.exit_code == 0 and line in info.output and f"nprobe {op['value']}" in info.output


def test_user_queries_measure_recall_and_a_bad_queries_file_is_refused_before_embedding(tmp_path, monkeypatch):
    patch_embedder(monkeypatch)
    corpus = write_shards(tmp_path / "corpus", [400])
    pq.write_table(pa.table({"query_id": ["a", "b", "c"], "query": ["glacier ice", "solar energy", "sea level"]}),
                   tmp_path / "q.parquet")
    meta = build_index(str(corpus), str(tmp_path / "index"), index_type="IVF8,Flat",
                       queries_uri=str(tmp_path / "q.parquet"))
    op = meta["dense"]["operating_point"]
    assert op["queries"] == 3 and op["source"] == f"queries of {tmp_path / 'q.parquet'}" and op["reached"]
    pq.write_table(pa.table({"query": ["fine", " "]}), tmp_path / "bad.parquet")
    r = CliRunner().invoke(app, ["index", "build", "--corpus", str(corpus), "-o", str(tmp_path / "other"),
                                 "--queries", str(tmp_path / "bad.parquet")])
    assert r.exit_code == 2 and f"error: --queries {tmp_path / 'bad.parquet'}: row 1: blank query" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "other").exists()  # nothing embedded
    r = CliRunner().invoke(app, ["index", "build", "--corpus", str(corpus), "-o", str(tmp_path / "other"),
                                 "--queries", str(tmp_path / "q.parquet"), "--holdout", "1"])
    assert r.exit_code == 0 and "on 1 held-out queries" in r.output, r.output


def test_index_info_of_an_index_without_an_operating_point_says_the_default(tmp_path, monkeypatch):
    patch_embedder(monkeypatch)
    build_index(str(write_shards(tmp_path / "corpus", [20])), str(tmp_path / "index"))
    meta = json.loads((tmp_path / "index" / "meta.json").read_text())
    meta["dense"].pop("operating_point")
    (tmp_path / "index" / "meta.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(app, ["index", "info", str(tmp_path / "index")])
    assert r.exit_code == 0 and "no operating point" in r.output and "nprobe 128, efSearch 128" in r.output
    r = CliRunner().invoke(app, ["index", "info", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and r.output.count("error:") == 1 and "no index here" in r.output


def test_a_column_of_another_width_than_the_encoder_is_refused_when_queries_are_embedded(tmp_path, monkeypatch):
    """A model whose configuration does not say its width: the build takes the column's; the
    first dense search says the model and the index disagree, in one line."""
    patch_embedder(monkeypatch)
    monkeypatch.setattr(shards_mod, "known_dimension", lambda name: None)
    corpus = _vector_corpus(tmp_path / "c.parquet", _hard_vectors(50, width=DIM + 4))
    meta = build_index(corpus, str(tmp_path / "index"), embedding_column="emb", bm25=False)
    assert meta["dimension"] == DIM + 4
    with pytest.raises(IndexFormatError) as e:
        get_retriever(str(tmp_path / "index")).search(["glacier"], 3)
    assert f"holds {DIM + 4}-dimensional vectors (from column 'emb') but its embedding model" in str(e.value)
    assert f"makes {DIM}" in str(e.value) and "\n" not in str(e.value)


def test_known_dimension_reads_a_model_configuration_without_loading_it(tmp_path):
    root = tmp_path / "model"
    (root / "1_Pooling").mkdir(parents=True)
    (root / "2_Dense").mkdir()
    (root / "modules.json").write_text(json.dumps([
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384,
                                                                "pooling_mode_mean_tokens": True,
                                                                "pooling_mode_max_tokens": True}))
    from specrag_batch.engines.embeddings import known_dimension

    assert known_dimension(str(root)) is None  # the dense layer's config is missing: not known
    (root / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 768, "out_features": 256}))
    assert known_dimension(str(root)) == 256
    (root / "modules.json").write_text(json.dumps([
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    assert known_dimension(str(root)) == 768  # two pooling modes concatenated
    assert known_dimension("some-org/not-here") is None


def test_a_duplicate_passage_returned_for_its_twin_is_no_miss():
    a, b, c = [0.9, np.sqrt(1 - 0.81), 0, 0], [0.5, 0, np.sqrt(0.75), 0], [0.1, 0, 0, np.sqrt(0.99)]
    shards = [np.array([a, a], np.float32), np.array([b, c], np.float32)]  # rows 0 and 1: the same passage
    q = np.array([[1, 0, 0, 0]], np.float32)
    truth = tuning.similarities(shards, q, np.array([[0, 2]]))  # the exact top 2: 0.9 and 0.5
    assert tuning.recall(tuning.similarities(shards, q, np.array([[1, 2]])), truth) == 1.0  # its twin: found
    assert tuning.recall(tuning.similarities(shards, q, np.array([[1, 3]])), truth) == 0.5
    assert tuning.recall(tuning.similarities(shards, q, np.array([[3, -1]])), truth) == 0.0
