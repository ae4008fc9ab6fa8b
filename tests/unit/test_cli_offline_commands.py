"""The commands that need no engine (``report``, ``calibrate``, ``index build``, ``drafter
inputs``) on hostile input, as a user would type them: a clear one-line error (exit 2, no
traceback) naming the file, row or field, and paths printed as they are. Real Parquet, the
CLI in-process (typer's runner); no model loads (every case fails before the embedder)."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli import commands as cli
from specrag_batch.cli.commands import app
from specrag_batch.core.schema import OUTPUT_SCHEMA


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """No line wrapping in the captured output, so a path is found whole."""
    monkeypatch.setattr(cli.console, "width", 2000)
    monkeypatch.setattr(cli.err_console, "width", 2000)


def _invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _run(out, rows: list[dict]) -> str:
    """A finished run under ``out``: one output shard listed ``ok`` in the manifest."""
    out.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA), out / "a.parquet")
    (out / "_manifest.json").write_text(json.dumps({"shards": [{"status": "ok", "output": str(out / "a.parquet")}]}))
    return str(out)


def _rows(n: int = 6, **kw) -> list[dict]:
    return [{"query_id": f"q{i}", "task": "qa", "answer": "x", "score": -1.0 - i, "score_draft": -1.0 - i,
             "low_confidence": False, "fast_path": False, "drafts": [], "flags": [], "mode": "speculative",
             "correct": i % 2 == 0, **kw} for i in range(n)]


def test_paths_holding_rich_markup_are_printed_as_they_are(tmp_path):
    """``[ack]`` is not a style to drop and ``[/x]`` not a closing tag to fail on: the report's
    path and the missing prefix's error name the directory exactly."""
    prefix = _run(tmp_path / "run [ack] [/x]", _rows())
    result = _invoke("report", prefix)
    assert result.exit_code == 0 and f"{prefix}/_report/report.md" in result.output
    missing = str(tmp_path / "gone [/red]")
    result = _invoke("report", missing)
    assert result.exit_code == 2 and missing in result.output


@pytest.mark.parametrize("where", ["report_dir_is_a_file", "out_is_a_directory", "out_in_a_missing_directory"])
def test_unwritable_outputs_exit_2_naming_the_path(tmp_path, where):
    prefix = _run(tmp_path / "run", _rows())
    if where == "report_dir_is_a_file":
        (tmp_path / "run" / "_report").write_text("in the way")
        result, path = _invoke("report", prefix), tmp_path / "run" / "_report"
    else:
        path = tmp_path if where == "out_is_a_directory" else tmp_path / "no" / "tau.yaml"
        result = _invoke("calibrate", prefix, "--target-accuracy", "0.5", "--bootstrap", "5", "--out", str(path))
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and str(path) in result.output


def test_graded_rows_without_a_task_are_named_not_a_crash(tmp_path):
    """Rows from another writer with a null task: report and calibrate name the row (a τ_min is
    chosen per task, so a row of no task cannot be placed)."""
    prefix = _run(tmp_path / "run", _rows(2) + [{**_rows(3)[2], "task": None}])
    for args in (("report", prefix), ("calibrate", prefix, "--target-accuracy", "0.5", "--out", str(tmp_path / "t.yaml"))):
        result = _invoke(*args)
        assert result.exit_code == 2, result.output
        assert "q2" in result.output and "'task'" in result.output


@pytest.mark.parametrize("confidence", ["score", "calibrated"])
def test_calibrate_on_a_run_without_gold_names_the_run(tmp_path, confidence):
    prefix = _run(tmp_path / "run", _rows(correct=None))
    result = _invoke("calibrate", prefix, "--target-accuracy", "0.5", "--confidence", confidence,
                     "--out", str(tmp_path / "t.yaml"))
    assert result.exit_code == 2, result.output
    assert f"the run {prefix} has no answered rows with a gold answer" in result.output, result.output


def test_calibrate_refuses_a_task_no_config_can_name(tmp_path):
    """A ``task`` no config can name (another writer's int column, read as '1') is one line
    naming the row and the value, and no ``tau_min: {'1': ...}`` snippet the config loader
    would refuse; ``report`` still summarises such rows."""
    prefix = _run(tmp_path / "run", _rows(40, task="1"))
    out = tmp_path / "t.yaml"
    result = _invoke("calibrate", prefix, "--target-accuracy", "0.5", "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "row (query_id='q0'): field 'task' ('1'): not qa, claim or choice" in result.output, result.output
    assert not out.exists()
    assert _invoke("report", prefix).exit_code == 0
    from specrag_batch.confidence.fit import CalibrationInputError, fit
    from specrag_batch.run.report import load_rows

    with pytest.raises(CalibrationInputError, match="field 'task' \\('1'\\): not qa, claim or choice"):
        fit(load_rows(prefix).rows, "cafe")  # --confidence calibrated: a model per task


def test_summary_json_is_strict_json_when_a_value_is_nan(tmp_path):
    """A NaN F1 (another writer's) is no number: summary.json stays JSON that strict parsers
    (JavaScript, jq) read, with null in its place."""
    prefix = _run(tmp_path / "run", _rows(f1=math.nan))
    assert _invoke("report", prefix).exit_code == 0

    def refuse(constant):
        raise ValueError(constant)

    s = json.loads((tmp_path / "run" / "_report" / "summary.json").read_text(), parse_constant=refuse)
    assert s["by_task"]["qa"]["f1"] is None


_BAD_UTF8 = pa.array([b"fine", b"caf\xe9"], pa.binary()).view(pa.string())


@pytest.mark.parametrize("table, expected", [
    (pa.table({"doc_id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), "no rows"),
    (pa.table({"doc_id": ["a", None], "text": ["x", "y"]}), "column 'doc_id': row 1: null"),
    (pa.table({"doc_id": ["a", "b", "a"], "text": ["x", "y", "z"]}), "duplicate doc_id 'a' (rows 0 and 2)"),
    (pa.table({"doc_id": ["a", "b"], "text": [1, 2]}), "column 'text': got int64"),
    (pa.table({"doc_id": ["a"], "text": [["x", "y"]]}), "column 'text': got list<"),
    (pa.table({"doc_id": [1.0, 2.5], "text": ["x", "y"]}), "column 'doc_id': got double"),
    (pa.table({"doc_id": ["a"], "title": [3], "text": ["x"]}), "column 'title': got int64"),
    (pa.table({"doc_id": ["a", "b"], "text": _BAD_UTF8}), "column 'text': row 1: not valid UTF-8"),
    (b"doc_id,text\na,b\n", "not a Parquet file"),
    (pa.table([["a"], ["x"], ["y"]], names=["doc_id", "text", "text"]), "column 'text': appears 2 times"),
], ids=["empty", "null_doc_id", "duplicate_doc_id", "int_text", "list_text", "float_doc_id", "int_title",
        "non_utf8_text", "csv", "duplicate_column"])
def test_index_build_refuses_a_bad_corpus_naming_file_row_and_field(tmp_path, table, expected):
    corpus = tmp_path / "corpus.parquet"
    if isinstance(table, bytes):
        corpus.write_bytes(table)
    else:
        pq.write_table(table, corpus)
    result = _invoke("index", "build", "--corpus", str(corpus), "-o", str(tmp_path / "index"))
    assert result.exit_code == 2, result.output
    assert f"{corpus}" in result.output and expected in result.output, result.output
    assert not (tmp_path / "index").exists()


def test_index_build_on_a_directory_without_shards_says_so(tmp_path):
    """A directory is a corpus of .parquet shards (docs/retrieval.md); one without any is refused."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "p0.csv").write_text("doc_id,text\na,x\n")
    result = _invoke("index", "build", "--corpus", str(tmp_path / "corpus"), "-o", str(tmp_path / "index"))
    assert result.exit_code == 2 and "no .parquet file under this prefix" in result.output, result.output


@pytest.mark.parametrize("case", ["negative_limit", "missing_data", "output_is_a_file"])
def test_drafter_inputs_usage_errors_exit_2(tmp_path, case):
    """``--limit -1`` would slice off the last row, a wrong ``--shared`` or an ``--output``
    that is a file ended in a traceback."""
    args = {"shared": str(tmp_path / "none"), "output": str(tmp_path / "out"), "limit": "1"}
    if case == "negative_limit":
        args["limit"] = "-1"
    elif case == "output_is_a_file":
        (tmp_path / "out").write_text("x")
    result = _invoke("drafter", "inputs", "--shared", args["shared"], "-o", args["output"],
                     "--datasets", "musique", "--limit", args["limit"])
    assert result.exit_code == 2, result.output
    assert {"negative_limit": "--limit", "missing_data": str(tmp_path / "none"),
            "output_is_a_file": str(tmp_path / "out")}[case] in result.output


@pytest.mark.parametrize("prefix", ["gs://bucket/run", "s3://bucket/run"], ids=["no_gcsfs", "no_s3_credentials"])
def test_unusable_storage_exits_2_with_the_reason(monkeypatch, prefix):
    """A scheme whose file system is not installed, an S3 prefix without credentials: one
    line, exit 2 (both were tracebacks). No network: metadata lookup off, endpoint a closed
    local port."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("SPECRAG_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    for command in (["report", prefix], ["calibrate", prefix, "--target-coverage", "0.5"]):
        result = _invoke(*command)
        assert result.exit_code == 2, result.output
        assert ("gcsfs" if prefix.startswith("gs") else "credentials") in result.output
        assert prefix in result.output  # which location could not be read


def test_calibrate_snippet_does_not_carry_a_url_password(tmp_path):
    """The snippet is merged into run configs (often committed): a password in the prefix URL
    is redacted there as in the report (fsspec's in-process memory file system stands in for
    a remote store)."""
    import fsspec

    fs, root = fsspec.filesystem("memory"), "u:hunter2@host/run"
    buf = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(_rows(), schema=OUTPUT_SCHEMA), buf)
    fs.pipe_file(f"{root}/a.parquet", buf.getvalue().to_pybytes())
    fs.pipe_file(f"{root}/_manifest.json", json.dumps({"shards": [{"status": "ok", "output": "a.parquet"}]}).encode())
    try:
        result = _invoke("calibrate", f"memory://{root}", "--target-accuracy", "0.5", "--bootstrap", "5",
                         "--out", str(tmp_path / "tau.yaml"))
    finally:
        fs.rm(root, recursive=True)
    assert result.exit_code == 0, result.output
    snippet = (tmp_path / "tau.yaml").read_text()
    assert "memory://u:<redacted" in snippet and "hunter2" not in snippet


def test_index_build_refuses_an_output_that_is_a_file_before_embedding(tmp_path, monkeypatch):
    """An ``--output`` that is a file is refused up front, not after the corpus is embedded
    (hours for a large corpus)."""
    from specrag_batch.index import embed_shards as shards

    def embed(*args, **kwargs):
        raise AssertionError("the corpus was embedded before the output was checked")

    monkeypatch.setattr(shards, "embed", embed)
    pq.write_table(pa.table({"doc_id": ["a"], "text": ["x"]}), tmp_path / "corpus.parquet")
    (tmp_path / "index").write_text("a file")
    result = _invoke("index", "build", "--corpus", str(tmp_path / "corpus.parquet"), "-o", str(tmp_path / "index"))
    assert result.exit_code == 2 and f"{tmp_path / 'index'}: a file" in result.output, result.output


def test_a_path_with_a_newline_stays_on_its_error_line(tmp_path):
    """``report 'out<newline>'``: the path is escaped where the message repeats it, and the
    message is one line."""
    missing = str(tmp_path / "gone\n")
    for args in (("report", missing), ("calibrate", missing, "--target-accuracy", "0.5",
                                        "--out", str(tmp_path / "t.yaml"))):
        result = _invoke(*args)
        assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
        assert str(tmp_path / "gone") + "\\n" in result.output, result.output
