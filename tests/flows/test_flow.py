"""Real Prefect flow runs end to end: local disk and the moto S3 server, both modes, bad shards,
FAISS retrieval, and the CLI."""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.core import storage
from specrag_batch.run.manifest import MANIFEST

from ..conftest import ROOT, SAMPLES, sample_rows, small_config, subprocess_env

pytestmark = pytest.mark.slow


def write_inputs(prefix: str, shards: dict[str, pa.Table]) -> None:
    for name, t in shards.items():
        storage.write_parquet_atomic(storage.join(prefix, name), t)


def read_outputs(prefix: str) -> tuple[list[dict], dict]:
    files = [f for f in storage.list_files(prefix)  # output shards, not _keys/, _drafts/ or _report/
             if f.endswith(".parquet") and "/_" not in f[len(prefix):]]
    rows = [r for f in files for r in storage.read_parquet(f).to_pylist()]
    return rows, json.loads(storage.read_bytes(storage.join(prefix, MANIFEST)))


def input_ids(shards: dict[str, pa.Table]) -> list[str]:
    return sorted(i for t in shards.values() for i in t.column("query_id").to_pylist())


@pytest.fixture(scope="module")
def shards():
    return {"popqa.parquet": sample_rows("popqa", 3), "claims/climate.parquet": sample_rows("climate_fever", 3)}


def run_flow(inp, out, cfg):
    """The flow called directly; its run ends Failed exactly when a shard failed (the manifest
    is then the Failed state's result)."""
    from flows.speculative_rag import speculative_rag_flow
    from specrag_batch.run.orchestration import flow_manifest

    state = speculative_rag_flow(inp, out, cfg.model_dump(mode="json"), return_state=True)
    m = flow_manifest(state)
    assert state.is_failed() == bool(m["failed_shards"]) and state.is_completed() != state.is_failed()
    return m


def test_flow_speculative_local(prefect_harness, tmp_path, shards):
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_inputs(inp, shards)
    m = run_flow(inp, out, small_config())
    rows, manifest = read_outputs(out)
    assert sorted(r["query_id"] for r in rows) == input_ids(shards)  # every row exactly once
    assert manifest["rows_in"] == manifest["rows_out"] == 6 and manifest["failed_shards"] == 0
    assert manifest == json.loads(json.dumps(m, default=str))
    assert sorted(os.listdir(out)) == ["_keys", MANIFEST, "_report", "_run.json", "_shards", "claims__climate.parquet", "popqa.parquet"]
    assert {s["output"].rsplit("/", 1)[-1] for s in manifest["shards"]} == {"claims__climate.parquet", "popqa.parquet"}
    assert manifest["config"]["drafter"]["model"] == "smollm2-135m-instruct"
    assert manifest["metrics"]["n_with_gold"] == 6 and manifest["stage_seconds"]["drafting"] > 0
    for r in rows:
        assert r["mode"] == "speculative" and r["run_id"] == manifest["run_id"]
        assert r["error"] is None and r["answer"] is not None and r["drafts"]
        assert r["correct"] in (True, False)
        if r["score_self_consistency"] is None:  # only unverified: fast path or no valid draft
            assert r["fast_path"] or "no_valid_draft" in r["flags"]
        else:
            sel = manifest["config"]["selection"]  # log ρ: the enabled terms (ρ_SC off by default)
            assert sel["use_self_consistency"] is False
            assert r["score"] == pytest.approx(r["score_draft"] + r["score_self_reflection"])
    # pyarrow reads the file with the published schema
    from specrag_batch.core.schema import OUTPUT_SCHEMA
    assert pq.read_schema(os.path.join(out, "popqa.parquet")).equals(OUTPUT_SCHEMA)


def test_flow_standard_mode_same_schema(prefect_harness, tmp_path, shards):
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_inputs(inp, shards)
    run_flow(inp, out, small_config(mode="standard"))
    rows, manifest = read_outputs(out)
    assert sorted(r["query_id"] for r in rows) == input_ids(shards)
    assert manifest["mode"] == "standard" and manifest["stage_seconds"]["verification"] == 0
    for r in rows:
        assert r["mode"] == "standard" and len(r["drafts"]) == 1 and r["drafter_model"] is None
        assert r["score_self_consistency"] is None and r["fast_path"] is False
        assert len(r["drafts"][0]["doc_ids"]) == r["num_documents"]  # all N documents in one prompt


def test_flow_s3_round_trip(prefect_harness, s3_bucket, shards):
    inp, out = f"{s3_bucket}/input/date=2026-11-29", f"{s3_bucket}/output/date=2026-11-29"
    write_inputs(inp, shards)
    run_flow(inp, out, small_config())
    rows, manifest = read_outputs(out)
    assert sorted(r["query_id"] for r in rows) == input_ids(shards)
    assert manifest["rows_out"] == 6 and all(s["output"].startswith("s3://") for s in manifest["shards"])
    fs, path = storage.filesystem(out)
    written = sorted(f[len(path):].lstrip("/") for f in fs.find(path))  # exactly these objects
    assert written == ["_keys/claims__climate.parquet", "_keys/popqa.parquet", "_manifest.json", "_report/confusion_matrix.png", "_report/profile.json",
                       "_report/reliability.png", "_report/report.md", "_report/risk_coverage.png",
                       "_report/score_correct_vs_wrong.png", "_report/summary.json", "_run.json",
                       "_shards/claims__climate.parquet.json", "_shards/popqa.parquet.json",
                       "claims__climate.parquet", "popqa.parquet"]


def test_flow_bad_shard_and_bad_rows_lose_nothing(prefect_harness, tmp_path):
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    good = sample_rows("popqa", 2)
    bad_rows = pa.table({"query_id": ["popqa:dup", "x1", "x2", "x3"],
                         "query": ["ok?", None, "no docs?", "q?"],
                         "task": ["qa", "qa", "qa", "poem"],
                         "documents": pa.array([[{"doc_id": "d", "title": "t", "text": "Paris is in France."}],
                                                None, [], None], good.schema.field("documents").type)})
    write_inputs(inp, {"a.parquet": good, "b.parquet": bad_rows,
                       "c.parquet": pa.table({"query_id": ["z"], "query": ["q"]}),  # no 'task' column
                       "d.parquet": good.slice(0, 1)})  # duplicate of a.parquet's first id
    (tmp_path / "in" / "notes.txt").write_text("not parquet")
    m = run_flow(inp, out, small_config())
    rows, manifest = read_outputs(out)
    by_id = {}
    for r in rows:
        by_id.setdefault(r["query_id"], []).append(r)
    assert manifest["failed_shards"] == 1
    failed = [s for s in manifest["shards"] if s["status"] == "failed"][0]
    assert failed["input"].endswith("c.parquet") and "column 'task': required column missing" in failed["error"]
    assert manifest["skipped_files"] == [{"input": str(tmp_path / "in" / "notes.txt"), "reason": "not a .parquet file"}]
    assert manifest["rows_out"] == 2 + 4 + 1  # every row of the readable shards comes out
    assert manifest["rows_in"] == 2 + 4 + 1 + 1 and failed["rows_in"] == 1 and failed["rows_out"] == 0
    assert by_id["popqa:dup"][0]["error"] is None
    assert by_id["x1"][0]["error"] == "b.parquet: row 1 (query_id='x1'): field 'query': null or empty".replace(
        "b.parquet", str(tmp_path / "in" / "b.parquet"))
    assert by_id["x2"][0]["error"].endswith("field 'documents': no documents (N = 0)")
    assert "no_documents" in by_id["x2"][0]["flags"]
    assert "field 'task': unknown value 'poem'" in by_id["x3"][0]["error"]
    first = good.column("query_id")[0].as_py()
    dup = sorted(by_id[first], key=lambda r: r["source_file"])
    assert len(dup) == 2 and dup[0]["error"] is None and f"duplicate id {first!r}" in dup[1]["error"]
    assert m["metrics"]["errors"] == 4


def test_faiss_retrieval_for_rows_without_documents(prefect_harness, tmp_path):
    import pyarrow.parquet as pq

    from specrag_batch.index import build_index, get_retriever

    idx = str(tmp_path / "index")
    corpus = SAMPLES / "corpus" / "popqa_passages.parquet"
    meta = build_index(str(corpus), idx)
    assert meta["documents"] > 100 and meta["dimension"] == 384
    r = get_retriever(idx)
    q = sample_rows("popqa", 2)
    hits = r.search(q.column("query").to_pylist(), 10)
    corpus_ids = set(pq.read_table(corpus, columns=["doc_id"]).column("doc_id").to_pylist())
    assert all(len(h) == 10 and {d.doc_id for d in h} <= corpus_ids for h in hits)
    # the passage the dataset ranked first for the question is retrieved among the top 10
    gold_first = [docs[0]["doc_id"] for docs in q.column("documents").to_pylist()]
    assert sum(g in {d.doc_id for d in h} for g, h in zip(gold_first, hits)) >= 1

    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_inputs(inp, {"q.parquet": q.drop_columns(["documents"])})
    run_flow(inp, out, small_config(**{"retrieval.index": idx, "sampling.num_drafts": 2}))
    rows, _ = read_outputs(out)
    assert len(rows) == 2 and all(r["error"] is None and r["num_documents"] == 10 for r in rows)
    assert all(set(d["doc_ids"]) <= corpus_ids for r in rows for d in r["drafts"])


def test_cli_help_and_run(tmp_path):
    env = subprocess_env(tmp_path)
    h = subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", "run", "--help"], capture_output=True,
                       text=True, env=env, cwd=ROOT)
    assert h.returncode == 0 and "--input" in h.stdout and "--mode" in h.stdout
    inp = tmp_path / "in"
    write_inputs(str(inp), {"x.parquet": sample_rows("climate_fever", 2, skip=5)})
    p = subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", "run", "-i", str(inp), "-o", str(tmp_path / "out"),
                        "-c", str(ROOT / "configs" / "test-smollm2.yaml"), "--mode", "standard"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "rows in / out" in p.stdout and "2 / 2" in p.stdout
    bad = subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", "run", "-i", str(inp), "-o", "x",
                          "--mode", "fast"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert bad.returncode == 2 and "--mode" in (bad.stderr + bad.stdout)  # docs/operations.md: bad flag exits 2


def test_relative_input_same_names_in_two_folders_and_respelled_resume(prefect_harness, tmp_path, monkeypatch):
    """`-i in/` with x/a.parquet and y/a.parquet: both shards keep their rows (distinct output
    names), and a re-run spelling the input as ./in or its absolute path resumes the same run."""
    monkeypatch.chdir(tmp_path)
    write_inputs("in", {"x/a.parquet": sample_rows("popqa", 1), "y/a.parquet": sample_rows("popqa", 1, skip=1)})
    m = run_flow("in/", "out", small_config())
    rows, _ = read_outputs(str(tmp_path / "out"))
    assert len(rows) == 2 and m["input"] == str(tmp_path / "in") and m["failed_shards"] == 0
    assert sorted(os.listdir(tmp_path / "out")) == ["_keys", MANIFEST, "_report", "_run.json", "_shards", "x__a.parquet", "y__a.parquet"]
    for spelling in ("./in", str(tmp_path / "in") + "/"):
        m = run_flow(spelling, str(tmp_path / "out") + "/", small_config())
        assert m["resumed_shards"] == 2


def test_output_inside_input_is_refused(prefect_harness, tmp_path):
    write_inputs(str(tmp_path / "in"), {"a.parquet": sample_rows("popqa", 1)})
    from specrag_batch.run.planning import InputLayoutError

    with pytest.raises(InputLayoutError, match="overlap"):
        run_flow(str(tmp_path / "in"), str(tmp_path / "in" / "out"), small_config())
    assert not (tmp_path / "in" / "out").exists()
