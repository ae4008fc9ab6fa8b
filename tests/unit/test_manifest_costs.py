"""One cost rule for the manifest, the run report and the CLI summary, and paths that a log keeps
whole: ``cost.output`` is the output's cost (every finished shard's, summed from the done
markers), ``cost.this_invocation`` what the run computed, and the top-level ``stage_seconds`` /
``engines`` / ``seconds`` are this invocation's. A manifest written before the cost block is
costed from its shards. Real ``specrag-batch run`` processes: tests/integration/test_run_costs.py."""

from __future__ import annotations

import io

import pytest
import typer

from specrag_batch.cli import commands as cli
from specrag_batch.engines.usage import EngineUsage
from specrag_batch.run.manifest import build_manifest, computed_part, cost_of
from specrag_batch.run.shard_job import ShardResult

from ..conftest import small_config


def _result(name: str, *, resumed: bool, seconds: float, tokens: int, run_id: str, **kw) -> ShardResult:
    return ShardResult(f"/in/{name}", f"/out/{name}", "ok", rows_in=10, rows_out=10, seconds=seconds,
                       stage_seconds={"drafting": seconds / 2, "verification": seconds / 2}, run_id=run_id,
                       resumed=resumed, engines={"m": {"seconds": seconds, "prompt_tokens": tokens,
                                                       "cached_prompt_tokens": 0, "generated_tokens": 10,
                                                       "calls": 2}}, **kw)


def test_manifest_report_and_summary_label_output_and_invocation_costs(tmp_path):
    """A resumed shard (marker from run ``old``) and a shard computed now: hand-checked sums."""
    old = _result("a.parquet", resumed=True, seconds=200.0, tokens=1000, run_id="old")
    new = _result("b.parquet", resumed=False, seconds=100.0, tokens=600, run_id="new")
    m = build_manifest(small_config(), "new", "/in", "/out", [old, new], [], seconds=130.0,
                       engines=EngineUsage({"m": dict(new.engines["m"])}), engine_load_seconds=20.0, execution={})
    o, t = m["cost"]["output"], m["cost"]["this_invocation"]
    assert o["stage_seconds"]["drafting"] == 150.0 and o["shard_seconds"] == 300.0 and o["rows"] == 20
    assert o["engines"]["m"]["prompt_tokens"] == 1600 and o["runs"] == ["new", "old"]
    assert t["stage_seconds"]["drafting"] == 50.0 == m["stage_seconds"]["drafting"]
    assert t["engines"]["m"]["prompt_tokens"] == 600 and t["seconds"] == 130.0 and t["engine_load_seconds"] == 20.0
    assert sum(t["stage_seconds"].values()) + t["engine_load_seconds"] <= t["seconds"]
    assert cost_of(m) == m["cost"]
    from specrag_batch.cli import console

    buf = io.StringIO()
    console.console = console.make_console(buf)  # the summary's console; restored below
    try:
        cli.print_summary({**m, "metrics": {"answered": 20, "errors": 0, "low_confidence": 0, "fast_path": 0}})
    finally:
        console.console = console.make_console()
    text = buf.getvalue()
    assert "output cost" in text and "2 finished shards, 20 rows, computed by 2 run(s)" in text
    assert "tokens / row m" in text and "prompt 80, generated 1" in text  # 1600 / 20 rows
    assert "computed 1 shard(s), 10 rows; 1 already done" in text


def test_a_manifest_written_before_the_cost_block_is_costed_from_its_shards():
    """Older manifests: stage seconds from the shards, this invocation's figures from the
    top-level keys; resumed shards without recorded engine usage are named, not counted as 0."""
    shards = [{**_result("a.parquet", resumed=True, seconds=200.0, tokens=1000, run_id="old").as_dict(), "engines": {}},
              _result("b.parquet", resumed=False, seconds=100.0, tokens=600, run_id="new").as_dict()]
    legacy = {"shards": shards, "seconds": 130.0, "engine_load_seconds": 20.0, "engines": shards[1]["engines"],
              "stage_seconds": {"drafting": 150.0, "verification": 150.0}}
    c = cost_of(legacy)
    assert c["output"]["stage_seconds"]["drafting"] == 150.0 and c["output"]["engines_unrecorded"] == ["/in/a.parquet"]
    assert c["this_invocation"]["stage_seconds"]["drafting"] == 50.0 and c["this_invocation"]["seconds"] == 130.0


def test_drafts_an_earlier_run_finished_are_the_outputs_cost_not_this_invocations():
    """Disaggregated: the verify task of a shard whose drafts were finished before reports the
    whole shard (its done marker), with the drafting part as ``reused``."""
    shard = _result("a.parquet", resumed=False, seconds=100.0, tokens=600, run_id="new").as_dict()
    shard["engines"]["d"] = {"seconds": 40.0, "prompt_tokens": 400, "cached_prompt_tokens": 0,
                             "generated_tokens": 90, "calls": 1}
    shard["reused"] = {"stage_seconds": {"drafting": 50.0}, "seconds": 60.0,
                       "engines": {"d": dict(shard["engines"]["d"])}}
    stages, usage = computed_part(shard)
    assert stages == {"drafting": 0.0, "verification": 50.0}
    assert set(usage.by_engine) == {"m"} and usage.by_engine["m"]["prompt_tokens"] == 600
    assert computed_part({**shard, "resumed": True}) == ({}, EngineUsage())


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_error_lines_and_tables_are_not_folded_when_not_a_terminal(monkeypatch):
    """A log (not a TTY) keeps a long path whole on one line, even with COLUMNS=80; a terminal
    keeps its width."""
    monkeypatch.setenv("COLUMNS", "80")
    path = "/work/runs/out/" + "a-directory-with-a-long-name/" * 6 + "sh ard#1[x]*?.parquet"
    buf = io.StringIO()
    c = cli.make_console(buf)
    assert c.width == cli.NON_TTY_WIDTH
    import specrag_batch.cli.console as console_module

    monkeypatch.setattr(console_module, "err_console", c)  # errors go to standard error's console
    with pytest.raises(typer.Exit):
        cli._fail(FileNotFoundError(f"{path}: no such file"), 2)
    assert f"error: {path}: no such file" in buf.getvalue().splitlines()
    assert cli.make_console(_Tty()).width == 80  # a terminal: its width (here COLUMNS)
    monkeypatch.setenv("FORCE_COLOR", "1")  # CI colouring a log: still not a terminal's width
    assert cli.make_console(io.StringIO()).width == cli.NON_TTY_WIDTH
