"""The CLI's help and its run summary: no ``<bool>`` after plain switches in ``--help`` (rich help
kept on a terminal), a failed shard's rows counted (or unknown) in the summary, and the exit
codes of the documented rule. No engine: real Parquet files through the real planning
functions, the real manifest builder and summary. ``--help`` piped from a real process:
tests/integration/test_cli_console_script.py."""

import io

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from typer.testing import CliRunner

from specrag_batch.cli import commands as cli
from specrag_batch.cli import console as console_module
from specrag_batch.engines.usage import EngineUsage
from specrag_batch.run.manifest import build_manifest, count_failed_rows
from specrag_batch.run.planning import footer_rows, read_all_ids
from specrag_batch.run.shard_job import ShardResult

from ..conftest import small_config


def test_run_help_shows_no_type_after_plain_switches():
    res = CliRunner().invoke(cli.app, ["run", "--help"], env={"COLUMNS": "160"}, terminal_width=160)
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output
    lines = {ln.split()[1]: ln for ln in res.output.splitlines() if ln.startswith("│") and len(ln.split()) > 2}
    for flag in ("--overwrite", "--json", "--allow-empty", "--help"):
        assert lines[flag].split()[2][0].isupper(), lines[flag]  # the help text follows the flag
    assert "<int>" in lines["--seed"] and "<str>" in lines["--stages"]  # options with a value keep it


def _shards(tmp_path):
    good = tmp_path / "a.parquet"
    pq.write_table(pa.table({"query_id": ["q1", "q2", "q3"], "query": ["A?", "B?", "C?"],
                             "task": ["qa"] * 3}), good)
    wrong_column = tmp_path / "b.parquet"  # a file-level problem, found when the run is planned
    pq.write_table(pa.table({"query_id": ["x1", "x2"], "question": ["A?", "B?"], "task": ["qa"] * 2}),
                   wrong_column)
    corrupt = tmp_path / "c.parquet"
    corrupt.write_bytes(b"PAR1 not parquet at all")
    return [str(good), str(wrong_column), str(corrupt)]


def test_failed_shards_count_their_rows_in_or_unknown(tmp_path):
    shards = _shards(tmp_path)
    ids = read_all_ids(shards)
    assert isinstance(ids[shards[1]], str) and isinstance(ids[shards[2]], str)  # both failed planning
    assert footer_rows(shards[1]) == 2 and footer_rows(shards[2]) is None
    results = [ShardResult(shards[0], None, "failed", error="RuntimeError: died while computing"),
               ShardResult(shards[1], None, "failed", error=ids[shards[1]]),
               ShardResult(shards[2], None, "failed", error=ids[shards[2]])]
    count_failed_rows(shards, results, ids)
    assert [(r.rows_in, r.rows_out) for r in results] == [(3, 0), (2, 0), (None, 0)]


def test_summary_shows_a_failed_shards_rows_and_unknown_as_question_mark(tmp_path, monkeypatch):
    shards = _shards(tmp_path)
    ids = read_all_ids(shards)
    results = [ShardResult(shards[0], str(tmp_path / "o" / "a.parquet"), "ok", rows_in=3, rows_out=3),
               ShardResult(shards[1], None, "failed", error=ids[shards[1]]),
               ShardResult(shards[2], None, "failed", error=ids[shards[2]])]
    count_failed_rows(shards, results, ids)
    m = build_manifest(small_config(), "r", str(tmp_path), str(tmp_path / "o"), results, [], seconds=1.0,
                       engines=EngineUsage.snapshot({}), engine_load_seconds=0.0, execution={})
    assert m["rows_in"] == 5 and m["rows_out"] == 3 and m["failed_shards"] == 2
    buf = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=buf, width=300))
    cli.print_summary({**m, "metrics": {"answered": 3, "errors": 0, "low_confidence": 0, "fast_path": 0}})
    text = buf.getvalue()
    assert "5 + ? / 3" in text
    assert "b.parquet (2 rows, none written)" in text
    assert "c.parquet (rows unknown: not readable as Parquet)" in text
    buf = io.StringIO()  # a shard name holding a newline (and an escape) stays on its one line
    monkeypatch.setattr(console_module, "console", Console(file=buf, width=300))
    odd = [{**s, "input": s["input"].replace("b.parquet", "b\n\x1b[2Jx.parquet")} if s.get("status") == "failed"
           else s for s in m["shards"]]
    cli.print_summary({**m, "shards": odd, "metrics": {"answered": 3, "errors": 0, "low_confidence": 0, "fast_path": 0}})
    line = next(l for l in buf.getvalue().splitlines() if "2 rows, none written" in l)
    assert "shard failed" in line and "b\\n\\x1b[2Jx.parquet" in line, line



def test_a_nightly_summary_says_what_drifted_or_why_nothing_was_compared(tmp_path, monkeypatch):
    shards = _shards(tmp_path)
    results = [ShardResult(shards[0], str(tmp_path / "o" / "a.parquet"), "ok", rows_in=3, rows_out=3)]
    m = build_manifest(small_config(), "r", str(tmp_path), str(tmp_path / "o"), results, [], seconds=1.0,
                       engines=EngineUsage.snapshot({}), engine_load_seconds=0.0, execution={})
    m["metrics"] = {"answered": 3, "errors": 0, "low_confidence": 0, "fast_path": 0}
    uri = "/o/date=2026-12-02/_report/drift.json"
    for drift, want in [({"status": "compared", "moved": ["answers:claim", "low_confidence_rate"],
                          "baseline": ["2026-11-30", "2026-12-01"], "uri": uri},
                         f"drift: answers:claim, low_confidence_rate (baseline: 2 nights): {uri}"),
                        ({"status": "compared", "moved": [], "baseline": ["2026-12-01"], "uri": uri},
                         f"drift: nothing moved (baseline: 1 night): {uri}"),
                        ({"status": "no_baseline", "moved": [], "baseline": [], "uri": uri}, f"drift: no baseline: {uri}")]:
        buf = io.StringIO()
        monkeypatch.setattr(console_module, "console", Console(file=buf, width=300))
        cli.print_summary({**m, "drift": drift})
        assert want in buf.getvalue()
    buf = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=buf, width=300))
    cli.print_summary(m)
    assert "drift:" not in buf.getvalue()  # a run without the nightly comparison

def _manifest(tmp_path, failed: int) -> dict:
    shards = _shards(tmp_path)[: 1 + failed]
    results = [ShardResult(shards[0], str(tmp_path / "o" / "a.parquet"), "ok", rows_in=3, rows_out=3)]
    results += [ShardResult(s, None, "failed", rows_in=2, error="InputSchemaError: bad") for s in shards[1:]]
    return build_manifest(small_config(), "r", str(tmp_path), str(tmp_path / "o"), results, [], seconds=1.0,
                          engines=EngineUsage.snapshot({}), engine_load_seconds=0.0, execution={})


def test_run_exit_codes_follow_the_documented_rule(tmp_path, monkeypatch):
    """docs/operations.md "Exit codes" and `run --help`: 0 every shard ok; 1 the run finished (manifest
    written) with a failed shard, e.g. a bad input file; 2 refused before any shard ran. The
    flow is replaced by what it returns or raises (the real flow: tests/flows/test_s3_runs.py,
    `test_cli_index_on_s3_exit_codes_overwrite_and_claims`)."""
    from specrag_batch.run import orchestration
    from specrag_batch.run.resume import RunConflictError
    from specrag_batch.run.planning import InputLayoutError

    def invoke(outcome):
        def run_batch(*a, **k):
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        monkeypatch.setattr(orchestration, "run_batch", run_batch)
        return CliRunner().invoke(cli.app, ["run", "-i", str(tmp_path), "-o", str(tmp_path / "o")])
    res = invoke(_manifest(tmp_path, failed=0))
    assert res.exit_code == 0, res.output
    res = invoke(_manifest(tmp_path, failed=1))  # a shard whose file lacks a column
    text = " ".join(res.output.split())  # the console wraps long lines
    assert res.exit_code == 1 and "shard failed" in text and "b.parquet (2 rows, none written)" in text
    for refused in (RunConflictError("output holds another config"), InputLayoutError("overlap"),
                    FileNotFoundError("no such input")):
        res = invoke(refused)
        assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(cli.app, ["run", "-i", "x", "-o", "y", "--drafts", "many"])
    assert res.exit_code == 2  # a bad flag value


def test_help_settings_on_a_terminal_keep_typer_rich_help(monkeypatch):
    import typer.core

    class Tty(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(typer.core, "HAS_RICH", True)
    assert cli.help_settings(Tty()) == {} and typer.core.HAS_RICH is True
    assert cli.help_settings(io.StringIO()) == {"terminal_width": cli.NON_TTY_WIDTH,
                                                "max_content_width": cli.NON_TTY_WIDTH}
    assert typer.core.HAS_RICH is False  # monkeypatch restores it for the other tests
