"""Inputs a fresh-clone trial found refused or unclear: integer passage ids, duplicate column
names, and `index build` on a bad corpus (exit 2, one line)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli import app
from specrag_batch.schema import InputSchemaError, validate_table


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
    # named as the corpus, without the OS's "[Errno 2]" (trial finding, 2026-12-03)
    assert f"corpus '{tmp_path / 'none.parquet'}' does not exist" in " ".join(result.output.split())
    assert "Errno" not in result.output


def test_tau_min_flag_help_says_it_takes_one_number():
    from specrag_batch.cli_options import config_parameters

    help_text = next(p.default.help for p in config_parameters() if p.name == "cfg__selection__tau_min")
    assert "one number" in help_text and "config-file only" in help_text


def test_duplicate_column_names_name_the_file_and_column(tmp_path):
    from specrag_batch.planning import read_ids

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
    from specrag_batch import orchestration
    from specrag_batch.planning import InputLayoutError

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["Q?"], "task": ["qa"]}), tmp_path / "in" / "a.parquet")
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    with pytest.raises(InputLayoutError, match="overlap"):
        orchestration.run_batch(str(tmp_path / "in"), str(tmp_path / output))


def test_missing_input_refused_before_the_flow_starts(tmp_path, monkeypatch):
    from specrag_batch import orchestration

    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        orchestration.run_batch(str(tmp_path / "nonexist"), str(tmp_path / "out"))


def test_claims_bad_labels_refused_before_the_flow_starts(tmp_path, monkeypatch):
    from specrag_batch.scheduled import claim_verification

    monkeypatch.setattr(claim_verification, "claim_verification_flow",
                        lambda *a, **k: pytest.fail("the flow started"))
    result = CliRunner().invoke(app, ["claims", "-i", str(tmp_path), "-o", str(tmp_path / "o"), "--labels", "A"])
    assert result.exit_code == 2 and "--labels" in result.output, result.output


def test_a_file_no_run_wrote_is_not_replaced(tmp_path, monkeypatch):
    """Trial finding (2026-12-03): an output prefix without a run key that already held
    ``a.parquet`` (another tool's table) had it replaced by the run's shard, exit 0, no warning.
    Now the run is refused before the flow starts and the file is kept; a file no shard would
    write (``notes.txt``) refuses nothing, and once the prefix is a run's (``_run.json``) the
    run key decides."""
    from specrag_batch import orchestration, resume
    from specrag_batch.planning import InputLayoutError

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
    """Trial finding (2026-12-03): ``VLLM_CPU_KVCACHE_SPACE=0.5`` failed inside the engine's
    start, about 50 lines of pydantic/vLLM traceback; a whole number still runs."""
    from specrag_batch import orchestration

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


def test_a_run_prints_prefects_info_records_only_to_its_api_not_the_console():
    """Trial finding (2026-12-03): a successful ``specrag-batch run`` printed 10 ``INFO:prefect``
    lines on stderr (temporary server, flow and task states), against docs/operations.md, "Quiet logs".
    Prefect's own logging config sets its loggers to INFO (for the flow-run logs its API keeps)
    and they propagate to the console handler ``cli.main`` installs: that handler now filters at
    ``SPECRAG_LOG_LEVEL``, while the logger still hands INFO records to its own handlers."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "from specrag_batch import cli\n"
        "got = []\n"
        "class Api(logging.Handler):\n"
        "    def emit(self, record): got.append(record.getMessage())\n"
        "def app(**kw):\n"
        "    log = logging.getLogger('prefect.flow_runs')\n"
        "    logging.getLogger('prefect').setLevel('INFO')  # as Prefect's logging config sets it\n"
        "    log.addHandler(Api())\n"
        "    log.info('INFO-LINE'); log.warning('WARN-LINE')\n"
        "    print('API:' + ','.join(got))\n"
        "cli.app = app\n"
        "cli.main()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "WARN-LINE" in r.stderr and "INFO-LINE" not in r.stderr
    assert "API:INFO-LINE,WARN-LINE" in r.stdout


def test_foreign_output_check_on_s3_with_odd_keys(s3_bucket):
    """The same check against a real S3 server (moto, as s3fs's tests), one non-recursive
    listing of the output prefix: keys with spaces, ``[1]``, ``*``, ``?``, ``#`` and ``%20`` are
    names, never patterns; a key in a deeper "folder" is no shard output; a marker makes a key
    the pipeline's."""
    from specrag_batch import resume, storage
    from specrag_batch.planning import InputLayoutError, check_foreign_outputs

    inp, out = f"{s3_bucket}/in put [1]", f"{s3_bucket}/out #%20 [x]"
    shards = [f"{inp}/a*b? [1].parquet", f"{inp}/sub/c%20.parquet"]
    check_foreign_outputs(inp, out, shards)  # nothing there yet
    storage.write_bytes_atomic(f"{out}/deeper/sub__c%20.parquet", b"not a shard output")
    storage.write_bytes_atomic(f"{out}/a*b [1].parquet", b"a glob would match a*b? [1]")
    check_foreign_outputs(inp, out, shards)
    storage.write_bytes_atomic(f"{out}/sub__c%20.parquet", b"another tool's")
    with pytest.raises(InputLayoutError, match=r"already holds 's3://.*/sub__c%20\.parquet'"):
        check_foreign_outputs(inp, out, shards)
    resume.mark_done(out, f"{out}/sub__c%20.parquet", "h", {}, "r", {"status": "ok"})
    check_foreign_outputs(inp, out, shards)


def test_an_output_that_is_a_file_is_one_line(tmp_path):
    """Second trial (2026-12-03): ``-o <an existing file>`` raised NotADirectoryError from reading
    ``<file>/_run.json``, a traceback and exit 1."""
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["Q?"], "task": ["qa"]}), tmp_path / "in" / "a.parquet")
    (tmp_path / "outfile").write_text("file")
    result = CliRunner().invoke(app, ["run", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "outfile")])
    assert result.exit_code == 2, result.output
    assert "is a file; give a directory or prefix" in result.output and "Traceback" not in result.output
    assert (tmp_path / "outfile").read_text() == "file"
