"""``index build`` on bad input (docs/retrieval.md, "Bad input"): one line naming the file and
what is wrong, exit 2, no traceback, and nothing written in place of an index: no
``meta.json`` appears, and an index already at the output is left as it was and still serves."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli.commands import app
from specrag_batch.index import get_retriever, open_index

from .index_fakes import DIM, passages, patch_embedder, write_shards

_BAD_UTF8 = pa.array([b"fine", b"caf\xe9"], pa.binary()).view(pa.string())


@pytest.fixture(autouse=True)
def _fake_encoder(monkeypatch):
    patch_embedder(monkeypatch)
    open_index.cache_clear()
    yield
    open_index.cache_clear()


def _build(*args: str):
    result = CliRunner().invoke(app, ["index", "build", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def _vectors(n: int, width: int) -> pa.Array:
    vecs = np.random.default_rng(0).normal(size=(n, width)).astype(np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), width)


def _corpus(tmp_path, case: str) -> tuple[str, list[str]]:
    """A corpus prefix with the bad input ``case``; the extra build flags it needs."""
    root = write_shards(tmp_path / "corpus", [6, 6], nested=False)
    second = root / "p1.parquet"
    flags: list[str] = []
    if case == "doc_id_type":  # integer ids in one shard, strings in the other
        pq.write_table(pa.table({"doc_id": list(range(100, 106)), "title": ["t"] * 6, "text": ["x"] * 6}), second)
    elif case == "title_missing":
        pq.write_table(passages(6, 6).drop_columns(["title"]), second)
    elif case == "duplicate_across":
        pq.write_table(passages(3, 6), second)  # d3..d8: d3 is in p0 too
    elif case == "not_parquet":
        second.write_bytes(b"doc_id,text\na,b\n")
    elif case == "fifo":  # a read would wait for a writer for ever
        second.unlink()
        os.mkfifo(second)
    elif case == "link_to_nothing":  # an unfetched git-annex or DVC file
        second.unlink()
        second.symlink_to(tmp_path / "not-fetched")
    elif case == "bad_utf8":  # found by the check's streamed read of the shard (so is a null vector)
        pq.write_table(pa.table({"doc_id": ["u0", "u1"], "title": ["t", "t"], "text": _BAD_UTF8}), second)
    elif case in ("wrong_width", "not_fixed_size", "null_vector"):
        for k, start in enumerate((0, 6)):
            emb = _vectors(6, DIM + 3 if case == "wrong_width" else DIM)
            if case == "not_fixed_size":
                emb = pa.array([list(v) for v in emb.to_pylist()], pa.list_(pa.float32()))
            if case == "null_vector" and k == 1:
                emb = pa.array(emb.to_pylist()[:4] + [None] + emb.to_pylist()[5:], emb.type)
            pq.write_table(passages(start, 6).append_column("emb", emb), root / f"p{k}.parquet")
        flags = ["--embedding-column", "emb"]
    elif case in ("empty_doc_id", "blank_doc_id"):  # issue 47 item 9: `doc_id ''` was indexed
        ids = ["d6", "d7", "" if case == "empty_doc_id" else " \u200b\t", "d9", "d10", "d11"]
        pq.write_table(passages(6, 6).set_column(0, "doc_id", pa.array(ids)), second)
    elif case == "idmap":  # issue 47 item 9: refused only after the whole corpus was embedded
        flags = ["--index-type", "IDMap,Flat"]
    elif case == "faiss_refuses":
        flags = ["--index-type", "IVF4,PQ7"]
    elif case == "too_few_to_train":
        flags = ["--index-type", "IVF64,Flat"]
    return str(root), flags


CASES = {
    "doc_id_type": "p1.parquet: schema differs from the corpus's first shard {root}/p0.parquet: column 'doc_id' "
                   "is integer here, string there",
    "title_missing": "p1.parquet: schema differs from the corpus's first shard {root}/p0.parquet: column 'title' "
                     "missing (the first shard has it: string)",
    "duplicate_across": "p1.parquet: column 'doc_id': duplicate doc_id 'd3' (row 0; also {root}/p0.parquet row 3)",
    "not_parquet": "p1.parquet: not a Parquet file",
    "fifo": "p1.parquet: not a Parquet file (",  # ... a FIFO, not a regular file (not read))
    "link_to_nothing": "p1.parquet: a symbolic link to '{tmp}/not-fetched', which does not exist",
    "bad_utf8": "p1.parquet: column 'text': row 1: not valid UTF-8",
    "wrong_width": f"p0.parquet: column 'emb': vectors of width {DIM + 3}; the embedding model makes {DIM}",
    "not_fixed_size": "p0.parquet: column 'emb': got list<",  # then: embeddings need a fixed_size_list of floats
    "null_vector": "p1.parquet: column 'emb': row 4: null; every passage needs a vector",
    "empty_doc_id": "p1.parquet: column 'doc_id': row 2: '' is empty (nothing visible); every passage needs an id",
    "blank_doc_id": "p1.parquet: column 'doc_id': row 2: ' \\u200b\\t' is empty (nothing visible); every passage "
                    "needs an id",
    "idmap": "--index-type 'IDMap,Flat': IDMap is not supported (an IDMap index takes an id with each vector; the "
             "index numbers its vectors by passage itself): use 'Flat'",
    "faiss_refuses": f"--index-type 'IVF4,PQ7': FAISS refuses it for {DIM}-dimensional vectors: The dimension of "
                     "the vector (d) should be a multiple of the number of subquantizers (M)",
    "too_few_to_train": "--index-type 'IVF64,Flat' needs at least 64 passages to train; the corpus has 12",
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_writes_no_index(tmp_path, case):
    corpus, flags = _corpus(tmp_path, case)
    line = _one_error_line(_build("--corpus", corpus, "-o", str(tmp_path / "index"), *flags))
    assert CASES[case].format(root=corpus, tmp=tmp_path) in line, line
    assert case != "fifo" or "a FIFO" in line, line
    assert not (tmp_path / "index" / "meta.json").exists()
    assert not (tmp_path / "index").exists()  # refused by the checks before anything is embedded or created


def test_an_idmap_index_type_is_refused_before_the_corpus_is_read(tmp_path, monkeypatch):
    """Trial finding (issue 47 item 9): ``--index-type IDMap,Flat`` passed FAISS's factory and
    training checks and was refused by its first ``add``, after the whole corpus was embedded.
    Now it is refused first: nothing embedded, the corpus not even listed (a missing one is not
    what is reported)."""
    from .index_fakes import CountingEmbedder

    embedder = patch_embedder(monkeypatch, CountingEmbedder())
    corpus, _ = _corpus(tmp_path, "ok")
    for flag, rest in (("IDMap2,HNSW32", "HNSW32"), ("PCA16,IDMap,IVF4,Flat", "PCA16,IVF4,Flat")):
        line = _one_error_line(_build("--corpus", corpus, "-o", str(tmp_path / "index"), "--index-type", flag))
        assert f"--index-type '{flag}': IDMap" in line and line.endswith(f"use '{rest}'"), line
    line = _one_error_line(_build("--corpus", str(tmp_path / "none"), "-o", str(tmp_path / "index"),
                                  "--index-type", "IDMap,Flat"))
    assert "IDMap is not supported" in line, line
    assert embedder.texts == [] and not (tmp_path / "index").exists()


@pytest.mark.parametrize("case", ["duplicate_across", "bad_utf8", "faiss_refuses"])
def test_a_failed_build_leaves_the_index_already_there_serving(tmp_path, case):
    good = write_shards(tmp_path / "good", [10])
    assert _build("--corpus", str(good), "-o", str(tmp_path / "index")).exit_code == 0
    meta = (tmp_path / "index" / "meta.json").read_bytes()
    before = get_retriever(str(tmp_path / "index"), "hybrid").search(["glacier"], 2)
    open_index.cache_clear()
    corpus, flags = _corpus(tmp_path, case)
    _one_error_line(_build("--corpus", corpus, "-o", str(tmp_path / "index"), *flags))
    assert (tmp_path / "index" / "meta.json").read_bytes() == meta
    assert get_retriever(str(tmp_path / "index"), "hybrid").search(["glacier"], 2) == before
    assert json.loads(meta)["data"] in {p.name for p in (tmp_path / "index").iterdir()}


def test_a_missing_corpus_and_an_empty_prefix(tmp_path):
    line = _one_error_line(_build("--corpus", str(tmp_path / "none"), "-o", str(tmp_path / "index")))
    assert f"corpus '{tmp_path / 'none'}' does not exist" in line
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    line = _one_error_line(_build("--corpus", str(tmp_path / "empty"), "-o", str(tmp_path / "index")))
    assert f"{tmp_path / 'empty'}: no .parquet file under this prefix" in line


@pytest.mark.parametrize("damage", ["passages_truncated", "dense_missing", "dense_truncated", "meta_empty",
                                    "dense_of_another_build", "dense_of_another_width", "dense_of_another_metric",
                                    "bm25_missing", "no_index", "passages_reordered", "meta_unknown_metric"])
@pytest.mark.parametrize("load", [True, False])
def test_a_damaged_index_is_refused_naming_it_before_a_run_loads_engines(tmp_path, damage, load):
    """``run --index`` over a missing or damaged index (a truncated passages.arrow, a dense index
    of another build) is refused by :func:`check_index`, run before the engines load, naming the
    index, not the input shard, and never answered from the wrong passages; ``load=False``
    (shards on Ray) checks files only."""
    import json as json_module
    import shutil

    from specrag_batch.config import RunConfig
    from specrag_batch.index import IndexFormatError
    from specrag_batch.index.search import check_index

    def build(name, sizes):
        assert _build("--corpus", str(write_shards(tmp_path / f"corpus-{name}", sizes)), "-o",
                      str(tmp_path / name)).exit_code == 0
        meta = json_module.loads((tmp_path / name / "meta.json").read_text())
        return tmp_path / name / meta["data"]

    data = build("index", [6, 6])
    retrieval = RunConfig(retrieval={"index": str(tmp_path / "index"), "method": "hybrid"}).retrieval
    check_index(retrieval, load=load)  # the intact index passes
    open_index.cache_clear()
    if damage == "passages_truncated":
        (data / "passages.arrow").write_bytes((data / "passages.arrow").read_bytes()[:100])
    elif damage == "dense_missing":
        (data / "dense.faiss").unlink()
    elif damage == "dense_truncated":
        (data / "dense.faiss").write_bytes((data / "dense.faiss").read_bytes()[:50])
    elif damage == "meta_empty":
        (tmp_path / "index" / "meta.json").write_text("{}")
    elif damage == "dense_of_another_build":
        shutil.copy(build("other", [3]) / "dense.faiss", data / "dense.faiss")
    elif damage in ("dense_of_another_width", "dense_of_another_metric"):  # as many vectors as passages
        import faiss

        width = 16 if damage == "dense_of_another_width" else DIM
        other = faiss.IndexFlatIP(width) if damage == "dense_of_another_width" else faiss.IndexFlatL2(width)
        other.add(np.random.default_rng(0).normal(size=(12, width)).astype(np.float32))
        faiss.write_index(other, str(data / "dense.faiss"))
    elif damage == "bm25_missing":
        shutil.rmtree(data / "bm25")
    elif damage == "meta_unknown_metric":  # a metric no build writes: it was ignored
        meta = json_module.loads((tmp_path / "index" / "meta.json").read_text())
        (tmp_path / "index" / "meta.json").write_text(json_module.dumps({**meta, "metric": "l2"}))
    elif damage == "passages_reordered":  # same count and schema, rows in another order
        import pyarrow as pa

        with pa.memory_map(str(data / "passages.arrow"), "r") as source:
            table = pa.ipc.open_file(source).read_all()
        table = table.take(pa.array(np.arange(table.num_rows)[::-1]))
        with pa.OSFile(str(data / "passages.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    else:
        retrieval = RunConfig(retrieval={"index": str(tmp_path / "none"), "method": "hybrid"}).retrieval
    if not load and damage in ("dense_truncated", "dense_of_another_build", "dense_of_another_width",
                               "dense_of_another_metric", "passages_reordered", "meta_unknown_metric"):
        check_index(retrieval, load=False)  # files present: only loading them finds this
        return
    with pytest.raises(IndexFormatError) as refused:
        check_index(retrieval, load=load)
    message = str(refused.value)
    assert (str(tmp_path / "none") if damage == "no_index" else f"index {tmp_path / 'index'}") in message, message
    assert "rebuild" in message or "build one" in message, message
    if damage == "dense_of_another_build":
        assert "holds 3 vectors for 12 passages" in message, message
    if damage == "dense_of_another_width":  # same count: every search died in FAISS's `assert d == self.d`
        assert f"holds 16-dimensional vectors; meta.json says {DIM}" in message, message
    if damage == "dense_of_another_metric":
        assert "compares vectors by L2 distance; meta.json says inner product" in message, message
    if damage == "meta_unknown_metric":
        assert "meta.json as metric 'l2'" in message, message
    if damage == "passages_reordered":  # before: every search returned the wrong passages, exit 0
        assert "passage store holds other passages or another order" in message, message


def test_index_build_lists_its_corpus_as_a_run_lists_its_input(tmp_path, caplog):
    """``index build`` skips ``.hidden.parquet``, ``_x.parquet`` and Spark's ``_temporary/``
    copies as a run does (a writer's staging copy is no duplicate doc_id), and names an
    upper-case ``.PARQUET`` it leaves out."""
    import shutil

    from specrag_batch.run.planning import plan_shards

    corpus = write_shards(tmp_path / "corpus", [6, 6])
    (corpus / "_temporary" / "0").mkdir(parents=True)
    shutil.copy(corpus / "p0.parquet", corpus / "_temporary" / "0" / "p0.parquet")  # a writer's staging copy
    shutil.copy(corpus / "p0.parquet", corpus / ".hidden.parquet")
    shutil.copy(corpus / "p0.parquet", corpus / "UPPER.PARQUET")
    with caplog.at_level("WARNING"):
        result = _build("--corpus", str(corpus), "-o", str(tmp_path / "index"))
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "index" / "meta.json").read_text())
    assert meta["documents"] == 12, meta
    assert f"skipping {corpus / 'UPPER.PARQUET'}: not a .parquet file" in caplog.text
    assert f"skipping {corpus / '_temporary' / '0' / 'p0.parquet'}" in caplog.text
    shards = plan_shards(str(corpus))[0]  # what a run over the same prefix reads
    assert len(shards) == 2 and not [s for s in shards if "_temporary" in s or "hidden" in s or "UPPER" in s]


def test_run_over_a_dense_index_of_another_width_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    """Trial finding (issue 47 item 3): a FAISS file of another width than meta.json's (16
    against 384), holding as many vectors as there are passages, passed the opening check;
    every shard then died in FAISS's ``assert d == self.d`` with an empty reason, exit 1, 0 rows
    written. Now ``run --index`` refuses it before the flow starts: exit 2, one line naming the
    index and both widths, no output."""
    import faiss

    from specrag_batch.run import orchestration

    assert _build("--corpus", str(write_shards(tmp_path / "corpus", [6, 6])), "-o", str(tmp_path / "index")).exit_code == 0
    data = tmp_path / "index" / json.loads((tmp_path / "index" / "meta.json").read_text())["data"]
    other = faiss.IndexFlatIP(16)
    other.add(np.random.default_rng(0).normal(size=(12, 16)).astype(np.float32))
    faiss.write_index(other, str(data / "dense.faiss"))
    open_index.cache_clear()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["Is the ice melting?"], "task": ["qa"]}), tmp_path / "in.parquet")
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    result = CliRunner().invoke(app, ["run", "-i", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "out"),
                                      "--index", str(tmp_path / "index")])
    line = _one_error_line(result)
    assert f"index {tmp_path / 'index'}: its dense index holds 16-dimensional vectors; meta.json says {DIM}" in line
    assert not (tmp_path / "out").exists()


def test_an_hnsw_or_ivf_of_size_zero_is_refused_before_the_corpus_is_read(tmp_path, monkeypatch):
    """A new user's trial (issue 47): FAISS's factory parses ``HNSW0``, ``HNSW1`` and ``IVF0``,
    and the build then embedded the whole corpus and died in FAISS: HNSW0 in a C++ assertion
    (``Faiss assertion 'i < end' failed``, SIGABRT, exit 134, no line of ours), HNSW1 in a
    segmentation fault, and IVF0 built an index whose every search is refused. Refused first,
    one line naming the part and the smallest size; sizes that work still build."""
    from .index_fakes import CountingEmbedder

    embedder = patch_embedder(monkeypatch, CountingEmbedder())
    corpus, _ = _corpus(tmp_path, "ok")
    for flag, part, least in (("HNSW0", "HNSW0", "M >= 2"), ("HNSW1,Flat", "HNSW1", "M >= 2"),
                              ("IVF0,Flat", "IVF0", "nlist >= 1"), ("IVF2_HNSW0,Flat", "HNSW0", "M >= 2")):
        line = _one_error_line(_build("--corpus", corpus, "-o", str(tmp_path / "index"), "--index-type", flag))
        assert f"--index-type '{flag}': {part} is" in line and least in line, line
    assert embedder.texts == [] and not (tmp_path / "index").exists()
    assert _build("--corpus", corpus, "-o", str(tmp_path / "index"), "--index-type", "HNSW2").exit_code == 0
