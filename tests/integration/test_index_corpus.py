"""``index build`` where it meets storage and processes (docs/retrieval.md): a corpus of shards
on S3 (moto server) into an index on S3, searched through the local cache copy; and a build
killed with SIGKILL halfway through, started again, embedding only the shards it had not
finished (the real packaged MiniLM encoder, a CLI process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from specrag_batch.core import storage
from specrag_batch.index import build_index, get_retriever, open_index

from ..conftest import ROOT, subprocess_env
from ..unit.index_fakes import CountingEmbedder, passages, patch_embedder

pytestmark = pytest.mark.integration


def _put_shards(prefix: str, sizes: list[int]) -> None:
    fs, path = storage.filesystem(prefix)
    start = 0
    for k, n in enumerate(sizes):
        local = f"/tmp/_shard_{os.getpid()}_{k}.parquet"
        pq.write_table(passages(start, n), local)
        fs.put_file(local, f"{path}/{'sub/' if k % 2 else ''}p {k}#[x].parquet")  # a name never to be re-parsed
        os.remove(local)
        start += n


def test_s3_corpus_to_s3_index_resumes_and_serves(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRAG_INDEX_CACHE", str(tmp_path / "cache"))
    corpus, index = f"{s3_bucket}/corpus", f"{s3_bucket}/index"
    _put_shards(corpus, [20, 15, 25])
    patch_embedder(monkeypatch, CountingEmbedder(fail_after=1))
    with pytest.raises(KeyboardInterrupt):  # stopped after the first shard
        build_index(corpus, index)
    fs, path = storage.filesystem(index)
    assert not fs.exists(f"{path}/meta.json") and len(fs.ls(f"{path}/_build/_done")) == 1
    resumed = patch_embedder(monkeypatch, CountingEmbedder())
    meta = build_index(corpus, index)
    assert meta["shards"] == 3 and meta["documents"] == 60 and meta["shards_skipped"] == 1
    assert len(resumed.texts) == 60 - 20
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path)) == sorted([meta["data"], "meta.json"])
    open_index.cache_clear()
    for method in ("dense", "bm25", "hybrid"):
        [hits] = get_retriever(index, method).search(["sea level coastal flooding"], 3)
        assert len(hits) == 3 and all(int(d.doc_id[1:]) % 6 == 5 for d in hits), method
    assert (tmp_path / "cache").is_dir() and not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]
    # a rebuild replaces the data directory on S3 once it is committed
    meta2 = build_index(corpus, index, bm25=False)
    assert meta2["data"] != meta["data"]
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path)) == sorted([meta2["data"], "meta.json"])
    open_index.cache_clear()


def test_a_build_killed_halfway_resumes_without_embedding_finished_shards(tmp_path):
    """SIGKILL (no clean-up runs) once the first shard's done marker is written; the same
    command again embeds only the other shards (one "embedding <shard>" line each) and says
    how many it skipped."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sizes = [160, 160, 160, 160]
    start = 0
    for k, n in enumerate(sizes):
        pq.write_table(passages(start, n), corpus / f"p{k}.parquet")
        start += n
    out = tmp_path / "index"
    env = subprocess_env(tmp_path)
    cmd = [sys.executable, "-m", "specrag_batch.cli.commands", "index", "build", "--corpus", str(corpus), "-o", str(out),
           "--batch-size", "16"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    done = out / "_build" / "_done"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not (done.is_dir() and any(done.glob("*.json"))):
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    finished = sorted(done.glob("*.json"))
    assert 1 <= len(finished) < len(sizes), "the build was not stopped halfway"
    assert not (out / "meta.json").exists()
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert f"{len(finished)} of {len(sizes)} shards already embedded" in r.stderr
    assert r.stdout.count("embedding ") == 0 and r.stderr.count("embedding ") == len(sizes) - len(finished)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["shards_skipped"] == len(finished) and meta["documents"] == sum(sizes)
    open_index.cache_clear()
    [hits] = get_retriever(str(out), "hybrid").search(["glacier ice melt arctic"], 5)
    assert all(int(d.doc_id[1:]) % 6 == 0 for d in hits)
    open_index.cache_clear()
