"""Inputs and arguments refused, or read, before a run's flow starts: integer passage ids read as
strings, duplicate column names and ``index build`` on a bad corpus named (exit 2, one line),
``--tau-min`` help, overlapping input and output, a missing input, bad claim labels, a file no
run wrote, a KV cache size vLLM cannot read, and an output that is a file. The CLI in-process;
no engine."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli.commands import app
from specrag_batch.core.schema import InputSchemaError, validate_table


def test_integer_doc_ids_are_read_as_strings():
    docs = pa.array([[{"doc_id": 7, "title": "t", "text": "x"}, {"doc_id": None, "title": "", "text": "y"}]],
                    pa.list_(pa.struct([("doc_id", pa.int64()), ("title", pa.string()), ("text", pa.string())])))
    row = validate_table(pa.table({"query_id": ["q"], "query": ["Q?"], "task": ["qa"], "documents": docs}), "f")[0]
    assert row.error is None and [d.doc_id for d in row.documents] == ["7", "1"]


def test_index_build_bad_corpus_exits_2_with_one_line(tmp_path):
    result = CliRunner().invoke(app, ["index", "build", "--corpus", str(tmp_path / "none.parquet"),
                                      "-o", str(tmp_path / "idx")])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    # named as the corpus, without the OS's "[Errno 2]"
    assert f"corpus '{tmp_path / 'none.parquet'}' does not exist" in " ".join(result.output.split())
    assert "Errno" not in result.output


def test_tau_min_flag_help_says_it_takes_one_number():
    from specrag_batch.cli.options import config_parameters

    help_text = next(p.default.help for p in config_parameters() if p.name == "cfg__selection__tau_min")
    assert "one number" in help_text and "config-file only" in help_text


def test_duplicate_column_names_name_the_file_and_column(tmp_path):
    from specrag_batch.run.planning import read_ids

    path = tmp_path / "dup.parquet"
    pq.write_table(pa.table([["q1"], ["A?"], ["B?"], ["qa"]], names=["query_id", "query", "query", "task"]),
                   path)
    with pytest.raises(InputSchemaError) as e:
        read_ids(str(path))
    assert "dup.parquet" in str(e.value) and "column 'query'" in str(e.value)
    assert "appears 2 times" in str(e.value) and "FieldRef" not in str(e.value)


@pytest.mark.parametrize("output", ["in", "in/sub"])
def test_overlapping_input_output_refused_before_the_flow_starts(tmp_path, monkeypatch, output):
    """Before, the overlap was found inside the flow: a Prefect server start, failed task and
    flow runs and a traceback came before the one clear line."""
    from specrag_batch.run import orchestration
    from specrag_batch.run.planning import InputLayoutError

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["Q?"], "task": ["qa"]}), tmp_path / "in" / "a.parquet")
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    with pytest.raises(InputLayoutError, match="overlap"):
        orchestration.run_batch(str(tmp_path / "in"), str(tmp_path / output))


def test_missing_input_refused_before_the_flow_starts(tmp_path, monkeypatch):
    from specrag_batch.run import orchestration

    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        orchestration.run_batch(str(tmp_path / "nonexist"), str(tmp_path / "out"))


def test_claims_bad_labels_refused_before_the_flow_starts(tmp_path, monkeypatch):
    from specrag_batch.run import claim_verification

    monkeypatch.setattr(claim_verification, "claim_verification_flow",
                        lambda *a, **k: pytest.fail("the flow started"))
    result = CliRunner().invoke(app, ["claims", "-i", str(tmp_path), "-o", str(tmp_path / "o"), "--labels", "A"])
    assert result.exit_code == 2 and "--labels" in result.output, result.output


def test_a_file_no_run_wrote_is_not_replaced(tmp_path, monkeypatch):
    """An output prefix without a run key that already holds ``a.parquet`` (another tool's table),
    where the run would write its shard, is refused before the flow starts and the file is kept;
    a file no shard would write (``notes.txt``) refuses nothing, and once the prefix is a run's
    (``_run.json``) the run key decides."""
    from specrag_batch.run import orchestration, resume
    from specrag_batch.run.planning import InputLayoutError

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["Q?"], "task": ["qa"]}), tmp_path / "in" / "a.parquet")
    out = tmp_path / "out [1]"
    out.mkdir()
    pq.write_table(pa.table({"precious": [1, 2, 3]}), out / "a.parquet")
    before = (out / "a.parquet").read_bytes()
    (out / "notes.txt").write_text("kept")
    started = []
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: started.append(a))
    with pytest.raises(InputLayoutError, match=r"already holds .*a\.parquet.*no run of this pipeline wrote"):
        orchestration.run_batch(str(tmp_path / "in"), str(out))
    assert not started and (out / "a.parquet").read_bytes() == before and not (out / resume.RUN_FILE).exists()

    (out / "a.parquet").rename(tmp_path / "moved.parquet")  # what the message asks: notes.txt alone refuses nothing
    orchestration.run_batch(str(tmp_path / "in"), str(out))
    assert len(started) == 1

    # a shard with its done marker and no key (the decision benchmark restores archived shards so)
    (out / "a.parquet").write_bytes(before)
    resume.mark_done(str(out), str(out / "a.parquet"), "h", {}, "r", {"status": "ok"})
    orchestration.run_batch(str(tmp_path / "in"), str(out))
    assert len(started) == 2
    for marker in (out / "_shards").iterdir():
        marker.unlink()

    (out / "a.parquet").write_bytes(before)  # a run's prefix (its key written): the run key check decides
    (out / resume.RUN_FILE).write_text("{}")
    with pytest.raises(resume.RunConflictError):
        orchestration.run_batch(str(tmp_path / "in"), str(out))


@pytest.mark.parametrize("value", ["0.5", "2GiB", "", "\u00b2"])  # "²": str.isdigit() but int("²") fails in vLLM
def test_a_kv_cache_size_vllm_cannot_read_is_one_line_before_the_flow(tmp_path, monkeypatch, value):
    """``VLLM_CPU_KVCACHE_SPACE=0.5`` is one line before the flow starts, not a pydantic/vLLM
    traceback from the engine's start; a whole number still runs."""
    from specrag_batch.run import orchestration

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["Q?"], "task": ["qa"]}), tmp_path / "in" / "a.parquet")
    started = []
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: started.append(a))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", value)
    result = CliRunner().invoke(app, ["run", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and not started, result.output
    assert f"VLLM_CPU_KVCACHE_SPACE={value!r}" in result.output and "whole number of GiB" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # the flow starts (the stand-in returns no manifest)
    CliRunner().invoke(app, ["run", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out")])
    assert len(started) == 1


def test_an_output_that_is_a_file_is_one_line(tmp_path):
    """``-o <an existing file>`` is refused naming it as a file (exit 2, no traceback) and the
    file is kept."""
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["Q?"], "task": ["qa"]}), tmp_path / "in" / "a.parquet")
    (tmp_path / "outfile").write_text("file")
    result = CliRunner().invoke(app, ["run", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "outfile")])
    assert result.exit_code == 2, result.output
    assert "is a file; give a directory or prefix" in result.output and "Traceback" not in result.output
    assert (tmp_path / "outfile").read_text() == "file"


@pytest.mark.parametrize("labels, line", [
    ("A", "error: --labels: claim_labels needs at least two distinct labels"),
    ("", "error: --labels: empty; give comma-separated labels"),
    ("A,,B", "error: --labels: claim_labels must not contain empty labels"),
    ("SUPPORTS,supports", "error: --labels: 'SUPPORTS' and 'supports' are one label (labels are compared ignoring case, "
                          "spaces, underscores and hyphens)"),
    # issue 47 item 9: both were accepted as two labels, and a drafter's answer matched either
    ("SUPPORTS,NOT ENOUGH INFO,NOT_ENOUGH_INFO", "error: --labels: 'NOT ENOUGH INFO' and 'NOT_ENOUGH_INFO' are one label"),
    ("A,not-enough-info,Not Enough_Info", "error: --labels: 'not-enough-info' and 'Not Enough_Info' are one label"),
    ("A," + "x" * 100_000, "error: --labels: a label of 100000 characters"),
    ("A,B\nC", "error: --labels: the label 'B\\nC' holds a control character"),
])
def test_claims_labels_that_cannot_work_get_one_line(tmp_path, monkeypatch, labels, line):
    """Labels that cannot work (one label, none, an empty one, two differing only in case, a
    100,000-character one, one holding a newline) are each one line naming ``--labels``, exit 2,
    before the flow starts."""
    from specrag_batch.run import claim_verification

    monkeypatch.setattr(claim_verification, "claim_verification_flow",
                        lambda *a, **k: pytest.fail("the flow started"))
    result = CliRunner().invoke(app, ["claims", "-i", str(tmp_path), "-o", str(tmp_path / "o"), "--labels", labels])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(line), result.output


def test_nightly_lag_days_beyond_any_date_is_a_usage_error(tmp_path):
    """--lag-days 999999999 is a usage error naming the flag (exit 2), not an OverflowError traceback."""
    result = CliRunner().invoke(app, ["nightly", "--input-root", str(tmp_path), "--output-root", str(tmp_path / "o"),
                                      "--lag-days", "999999999"])
    assert result.exit_code == 2 and "--lag-days" in result.output and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("out", ["q/date=2026-12-01/out", "q"])
def test_nightly_output_inside_its_input_partition_is_one_line_before_the_flow(tmp_path, monkeypatch, out):
    """Issue 47 item 9: the flow refused it, after Prefect printed the failed flow run's
    traceback; now the one line, exit 2, before the flow starts."""
    from specrag_batch.run.scheduled import nightly

    monkeypatch.setattr(nightly, "nightly_flow", lambda *a, **k: pytest.fail("the flow started"))
    part = tmp_path / "q" / "date=2026-12-01"
    part.mkdir(parents=True)
    pq.write_table(pa.table({"query_id": ["q"], "query": ["Q?"], "task": ["qa"]}), part / "a.parquet")
    result = CliRunner().invoke(app, ["nightly", "--input-root", str(tmp_path / "q"), "--output-root",
                                      str(tmp_path / out), "--date", "2026-12-01"])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith("error: output ") and f"and input '{part}' overlap" in result.output


def test_the_backfill_table_gives_the_reason_of_a_missing_date(tmp_path, monkeypatch):
    """Issue 47 item 9: a missing date's row said "missing" and nothing of why (the summary JSON
    had it): the table's reason column carries each date's error."""
    from specrag_batch.run.scheduled import backfill
    from specrag_batch.run.scheduled.nightly import MissingPartitionError, check_partition

    (tmp_path / "q").mkdir()
    try:  # the flow's own reason for a date without partition (backfill._run_date)
        check_partition(str(tmp_path / "q"), "2026-12-02")
    except MissingPartitionError as e:
        why = str(e)
    summary = {"dates": [{"date": "2026-12-02", "status": "missing", "error": why}], "later_nights": []}
    monkeypatch.setattr(backfill, "backfill_flow", lambda *a, **k: summary)
    result = CliRunner().invoke(app, ["backfill", "--input-root", str(tmp_path / "q"), "--output-root",
                                      str(tmp_path / "o"), "--start", "2026-12-02", "--end", "2026-12-02",
                                      "--allow-missing"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "reason" in result.output and "does not exist" in result.output, result.output


def test_backfill_over_a_missing_input_root_is_one_line_before_the_flow(tmp_path, monkeypatch):
    """A missing input root is one line naming '--input-root' (as nightly does, not the Python
    parameter 'input_root'), before the flow starts and with no flow-run traceback."""
    from specrag_batch.run.scheduled import backfill

    monkeypatch.setattr(backfill, "backfill_flow", lambda *a, **k: pytest.fail("the flow started"))
    result = CliRunner().invoke(app, ["backfill", "--input-root", str(tmp_path / "nope"), "--output-root",
                                      str(tmp_path / "o"), "--start", "2026-12-01", "--end", "2026-12-02"])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"error: parameter '--input-root': '{tmp_path / 'nope'}' does not exist")


@pytest.mark.parametrize("out", ["q/date=2026-12-02/out", "q"])
def test_backfill_output_inside_an_input_partition_is_one_line_before_the_flow(tmp_path, monkeypatch, out):
    """An output partition inside its input partition (or the reverse) on any date of the range
    is refused as nightly refuses it: one line, exit 2, before the flow starts."""
    from specrag_batch.run.scheduled import backfill

    monkeypatch.setattr(backfill, "backfill_flow", lambda *a, **k: pytest.fail("the flow started"))
    (tmp_path / "q").mkdir()
    result = CliRunner().invoke(app, ["backfill", "--input-root", str(tmp_path / "q"), "--output-root",
                                      str(tmp_path / out), "--start", "2026-12-01", "--end", "2026-12-02"])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith("error: output ") and "overlap" in result.output, result.output
