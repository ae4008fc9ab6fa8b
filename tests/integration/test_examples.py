"""examples/ run as a user runs them, on tests/fakes.py's FakeEngine in place of vLLM (the
engine is not what they show) with configs/test-smollm2.yaml: the Python API on the bundled
sample, a corpus index and ``run --index`` (the shell script, its CLI processes on the fake
engine through tests/fake_engine_cli.py), the nightly flow's deployment on a local schedule
(built, not served), and a run from S3 to S3 through a local moto server."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from prefect.flows import load_flow_from_entrypoint


from ..conftest import ROOT, subprocess_env

EXAMPLES = ROOT / "examples"
CONFIG = str(ROOT / "configs" / "test-smollm2.yaml")


def _example(name: str):
    """examples/<name>.py as a module (each example is a script, not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _answered(table) -> None:
    """Every row came out answered (an answer, no error), the sample's query ids in order."""
    rows = table.to_pylist()
    assert [r["error"] for r in rows] == [None] * len(rows)
    assert all(r["answer"] for r in rows)


# No capsys where a flow runs in this process: Prefect's console handler keeps the stream of the
# test that first ran a flow, and capsys closes it when that test ends.


def test_python_api_example_answers_the_sample_rows(prefect_harness, fake_engine, tmp_path):
    manifest = _example("python_api").main(["--rows", "3", "--out", str(tmp_path), "--config", CONFIG])
    assert manifest["config"]["sampling"]["num_drafts"] == 3  # the override the example sets
    out = pq.read_table(tmp_path / "answers" / "part-0000.parquet")
    sample = pq.read_table(ROOT / "samples" / "demo" / "popqa.parquet").slice(0, 3)
    assert out.column("query_id").to_pylist() == sample.column("query_id").to_pylist()
    _answered(out)


def test_corpus_index_example_answers_rows_without_documents_from_the_index(tmp_path):
    env = {**subprocess_env(tmp_path), "SPECRAG": f"{sys.executable} -m tests.fake_engine_cli", "CONFIG": CONFIG,
           "ROWS": "2", "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(EXAMPLES / "corpus_index.sh"), str(tmp_path / "ex")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    queries = pq.read_table(tmp_path / "ex" / "queries")
    assert "documents" not in queries.column_names and queries.num_rows == 2
    out = pq.read_table(tmp_path / "ex" / "answers" / "part-0000.parquet")
    _answered(out)
    assert all(n > 0 for n in out.column("num_documents").to_pylist())  # passages came from the index
    corpus = set(pq.read_table(ROOT / "samples" / "corpus" / "popqa_passages.parquet").column("doc_id").to_pylist())
    used = {d for row in out.column("drafts").to_pylist() for draft in row for d in draft["doc_ids"]}
    assert used and used <= corpus


def test_prefect_schedule_example_builds_the_nightly_deployment():
    ex = _example("prefect_schedule")
    dep = ex.build_deployment("s3://b/queries", "s3://b/answers", config_path=CONFIG, timezone="Europe/Amsterdam")
    assert dep.name == "nightly-local" and dep.flow_name == "specrag-nightly"
    (schedule,) = dep.schedules
    assert schedule.schedule.cron == "30 2 * * *" and schedule.schedule.timezone == "Europe/Amsterdam"
    assert dep.parameters == {"input_root": "s3://b/queries", "output_root": "s3://b/answers", "lag_days": 1,
                              "timezone": "Europe/Amsterdam", "config_path": CONFIG}
    assert dep.entrypoint.endswith("nightly.py:nightly_flow")
    # a scheduled run's parameters pass the flow's own validation (each required one given, typed)
    flow = load_flow_from_entrypoint(str(ROOT / ex.ENTRYPOINT))
    assert flow.validate_parameters(dep.parameters)["lag_days"] == 1
    with pytest.raises(ValueError):
        ex.build_deployment("s3://b/q", "s3://b/a", cron="not a cron")


def test_s3_example_runs_from_s3_to_s3_through_a_local_server(prefect_harness, fake_engine, monkeypatch):
    for k in ("SPECRAG_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(k, os.environ.get(k, ""))  # the example sets them; restored after the test
    manifest = _example("s3_local").main(["--rows", "2", "--config", CONFIG])
    (shard,) = manifest["shards"]
    assert shard["status"] == "ok" and shard["rows_out"] == 2, shard
    assert shard["input"].startswith("s3://specrag-example/queries/")
    assert shard["output"] == "s3://specrag-example/answers/part-0000.parquet", shard
    # the S3 server ran as its own process: its Flask app in this one breaks every later vLLM
    # engine start (vLLM walks sys.modules and trips over Flask's application-context proxy)
    assert "flask" not in sys.modules
