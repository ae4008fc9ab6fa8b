"""A build process killed with SIGKILL (no clean-up, no ``finally``) once a phase's checkpoint
is written resumes from it (docs/retrieval.md, "Resuming a build"): the process kills itself
at the start of the next phase (the stand-in encoder of tests/unit/index_fakes.py, so no model
loads); the same build started again reuses what the killed one finished."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from specrag_batch.index import build_index, get_retriever, open_index

from ..conftest import ROOT, subprocess_env
from ..unit.index_fakes import CountingEmbedder, patch_embedder, write_shards

pytestmark = pytest.mark.integration

_KILLED_BUILD = textwrap.dedent("""
    import os, signal, sys
    from specrag_batch.index import build_index, dense, embed_shards as shards, tuning
    from tests.unit.index_fakes import fake_embed
    shards.embed = fake_embed
    shards.known_dimension = lambda name: 32
    die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    setattr(dense if sys.argv[3] == "add" else tuning, sys.argv[3], die)
    build_index(sys.argv[1], sys.argv[2], index_type="IVF8,Flat", holdout=100)
""")


@pytest.mark.parametrize("kill_at, reused", [("add", ["trained"]), ("tune", ["trained", "added"])])
def test_a_build_killed_with_sigkill_at_a_phase_resumes_after_the_phases_it_finished(tmp_path, monkeypatch,
                                                                                      kill_at, reused):
    corpus = write_shards(tmp_path / "corpus", [150, 150])
    out = tmp_path / "index"
    r = subprocess.run([sys.executable, "-c", _KILLED_BUILD, str(corpus), str(out), kill_at],
                       env=subprocess_env(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    assert not (out / "meta.json").exists() and (out / "_build" / "_done" / f"phase-{reused[-1]}.json").exists()
    open_index.cache_clear()
    again = patch_embedder(monkeypatch, CountingEmbedder())
    meta = build_index(str(corpus), str(out), index_type="IVF8,Flat", holdout=100)
    assert again.texts == [] and meta["shards_skipped"] == 2 and meta["phases_reused"] == reused
    assert meta["dense"]["vectors"] == meta["documents"] == 300 and meta["dense"]["operating_point"]["reached"]
    [hits] = get_retriever(str(out), "hybrid").search(["glacier ice melt arctic"], 5)
    assert all(int(d.doc_id[1:]) % 6 == 0 for d in hits)
    open_index.cache_clear()
