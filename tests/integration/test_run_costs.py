"""One cost rule for the manifest, the run report and the CLI summary, on real
``specrag-batch run`` processes (tests/fake_engine_cli.py: the product's CLI and Prefect flow,
the FakeEngine in place of vLLM): a run whose every shard failed says so and leaves no run key
that would refuse a corrected config; a resumed and a no-op run keep the output's cost and
label their own. The rule itself: tests/unit/test_manifest_costs.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from collections import defaultdict

import pytest

from specrag_batch.run import resume
from specrag_batch.core import storage
from specrag_batch.engines.usage import EngineUsage
from specrag_batch.run.pipeline import STAGES

from ..conftest import ROOT, sample_rows, subprocess_env

pytestmark = pytest.mark.integration


CONFIG = str(ROOT / "configs" / "test-smollm2.yaml")


def _cli(inp, out, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.fake_engine_cli", "run", "-i", str(inp), "-o", str(out),
                           "-c", CONFIG], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env=subprocess_env(tmp_path))


def test_a_run_whose_every_shard_failed_says_so_and_not_that_it_computed_them(tmp_path):
    """A run whose only shard failed its schema check counts it as failed ("computed nothing: 0
    shard(s) already done, 1 failed") and never says it computed every shard."""
    import pyarrow.parquet as pq

    inp = tmp_path / "in"
    inp.mkdir()
    pq.write_table(sample_rows("climate_fever", 2).drop_columns(["query"]), inp / "s0.parquet")
    r = _cli(inp, tmp_path / "out", tmp_path)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "computed nothing: 0 shard(s) already done, 1 failed" in r.stdout, r.stdout
    assert "it computed every shard" not in r.stdout, r.stdout


def test_a_run_whose_every_shard_failed_leaves_no_key_refusing_a_corrected_config(tmp_path):
    """A run whose every shard failed its schema check leaves no ``_run.json``, so the corrected
    command with another config is not refused as a conflict (docs/operations.md: a run that
    computed nothing leaves no key)."""
    import pyarrow.parquet as pq

    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    good = sample_rows("climate_fever", 2)
    pq.write_table(good.drop_columns(["query"]), inp / "s0.parquet")
    r = _cli(inp, out, tmp_path)
    assert r.returncode == 1 and "failed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert (out / "_manifest.json").exists() and not (out / resume.RUN_FILE).exists()
    pq.write_table(good, inp / "s0.parquet")  # the input corrected, and another config
    cfg = tmp_path / "other.yaml"
    cfg.write_text(Path(CONFIG).read_text() + "\nseed: 7\n")
    r = subprocess.run([sys.executable, "-m", "tests.fake_engine_cli", "run", "-i", str(inp), "-o", str(out),
                        "-c", str(cfg)], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env=subprocess_env(tmp_path))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "refus" not in r.stderr and pq.read_table(out / "s0.parquet").column("query_id").to_pylist() == \
        good.column("query_id").to_pylist()


def _markers(out) -> dict[str, dict]:
    mdir = storage.join(str(out), resume.SHARDS_DIR)
    return {f.rsplit("/", 1)[-1]: json.loads(storage.read_bytes(f))
            for f in storage.list_files(mdir) if f.endswith(".json")}


def _stage_sum(parts) -> dict[str, float]:
    total = defaultdict(float)
    for p in parts:
        for k, v in p.items():
            total[k] += v
    return {k: total.get(k, 0.0) for k in STAGES}


def _tokens(engines: dict) -> dict:
    return {n: (st["prompt_tokens"], st["generated_tokens"], st["calls"]) for n, st in engines.items()}


def test_resumed_and_noop_runs_keep_the_outputs_cost_and_label_their_own(tmp_path):
    import pyarrow.parquet as pq

    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(2):
        pq.write_table(sample_rows("climate_fever", 2, skip=2 * i), inp / f"s{i}.parquet")
    out = tmp_path / ("an-output-directory-with-a-long-name-" * 3) / "out"  # over 80 columns
    first = _cli(inp, out, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    full = json.loads((out / "_manifest.json").read_text())
    assert full["cost"]["output"]["engines"] and full["cost"]["this_invocation"]["computed_shards"] == 2
    # each engine's dtype (the fake's float32): in every done marker, the manifest, the summary, the report
    name = next(iter(full["cost"]["output"]["engines"]))
    assert full["engine_dtypes"] == full["cost"]["output"]["engine_dtypes"] == {name: "float32"}
    assert [mk["result"]["engine_dtypes"] for mk in _markers(out).values()] == [{name: "float32"}] * 2
    assert "engine dtypes" in first.stdout and f"{name}: float32" in first.stdout, first.stdout
    assert f"| {name} | float32 |" in (out / "_report" / "report.md").read_text()

    # a run stopped while s1 was in flight: s1 has neither output nor done marker
    os.remove(out / "s1.parquet")
    os.remove(out / resume.SHARDS_DIR / "s1.parquet.json")
    again = _cli(inp, out, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    m = json.loads((out / "_manifest.json").read_text())
    mk = {k: v["result"] for k, v in _markers(out).items()}
    assert m["resumed_shards"] == 1
    s0, s1 = (next(s for s in m["shards"] if s["input"].endswith(n)) for n in ("s0.parquet", "s1.parquet"))
    assert s0["resumed"] and s0["engines"] == mk["s0.parquet.json"]["engines"] != {}  # from its done marker
    assert not s1["resumed"] and s1["run_id"] == m["run_id"]

    out_cost, this = m["cost"]["output"], m["cost"]["this_invocation"]
    # the output's cost: every done marker, summed
    assert out_cost["stage_seconds"] == pytest.approx(_stage_sum(r["stage_seconds"] for r in mk.values()), abs=2e-3)
    assert out_cost["engines"] == EngineUsage.total([r["engines"] for r in mk.values()]).as_dict()
    assert out_cost["shard_seconds"] == pytest.approx(sum(r["seconds"] for r in mk.values()), abs=2e-3)
    assert out_cost["rows"] == 4 and out_cost["shards"] == 2
    assert out_cost["runs"] == sorted({full["run_id"], m["run_id"]})
    # the same output as the fresh run: the same tokens (the fake is deterministic), not half of them
    assert _tokens(out_cost["engines"]) == _tokens(full["cost"]["output"]["engines"])
    # this invocation: what it computed (s1), its wall time; the top-level keys are the same numbers
    assert this["computed_shards"] == 1 and this["resumed_shards"] == 1 and this["rows"] == 2
    assert this["stage_seconds"] == pytest.approx(_stage_sum([mk["s1.parquet.json"]["stage_seconds"]]), abs=2e-3)
    assert _tokens(this["engines"]) == _tokens(mk["s1.parquet.json"]["engines"])
    assert (m["stage_seconds"], m["engines"], m["seconds"]) == (this["stage_seconds"], this["engines"], this["seconds"])
    assert sum(this["stage_seconds"].values()) <= this["seconds"]  # stages fit in the total now
    rep = json.loads((out / "_report" / "summary.json").read_text())
    name, tok = next(iter(rep["tokens_per_row"].items()))
    assert tok["prompt"] == pytest.approx(out_cost["engines"][name]["prompt_tokens"] / 4)  # over the output's rows
    assert rep["stage_seconds"] == out_cost["stage_seconds"] and rep["this_invocation"]["computed_shards"] == 1
    for label in ("output cost", "this invocation", "computed 1 shard(s), 2 rows; 1 already done"):
        assert label in again.stdout, again.stdout

    # a no-op re-run: the output's cost stays, and it says it computed nothing
    noop = _cli(inp, out, tmp_path)
    assert noop.returncode == 0, noop.stderr[-3000:]
    m3 = json.loads((out / "_manifest.json").read_text())
    assert m3["cost"]["output"] == out_cost
    t3 = m3["cost"]["this_invocation"]
    assert t3["computed_shards"] == 0 and t3["resumed_shards"] == 2 and t3["engines"] == {} == m3["engines"]
    assert set(t3["stage_seconds"].values()) == {0.0}
    rep3 = json.loads((out / "_report" / "summary.json").read_text())
    assert rep3["tokens_per_row"] == rep["tokens_per_row"] and rep3["stage_seconds"] == rep["stage_seconds"]
    assert "Computed nothing: 2 shards already done" in (out / "_report" / "report.md").read_text()
    assert "computed nothing: 2 shard(s) already done" in noop.stdout
    # a manifest written before the cost block (resumed shards' engines {}): `specrag-batch
    # report` takes their usage from the done markers, and gives the same output cost
    legacy = {k: v for k, v in m3.items() if k != "cost"}
    legacy["shards"] = [{**sh, "engines": {}} for sh in m3["shards"]]
    (out / "_manifest.json").write_text(json.dumps(legacy))
    from specrag_batch.run.report import write_report

    rep4 = write_report(str(out))
    assert rep4["tokens_per_row"] == rep["tokens_per_row"] and rep4["output_cost"]["engines_unrecorded"] == []
    # not a terminal: the paths are whole, each on one line
    lines = noop.stdout.splitlines()
    assert f"output: {out}" in lines and f"report: {out}/_report/report.md" in lines, noop.stdout


def test_one_model_in_both_roles_keeps_its_usage_apart_by_role(tmp_path):
    """Drafter and verifier of one model (one engine name, also one engine when their settings
    agree): the usage per model sums both roles, and ``engines_by_role`` keeps the drafter's and
    the verifier's calls and tokens apart, adding up to the model's, in every done marker and
    in the output's cost."""
    import pyarrow.parquet as pq
    import yaml

    cfg = yaml.safe_load(Path(CONFIG).read_text())
    cfg.setdefault("selection", {})["use_self_reflection"] = True  # a verifier pass on every row
    config = tmp_path / "both-roles.yaml"
    config.write_text(yaml.safe_dump(cfg))
    inp = tmp_path / "in"
    inp.mkdir()
    pq.write_table(sample_rows("climate_fever", 2), inp / "s0.parquet")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "tests.fake_engine_cli", "run", "-i", str(inp), "-o", str(out),
                        "-c", str(config)], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env=subprocess_env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    cost = json.loads((out / "_manifest.json").read_text())["cost"]["output"]
    (model, usage), = cost["engines"].items()  # one name: the roles merged, as before
    roles = cost["engines_by_role"]
    assert set(roles) == {"drafter", "verifier"} and all(roles[x]["calls"] > 0 for x in roles), roles
    for counter in ("calls", "prompt_tokens", "generated_tokens"):
        assert roles["drafter"][counter] + roles["verifier"][counter] == usage[counter], (counter, roles, usage)
    assert roles["verifier"]["generated_tokens"] < roles["drafter"]["generated_tokens"]  # it scores, drafts are written
    marker, = _markers(out).values()
    assert marker["result"]["engines_by_role"] == roles
