"""``report`` and ``calibrate`` on trusted shards (listed ``ok`` in the manifest or named by a
done marker) that are not what the product writes: not Parquet, another schema, a column
missing or typed by another writer (pandas' all-None ``null`` columns, ``large_string``,
``int64``), a directory, gone; and a manifest or marker that is not a JSON object. Each is
either read with its columns conformed to the output schema or refused with exit 2 naming
the shard (and column) or file; none is dropped without a word. Real Parquet, the CLI
in-process, no engine."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.confidence.calibration import calibrate, config_snippet
from specrag_batch.config import load_config
from specrag_batch.run.report import load_rows
from specrag_batch.core.schema import OUTPUT_SCHEMA

from .test_cli_offline_commands import _invoke, _rows, _run, wide_console  # noqa: F401 (autouse fixture)


def _add_shard(prefix: str, name: str, write=None) -> str:
    """List ``<prefix>/<name>`` ``ok`` in the manifest beside ``a.parquet``; ``write(path)``
    puts something there (nothing: the listed object is gone)."""
    from pathlib import Path

    path = Path(prefix) / name
    if write is not None:
        write(path)
    m = json.loads((Path(prefix) / "_manifest.json").read_text())
    m["shards"].append({"status": "ok", "output": str(path)})
    (Path(prefix) / "_manifest.json").write_text(json.dumps(m))
    return str(path)


def _report(prefix: str):
    return _invoke("report", prefix)


def test_a_listed_shard_that_is_not_parquet_is_named(tmp_path):
    prefix = _run(tmp_path / "run", _rows())
    bad = _add_shard(prefix, "b.parquet", lambda p: p.write_text("query_id,answer\nq9,x\n"))
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert bad in result.output and "Parquet" in result.output


def test_a_listed_shard_of_another_schema_is_refused_not_dropped(tmp_path):
    """Only a column ``foo``: before, its rows vanished ("6 rows from 2 shards")."""
    prefix = _run(tmp_path / "run", _rows())
    bad = _add_shard(prefix, "b.parquet", lambda p: pq.write_table(pa.table({"foo": [1, 2, 3]}), p))
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert bad in result.output and "column 'query_id'" in result.output


def test_a_column_of_a_type_the_output_schema_cannot_take_is_named(tmp_path):
    prefix = _run(tmp_path / "run", _rows())
    t = pa.Table.from_pylist(_rows(2), schema=OUTPUT_SCHEMA)
    t = t.set_column(t.schema.get_field_index("score"), "score", pa.array(["high", "low"]))
    bad = _add_shard(prefix, "b.parquet", lambda p: pq.write_table(t, p))
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert bad in result.output and "column 'score'" in result.output and "float64" in result.output.lower()


def test_other_writers_types_are_read_as_the_output_schema(tmp_path):
    """large_string, dictionary, int64 counts, float32 scores and all-None (``null``)
    columns in the only shard: read and counted, scores and mean_logprob kept."""
    t = pa.Table.from_pylist(_rows(4, draft_rounds=1), schema=OUTPUT_SCHEMA)
    cols = {}
    for f in t.schema:
        c = t[f.name]
        if f.name in ("query_id", "answer"):
            c = c.cast(pa.large_string())
        elif f.name == "task":
            c = c.dictionary_encode()
        elif f.name == "draft_rounds":
            c = c.cast(pa.int64())
        elif f.name == "score":
            c = c.cast(pa.float32())
        elif c.null_count == len(c) or f.name in ("drafts", "flags"):
            c = pa.nulls(len(c))  # what pandas writes for a column of None
        cols[f.name] = c
    prefix = str(tmp_path / "run")
    _run(tmp_path / "run", _rows(1))
    pq.write_table(pa.table(cols), tmp_path / "run" / "a.parquet")
    data = load_rows(prefix)
    assert data.rows.height == 4 and data.rows["score"].to_list() == [-1.0, -2.0, -3.0, -4.0]
    assert data.rows["task"].to_list() == ["qa"] * 4 and data.rows["draft_rounds"].to_list() == [1] * 4
    result = _report(prefix)
    assert result.exit_code == 0, result.output
    assert "4 rows from 1 shards" in result.output


@pytest.mark.parametrize("column", ["correct", "drafts", "flags", "score", "mode"])
def test_a_missing_optional_column_reads_as_null_and_the_report_says_so(tmp_path, column):
    """The only shard lacks a report column that a row can do without (before:
    ColumnNotFoundError traceback): read as null, and report.md names shard and column."""
    prefix = _run(tmp_path / "run", _rows())
    t = pq.read_table(tmp_path / "run" / "a.parquet").drop_columns([column])
    pq.write_table(t, tmp_path / "run" / "a.parquet")
    data = load_rows(prefix)
    assert data.rows.height == 6 and data.rows[column].null_count() == 6
    result = _report(prefix)
    assert result.exit_code == 0, result.output
    md = (tmp_path / "run" / "_report" / "report.md").read_text()
    assert "a.parquet" in md and f"`{column}`" in md


@pytest.mark.parametrize("column", ["query_id", "task", "answer", "error"])
def test_a_missing_essential_column_is_refused_naming_shard_and_column(tmp_path, column):
    prefix = _run(tmp_path / "run", _rows())
    t = pq.read_table(tmp_path / "run" / "a.parquet").drop_columns([column])
    pq.write_table(t, tmp_path / "run" / "a.parquet")
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert str(tmp_path / "run" / "a.parquet") in result.output and f"column '{column}'" in result.output


def test_a_listed_output_that_is_a_directory_is_named(tmp_path):
    prefix = _run(tmp_path / "run", _rows())
    bad = _add_shard(prefix, "b.parquet", lambda p: p.mkdir())
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert bad in result.output and "directory" in result.output


@pytest.mark.parametrize("text", ["not json {", "[]", '{"shards": null}', '"ok"', '{"shards": ["a.parquet"]}',
                                  '{"shards": [], "config": "x"}'],
                         ids=["not_json", "list", "shards_null", "string", "shard_not_object", "config_string"])
def test_a_manifest_that_is_not_a_json_object_is_named(tmp_path, text):
    prefix = _run(tmp_path / "run", _rows())
    (tmp_path / "run" / "_manifest.json").write_text(text)
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert str(tmp_path / "run" / "_manifest.json") in result.output


@pytest.mark.parametrize("text", ["not json {", '"ok"', '{"result": "ok"}'],
                         ids=["not_json", "string", "result_string"])
def test_a_done_marker_that_is_not_a_json_object_is_named(tmp_path, text):
    prefix = _run(tmp_path / "run", _rows())
    (tmp_path / "run" / "_shards").mkdir()
    (tmp_path / "run" / "_shards" / "a.parquet.json").write_text(text)
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert str(tmp_path / "run" / "_shards" / "a.parquet.json") in result.output


def test_a_finished_shard_whose_data_is_gone_is_reported(tmp_path, caplog):
    """Listed ``ok`` but deleted: the report reads the others and says which is missing (a
    warning, report.md, summary.json); before, it was skipped without a word."""
    prefix = _run(tmp_path / "run", _rows())
    gone = _add_shard(prefix, "b.parquet")
    with caplog.at_level(logging.WARNING):
        result = _report(prefix)
    assert result.exit_code == 0, result.output
    assert any(gone in r.getMessage() for r in caplog.records)
    md = (tmp_path / "run" / "_report" / "report.md").read_text()
    assert "b.parquet" in md and "missing" in md
    s = json.loads((tmp_path / "run" / "_report" / "summary.json").read_text())
    assert s["shards_missing"] == [gone] and s["shards"] == 1


def test_every_finished_shard_gone_is_refused_naming_them(tmp_path):
    prefix = _run(tmp_path / "run", _rows())
    (tmp_path / "run" / "a.parquet").unlink()
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert str(tmp_path / "run" / "a.parquet") in result.output


@pytest.mark.parametrize("field, value", [("stage_seconds", None), ("stage_seconds", "x"), ("engines", "x"),
                                          ("engines", {"drafter": {"prompt_tokens": None}}), ("seconds", "x"),
                                          ("rows_out", "x")])
def test_odd_manifest_numbers_do_not_crash_the_summary(tmp_path, field, value):
    """Values the product never writes: a null is shown as a dash, a wrong type is refused
    naming the manifest and field."""
    prefix = _run(tmp_path / "run", _rows())
    m = json.loads((tmp_path / "run" / "_manifest.json").read_text())
    (tmp_path / "run" / "_manifest.json").write_text(json.dumps({**m, field: value}))
    result = _report(prefix)
    if value is None or (field == "engines" and isinstance(value, dict)):
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2, result.output
        assert "_manifest.json" in result.output and f"'{field}'" in result.output


def test_calibrate_refuses_positive_scores_instead_of_a_snippet_load_config_refuses(tmp_path):
    """Foreign data whose scores are not log-probabilities (> 0): before, the snippet held a
    positive τ_min that load_config refused."""
    rows = _rows(6)
    for i, r in enumerate(rows):
        r["score"] = 0.9 - 0.1 * i
    df = load_rows(_run(tmp_path / "run", rows)).rows
    with pytest.raises(ValueError, match=r"q0.*field 'score'.*log probabilit"):
        calibrate(df, target_accuracy=0.9, n_boot=5)
    result = _invoke("calibrate", str(tmp_path / "run"), "--target-accuracy", "0.9", "--bootstrap", "5",
                     "--out", str(tmp_path / "t.yaml"))
    assert result.exit_code == 2 and "'score'" in result.output and not (tmp_path / "t.yaml").exists()


def test_calibrate_on_fast_path_rows_only_says_no_row_has_a_score_to_threshold(tmp_path):
    df = load_rows(_run(tmp_path / "run", _rows(4, fast_path=True))).rows
    res = calibrate(df, target_accuracy=0.5, n_boot=5)
    snippet = config_snippet(res)
    assert "target not met" not in snippet
    assert "qa: no row has a confidence to threshold" in snippet and "4 fast-path" in snippet
    p = tmp_path / "t.yaml"
    p.write_text(snippet)
    assert load_config(p).selection.tau_for("qa") is None


def test_a_value_the_cast_refuses_names_its_shard(tmp_path):
    """int64 ``draft_rounds`` are read as int32, but 2**40 does not fit: the failure shows on
    collect (all shards at once), and the error names the one shard that holds it."""
    prefix = _run(tmp_path / "run", _rows())
    t = pa.Table.from_pylist(_rows(2), schema=OUTPUT_SCHEMA)
    t = t.set_column(t.schema.get_field_index("draft_rounds"), "draft_rounds", pa.array([1, 2**40], pa.int64()))
    bad = _add_shard(prefix, "b.parquet", lambda p: pq.write_table(t, p))
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert bad in result.output and "draft_rounds" in result.output
    assert str(tmp_path / "run" / "a.parquet") not in result.output


@pytest.mark.parametrize("labels", [5, "SUPPORTS", ["SUPPORTS", 3]])
def test_recorded_claim_labels_of_the_wrong_type_are_refused_naming_the_field(tmp_path, labels):
    """``_run.json`` with ``claim_labels`` that are no list of strings (``5``, ``"SUPPORTS"``, a
    list holding a number) is refused naming the field: no traceback, no string read as a set of
    single letters."""
    from pathlib import Path

    prefix = _run(tmp_path / "run", _rows())
    m = Path(prefix) / "_manifest.json"
    m.write_text(json.dumps({k: v for k, v in json.loads(m.read_text()).items() if k != "config"}))
    (Path(prefix) / "_run.json").write_text(json.dumps({"config": {"claim_labels": labels}}))
    result = _report(prefix)
    assert result.exit_code == 2, result.output
    assert "_run.json: field 'config.claim_labels': expected a list of label strings" in result.output
    assert "Traceback" not in result.output


def test_an_empty_prefix_or_a_file_is_no_output_prefix(tmp_path, monkeypatch):
    """``report ""`` is refused as an empty prefix (the working directory is not read), and a
    shard given as the prefix is named a file, not a raw errno."""
    prefix = _run(tmp_path / "run", _rows())
    monkeypatch.chdir(tmp_path / "run")  # a run's directory: an empty prefix must not read it
    for cmd in (("report",), ("calibrate", "--target-accuracy", "0.5", "--out", str(tmp_path / "t.yaml"))):
        result = _invoke(*cmd[:1], "", *cmd[1:])
        assert result.exit_code == 2 and "an empty output prefix" in result.output, result.output
        result = _invoke(*cmd[:1], f"{prefix}/a.parquet", *cmd[1:])
        assert result.exit_code == 2 and "a file, not a run's output prefix" in result.output, result.output
        assert "Errno" not in result.output


def test_calibrate_refuses_a_query_id_graded_twice(tmp_path):
    """Plain calibrate refuses a query_id graded in two rows (exit 2, docs/cli.md), not counting it twice."""
    rows = _rows()
    prefix = _run(tmp_path / "run", rows + [dict(rows[0])])
    result = _invoke("calibrate", prefix, "--target-accuracy", "0.5", "--out", str(tmp_path / "t.yaml"))
    assert result.exit_code == 2, result.output
    assert f"query_id {rows[0]['query_id']!r} appears in 2 rows" in result.output
    assert not (tmp_path / "t.yaml").exists()


def test_calibrate_takes_a_run_holding_its_own_duplicate_query_id_rows(tmp_path):
    """``run`` answers the first row of a repeated input id and writes the others as unanswered
    ``duplicate_query_id`` error rows: calibrate takes such a run (not "shards of two runs
    copied together") without counting those rows; two answered rows of one id still refuse."""
    rows = _rows()
    dup = {**rows[0], "answer": None, "score": None, "score_draft": None, "correct": None,
           "error": "in.parquet: row 6: field 'query_id': duplicate id 'q0', held by row 0 of this shard",
           "error_reason": "duplicate_query_id"}
    prefix = _run(tmp_path / "run", rows + [dup])
    out = tmp_path / "t.yaml"
    result = _invoke("calibrate", prefix, "--target-accuracy", "0.5", "--out", str(out))
    assert result.exit_code in (0, 3) and "appears in" not in result.output, result.output
    assert load_rows(prefix).rows.height == 7  # the error row is still read (and reported), only not graded
    again = _run(tmp_path / "twice", rows + [dup, dict(rows[0])])
    result = _invoke("calibrate", again, "--target-accuracy", "0.5", "--out", str(out))
    assert result.exit_code == 2 and "query_id 'q0' appears in 2 rows" in result.output, result.output
