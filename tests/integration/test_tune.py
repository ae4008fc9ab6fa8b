"""``specrag-batch tune`` end to end on the bundled labelled sample (samples/demo: 40 claims,
20 questions), through the product's CLI and Prefect runs with tests/fakes.py's FakeEngine in
place of vLLM (tests/fake_engine_cli.py): the rule printed before the runs, the figures, the
choice by that rule, the config (a nightly run uses it as it is), the report page and its
picture; a re-run resumes every candidate; bad input refused in one line. The statistics and
the rule alone: tests/unit/test_tuning.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from specrag_batch.run import tuning
from specrag_batch.config import load_config

from ..conftest import ROOT, sample_rows, subprocess_env

pytestmark = pytest.mark.integration

CONFIG = str(ROOT / "configs" / "test-smollm2.yaml")


def _cli(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.fake_engine_cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900, env=subprocess_env(tmp_path))


def test_tune_on_the_bundled_sample_decides_by_its_rule_and_writes_a_config_nightly_uses(tmp_path):
    out = tmp_path / "tune"
    r = _cli(tmp_path, "tune", str(ROOT / "samples" / "demo"), "-o", str(out), "-c", CONFIG)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rule = tuning.rule_text(2.0)
    assert r.stdout.index("Rule: per task") < r.stdout.index("candidates per task")  # stated before the runs
    assert "rows with gold: claim 40, qa 20" in r.stdout

    res = json.loads((out / "tune.json").read_text())
    figures, decision = res["figures"], res["decision"]
    assert res["rule"] == rule and set(figures) == {"claim", "qa"}
    for task, cands in figures.items():
        assert set(cands) == {"speculative", "standard"}
        v = cands["speculative"]["vs_standard"]
        assert cands["standard"]["n"] == v["n"] == {"claim": 40, "qa": 20}[task]
        assert 0 <= v["mcnemar_p"] <= 1 and v["ci95"][0] <= v["diff"] <= v["ci95"][1]
        assert v["ratio_ci95"][0] <= v["ratio"] <= v["ratio_ci95"][1] and v["units"] == {"claim": 8, "qa": 4}[task]
        assert cands["speculative"]["seconds_per_row"] > 0 and cands["standard"]["seconds_per_row"] > 0
        assert decision["modes"][task] == ("speculative" if tuning.passes(v, 2.0) else "standard")
        assert f"{task}: {decision['modes'][task]}" in r.stdout
    # accuracies are the runs' own: the standard candidate's output, graded
    std = [row for f in sorted((out / "runs" / "standard").glob("*.parquet")) for row in pq.read_table(f).to_pylist()]
    claims = [row["correct"] for row in std if row["task"] == "claim"]
    assert figures["claim"]["standard"]["accuracy"] == pytest.approx(sum(claims) / len(claims))

    md = (out / "tune.md").read_text()
    assert rule in md and "| task | candidate | n | accuracy % |" in md and "![accuracy against seconds per row](tune.png)" in md
    assert (out / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cfg = load_config(out / "tuned.yaml")
    assert cfg.mode_for("claim") == decision["modes"]["claim"] and cfg.mode_for("qa") == decision["modes"]["qa"]
    assert cfg.drafter.model == load_config(CONFIG).drafter.model

    again = _cli(tmp_path, "tune", str(ROOT / "samples" / "demo"), "-o", str(out), "-c", CONFIG)
    assert again.returncode == 0, again.stderr[-3000:]
    for name in ("speculative", "standard"):
        m = json.loads((out / "runs" / name / "_manifest.json").read_text())
        assert m["resumed_shards"] == len(m["shards"]) == 12

    night = tmp_path / "in" / "date=2026-11-28"
    night.mkdir(parents=True)
    pq.write_table(sample_rows("climate_fever", 2, skip=40 - 2), night / "claims.parquet")
    pq.write_table(sample_rows("popqa", 2, skip=18), night / "questions.parquet")
    r = _cli(tmp_path, "nightly", "--input-root", str(tmp_path / "in"), "--output-root", str(tmp_path / "out"),
             "--date", "2026-11-28", "-c", str(out / "tuned.yaml"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [row for f in sorted((tmp_path / "out" / "date=2026-11-28").glob("*.parquet")) for row in pq.read_table(f).to_pylist()]
    assert len(rows) == 4 and all(row["mode"] == decision["modes"][row["task"]] for row in rows)


def test_bad_input_is_refused_in_one_line(tmp_path):
    no_gold = tmp_path / "no_gold.parquet"
    pq.write_table(sample_rows("climate_fever", 12).drop_columns(["gold"]), no_gold)
    cases = [([str(no_gold)], "no 'gold' column"),
             ([str(ROOT / "samples" / "demo" / "popqa.parquet")], "one task only (qa, 20 rows)"),
             ([str(ROOT / "samples" / "demo"), "--min-rows", "30"], "task qa has 20 rows with gold, under the minimum of 30"),
             ([str(ROOT / "samples" / "demo"), "--drafter", "no-such-model"], "--drafter: drafter.model: 'no-such-model'")]
    for args, words in cases:
        r = _cli(tmp_path, "tune", *args, "-o", str(tmp_path / "t"), "-c", CONFIG)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr[-2000:])
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        assert not (tmp_path / "t" / "runs").exists()  # refused before any run
