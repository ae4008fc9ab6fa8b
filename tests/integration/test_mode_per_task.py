"""A mode per task (issue 49): one run over a shard mixing claim, choice and qa rows answers each
row by its task's mode, fused and disaggregated, and every row comes out once, naming the mode
that answered it. Pipeline runs on tests/fakes.py's FakeEngine (the rows: tests/pipeline_runs.py);
the whole run (Prefect flow, resume, disaggregated tasks) through tests/fake_engine_cli.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.run import intermediate, pipeline, resume
from specrag_batch.core import storage

from ..conftest import ROOT, sample_rows, subprocess_env
from ..fakes import FakeEngine
from ..pipeline_runs import INFO, SHARD, TABLE, config, fresh_rows, fused

pytestmark = pytest.mark.integration

PER_TASK = {"claim": "speculative", "choice": "speculative", "qa": "standard"}


def _disaggregated_mixed(cfg, tmp_path):
    """Drafter side, draft Parquet on disk, verifier side (as shard.draft_shard / verify_shard
    hand over: the verifier side reads the input's documents again for the Standard RAG rows)."""
    rows = fresh_rows()
    drafts = pipeline.draft_stage(rows, cfg, drafter=FakeEngine())
    path = tmp_path / "shard-0.parquet"
    pq.write_table(intermediate.to_table(rows, drafts), path)
    rows2, drafts2 = intermediate.from_table(pq.read_table(path), str(path))
    for row, source in zip(rows2, fresh_rows()):
        row.documents = source.documents
    return pipeline.verify_stage(rows2, drafts2, cfg, verifier=FakeEngine(), info=INFO)


def test_each_row_is_answered_by_its_tasks_mode_and_says_so():
    """Every input row comes out once, in input order; claim and choice rows are the rows of a
    Speculative RAG run (m drafts), qa rows those of a Standard RAG run (one draft), column for
    column; each row's ``mode`` names its task's mode."""
    mixed = fused(config(mode=PER_TASK))
    speculative, standard = fused(config()), fused(config(mode="standard"))
    assert [r["query_id"] for r in mixed] == TABLE.column("query_id").to_pylist()
    assert {r["task"] for r in mixed if r["error"] is None} == {"claim", "choice", "qa"}
    for row, spec, std in zip(mixed, speculative, standard):
        assert row["mode"] == PER_TASK[row["task"]], row["query_id"]
        assert row == (spec if row["mode"] == "speculative" else std), row["query_id"]
    answered = [r for r in mixed if r["error"] is None]
    assert all(len(r["drafts"]) == 1 for r in answered if r["task"] == "qa")
    assert all(len(r["drafts"]) > 1 for r in answered if r["task"] != "qa")
    assert all(r["drafter_model"] is None for r in mixed if r["mode"] == "standard")


def test_the_mode_seconds_are_timed_per_mode():
    timer = pipeline.StageTimer()
    pipeline.process_rows(fresh_rows(), config(mode=PER_TASK), drafter=FakeEngine(), verifier=FakeEngine(),
                          info=INFO, timer=timer)
    assert set(timer.modes) == {"speculative", "standard"} and all(v > 0 for v in timer.modes.values())


def test_a_disaggregated_run_gives_the_rows_of_a_fused_run(tmp_path):
    """The drafter side drafts the Speculative RAG rows only; the verifier side answers the
    Standard RAG rows whole: the same records as the fused run, every row once."""
    cfg = config(mode=PER_TASK)
    assert _disaggregated_mixed(cfg, tmp_path) == fused(cfg)


def test_one_chunk_sends_one_batched_call_per_mode():
    """A chunk's rows of one mode go to the engine together: one drafting call for the claim
    and choice rows, one Standard RAG call for the qa rows (not one per task or row)."""
    drafter, verifier = FakeEngine(), FakeEngine()
    records = pipeline.process_rows(fresh_rows(), config(mode=PER_TASK), drafter=drafter, verifier=verifier,
                                    info=INFO)
    answered_qa = sum(1 for r in records if r["error"] is None and r["task"] == "qa")
    assert answered_qa > 1
    assert [c.prompts for c in verifier.calls_to("generate")] == [answered_qa]
    assert len(drafter.calls_to("generate")) == 1


# --- the whole run: the product's CLI and Prefect flow, the FakeEngine in place of vLLM ---

CONFIG = str(ROOT / "configs" / "test-smollm2.yaml")


def _cli(tmp_path, inp, out, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.fake_engine_cli", "run", "-i", str(inp), "-o", str(out),
                           "-c", CONFIG, "--json", *extra], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, env=subprocess_env(tmp_path))


def _mixed_inputs(inp) -> list[str]:
    """Two shards, each mixing claim and qa rows (the demo's), and a third with a choice row."""
    inp.mkdir()
    shards = {f"s{i}.parquet": pa.concat_tables([sample_rows("climate_fever", 2, skip=2 * i),
                                                 sample_rows("popqa", 2, skip=2 * i)]) for i in range(2)}
    shards["s2.parquet"] = TABLE.filter(pa.compute.equal(TABLE.column("query_id"), "q-choice"))
    for name, table in shards.items():
        pq.write_table(table, inp / name)
    return sorted(q for t in shards.values() for q in t.column("query_id").to_pylist())


def _outputs(out) -> list[dict]:
    return [r for f in sorted(out.glob("s*.parquet")) for r in pq.read_table(f).to_pylist()]


def _manifest(r) -> dict:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout[r.stdout.index("{"):])


@pytest.mark.parametrize("stages", ["fused", "disaggregated"])
def test_a_run_over_mixed_shards_answers_every_row_once_and_resumes(tmp_path, stages):
    """``--mode claim=speculative,choice=speculative,qa=standard``: every row once with its
    task's mode; the manifest's metrics and cost per mode; a shard whose output is gone is
    computed again on resume, the others resumed, and still every row once."""
    inp, out = tmp_path / "in", tmp_path / "out"
    expected = _mixed_inputs(inp)
    mode = "claim=speculative,choice=speculative,qa=standard"
    m = _manifest(_cli(tmp_path, inp, out, "--mode", mode, "--stages", stages))
    rows = _outputs(out)
    assert sorted(r["query_id"] for r in rows) == expected
    assert {(r["task"], r["mode"]) for r in rows} == {("claim", "speculative"), ("qa", "standard"),
                                                     ("choice", "speculative")}
    assert m["config"]["mode"] == PER_TASK
    assert set(m["metrics"]["by_mode"]) == {"speculative", "standard"}
    assert m["metrics"]["by_mode"]["standard"]["rows"] == 4
    assert m["metrics"]["by_task"]["qa"]["mode"] == "standard"
    assert set(m["cost"]["output"]["mode_seconds"]) == {"speculative", "standard"}
    summary = json.loads((out / "_report" / "summary.json").read_text())
    assert summary["by_mode"]["speculative"]["rows"] == 5 and summary["by_mode"]["standard"]["seconds"] > 0
    assert "## Per mode" in (out / "_report" / "report.md").read_text()

    done = {f.rsplit("/", 1)[-1] for f in storage.list_files(storage.join(str(out), resume.SHARDS_DIR))}
    assert len([d for d in done if d.endswith(".json")]) == 3
    (out / "s1.parquet").unlink()  # lost: recomputed; s0 and s2 resumed
    m2 = _manifest(_cli(tmp_path, inp, out, "--mode", mode, "--stages", stages))
    assert m2["resumed_shards"] == 2 and m2["cost"]["this_invocation"]["computed_shards"] == 1
    assert sorted(r["query_id"] for r in _outputs(out)) == expected
    assert m2["config_hash"] == m["config_hash"]


def test_another_mode_mapping_is_another_run(tmp_path):
    """The config hash covers the mapping: the same output under another per-task mode is a
    conflict (exit 2), not a resume that would mix the two."""
    inp, out = tmp_path / "in", tmp_path / "out"
    _mixed_inputs(inp)
    _manifest(_cli(tmp_path, inp, out, "--mode", "qa=standard"))
    r = _cli(tmp_path, inp, out, "--mode", "claim=standard")
    assert r.returncode == 2 and "mode" in r.stderr, r.stderr[-2000:]
