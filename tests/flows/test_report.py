"""Run report and quiet runs on one real small CLI run (one engine load, in the CLI process):
the CLI's stderr holds no WARNING/ERROR line, the report's plots are valid PNGs and its
numbers equal those recomputed here from the Parquet; a resumed in-process flow run (no engine)
publishes the report as Prefect artifacts, read back through the Prefect client; a report
that cannot be written does not fail the run and is recorded in the manifest; the report
reads the same run on S3 (moto) with an odd shard name."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.core import storage
from specrag_batch.core.quiet import OFF_DEFAULTS

from ..conftest import ROOT, sample_rows, subprocess_env

pytestmark = pytest.mark.slow

ODD = "claims #1 [x].parquet"
BAD_LEVEL = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Warning:|Traceback|^\[?[WEF]\d{4} ")
# vLLM's CPU worker calls its C++ op init_cpu_memory_env on every engine load, which prints this
# through c10's default warning handler (not Python logging or warnings): informational, and
# only TORCH_CPP_LOG_LEVEL=ERROR would hide it, which would hide every other C++ warning too.
KNOWN = re.compile(r"utils\.cpp:\d+\] Warning: NUMA binding: Using MEMBIND policy")


def _with_blank_query(t: pa.Table) -> pa.Table:
    rows = t.to_pylist()
    rows[0]["query"] = "   "  # a row error: field 'query'
    return pa.Table.from_pylist(rows, schema=t.schema)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """`specrag-batch run` on 4 PopQA + 4 Climate-FEVER rows (one blank query) with the
    SmolLM2 config, m = 2 drafts, τ_min = -20; the environment as a user's: telemetry
    settings not exported (the product's default decides)."""
    tmp = tmp_path_factory.mktemp("report")
    inp, out = tmp / "in", tmp / "out"
    inp.mkdir()
    pq.write_table(sample_rows("popqa", 4), inp / "popqa.parquet")
    pq.write_table(_with_blank_query(sample_rows("climate_fever", 4)), inp / ODD)
    env = {k: v for k, v in subprocess_env(tmp).items() if k not in (*OFF_DEFAULTS, "SPECRAG_TELEMETRY")}
    p = subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", "run", "-i", str(inp), "-o", str(out),
                        "-c", str(ROOT / "configs" / "test-smollm2.yaml"), "-m", "2", "--tau-min", "-20"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1500)
    assert p.returncode == 0, p.stderr[-3000:]
    return inp, out, p


def _recomputed(out) -> dict:
    """The report's numbers, recomputed with pyarrow from the output shards."""
    rows = [r for f in sorted(out.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    graded = [r for r in rows if r["error"] is None and r["answer"] is not None and r["correct"] is not None]
    by_task = {}
    for task in sorted({r["task"] for r in graded}):
        g = [r for r in graded if r["task"] == task]
        m = {"n_with_gold": len(g), "accuracy": sum(r["correct"] for r in g) / len(g)}
        if task == "qa":
            m["exact_match"] = sum(bool(r["exact_match"]) for r in g) / len(g)
            m["f1"] = sum(r["f1"] or 0.0 for r in g) / len(g)
        by_task[task] = m
    return {"rows": len(rows), "answered": sum(r["error"] is None and r["answer"] is not None for r in rows),
            "errors": sum(r["error"] is not None for r in rows),
            "low_confidence": sum(bool(r["low_confidence"]) for r in rows),
            "fast_path": sum(bool(r["fast_path"]) for r in rows),
            "flags_by_kind": dict(Counter(f for r in rows for f in r["flags"] or [])), "by_task": by_task}


def test_cli_run_logs_nothing_at_warning_or_above(cli_run):
    _, _, p = cli_run
    bad = [line for line in p.stderr.splitlines() if BAD_LEVEL.search(line) and not KNOWN.search(line)]
    assert not bad, "\n".join(bad)
    assert "Failed to send telemetry" not in p.stderr


def test_report_written_by_the_run(cli_run):
    _, out, _ = cli_run
    import matplotlib.image as mpimg

    man = json.loads((out / "_manifest.json").read_text())
    assert man["report"]["status"] == "ok" and man["report"]["uri"].endswith("_report/report.md")
    for name in ("score_correct_vs_wrong.png", "risk_coverage.png"):
        data = (out / "_report" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        img = mpimg.imread(out / "_report" / name)
        assert img.ndim == 3 and img.shape[0] >= 200 and img.shape[1] >= 300
        assert img.std() > 0  # not a blank canvas
    s = json.loads((out / "_report" / "summary.json").read_text())
    want = _recomputed(out)
    assert want["rows"] == 8 and want["errors"] == 1  # the blank query
    for k in ("rows", "answered", "errors", "low_confidence", "fast_path", "flags_by_kind"):
        assert s[k] == want[k], k
    assert s["by_task"].keys() == want["by_task"].keys() and want["by_task"]
    for task, m in want["by_task"].items():
        got = dict(s["by_task"][task])
        assert got.pop("mode") == "speculative"  # the mode that answered the task's rows
        assert got == pytest.approx(m)
    assert s["errors_by_reason"] == {"empty_query": 1}  # the blank query, by its error_reason code
    assert s["stage_seconds"] == man["stage_seconds"] and s["stage_seconds"]["drafting"] > 0
    (name, tok), = s["tokens_per_row"].items()  # one engine serves both roles
    assert tok["prompt"] == pytest.approx(man["engines"][name]["prompt_tokens"] / man["rows_out"])
    md = (out / "_report" / "report.md").read_text()
    assert f"| rows | {want['rows']} |" in md and "risk_coverage.png" in md
    assert set(s["auroc"]["all"]) == {"score", "mean_logprob", "label_probability"}


def test_report_command_and_s3(cli_run, s3_bucket, tmp_path):
    """`specrag-batch report` re-reads the run; the same output copied to S3 (odd key names)
    gives the same numbers; _drafts/ and unmarked objects are not read."""
    _, out, _ = cli_run
    from specrag_batch.run.report import write_report

    local = json.loads((out / "_report" / "summary.json").read_text())
    prefix = f"{s3_bucket}/answers"
    fs, path = storage.filesystem(prefix)
    for f in out.rglob("*"):
        if f.is_file() and "_report" not in f.parts:
            fs.put_file(str(f), f"{path}/{f.relative_to(out).as_posix()}")
    for junk in ("_drafts/x.parquet", "unmarked.parquet"):  # never trusted
        fs.put_file(str(next(out.glob("*.parquet"))), f"{path}/{junk}")
    s = write_report(prefix)
    assert s["shards"] == 2 and s["rows"] == local["rows"] and s["by_task"] == local["by_task"]
    assert fs.exists(f"{path}/_report/risk_coverage.png")
    p = subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", "report", str(out)], capture_output=True,
                       text=True, env=subprocess_env(tmp_path), cwd=ROOT, timeout=300)
    assert p.returncode == 0 and "8 rows from 2 shards" in p.stdout, p.stderr[-2000:]
    (tmp_path / "empty").mkdir()
    for where, why in (("nothing", "nothing' does not exist"), ("empty", "no finished output shard")):
        bad = subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", "report", str(tmp_path / where)],
                             capture_output=True, text=True, env=subprocess_env(tmp_path), cwd=ROOT)
        assert bad.returncode == 2 and why in " ".join(bad.stderr.split()), bad.stderr  # errors: stderr


def test_artifacts_on_flow_run_and_report_failure_does_not_fail_run(cli_run, prefect_harness):
    """A resumed in-process run (every shard done: no engine) writes the report and
    publishes the markdown and table artifacts on its flow run; with ``_report`` blocked by a
    file the run still completes and the manifest records the failure."""
    inp, out, _ = cli_run
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter

    from flows.speculative_rag import speculative_rag_flow
    from specrag_batch.config import load_config

    cfg = load_config(ROOT / "configs" / "test-smollm2.yaml",
                      {"sampling.num_drafts": 2, "selection.tau_min": -20.0})
    state = speculative_rag_flow(str(inp), str(out), cfg.model_dump(mode="json"), return_state=True)
    man = state.result()
    assert man["resumed_shards"] == 2 and man["report"]["status"] == "ok"
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
        by_type = {a.type: a for a in arts}
        assert set(by_type) >= {"markdown", "table"}
        assert "| rows | 8 |" in by_type["markdown"].data
        table = by_type["table"].data
        table = json.loads(table) if isinstance(table, str) else table
        assert {"metric": "rows", "value": "8"} in table
        assert client.read_flow_runs(flow_run_filter=FlowRunFilter())  # the run is recorded
    # the report cannot be written: the run completes, the manifest says why
    import shutil

    shutil.rmtree(out / "_report")
    (out / "_report").write_text("not a directory")
    man = speculative_rag_flow(str(inp), str(out), cfg.model_dump(mode="json"))
    assert man["failed_shards"] == 0 and man["report"]["status"] == "failed"
    assert man["report"]["error"]
    stored = json.loads((out / "_manifest.json").read_text())
    assert stored["report"]["status"] == "failed"
    os.remove(out / "_report")


def test_calibrate_command_on_the_run(cli_run, tmp_path):
    """`specrag-batch calibrate` on the real run: the snippet it writes loads as a config and
    holds the τ_min computed here from the same rows."""
    _, out, _ = cli_run
    from specrag_batch.confidence.calibration import calibrate
    from specrag_batch.config import load_config
    from specrag_batch.run.report import load_rows

    snippet = tmp_path / "tau.yaml"
    p = subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", "calibrate", str(out), "--target-coverage",
                        "0.5", "--bootstrap", "50", "--out", str(snippet)], capture_output=True, text=True,
                       env=subprocess_env(tmp_path), cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    want = {r.task: r.tau for r in calibrate(load_rows(str(out)).rows, target_coverage=0.5, n_boot=50)}
    cfg = load_config(snippet)
    assert want and all(cfg.selection.tau_for(t) == pytest.approx(v) for t, v in want.items() if v is not None)
    assert "τ_min" in p.stdout and "AUROC" in p.stdout
