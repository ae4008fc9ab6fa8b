"""Run report on output shards written here (real Parquet, no engine): row errors are counted
by their ``error_reason`` code whatever the message says, an output written before that
column still reports, and plots with nothing labelled draw no legend (no matplotlib warning).
The report on a real run is tested in tests/flows/test_report.py."""

from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.confidence import calibration
from specrag_batch.confidence.calibration import USED_LABELS
from specrag_batch.run.report import UNRECORDED, load_rows, plots, summary, write_report
from specrag_batch.core.schema import OUTPUT_SCHEMA

PNG = b"\x89PNG\r\n\x1a\n"


def _row(i: int, **kw) -> dict:
    row = {"query_id": f"q{i}", "task": "qa", "answer": "x", "score": -float(i + 1),
           "score_draft": -float(i + 1), "low_confidence": False, "fast_path": False, "drafts": [],
           "flags": [], "mode": "speculative"}
    return {**row, **kw}


def _error(i: int, message: str, reason: str | None) -> dict:
    return _row(i, answer=None, score=None, score_draft=None, low_confidence=None, fast_path=None,
                error=message, error_reason=reason)


def _write_run(out, shards: dict[str, pa.Table], **manifest_fields) -> str:
    """Shards under ``out`` listed ``ok`` in its manifest (what a finished run leaves)."""
    out.mkdir()
    for name, table in shards.items():
        pq.write_table(table, out / name)
    manifest = {"shards": [{"status": "ok", "output": str(out / n)} for n in shards],
                "stage_seconds": {"drafting": 1.0}, "seconds": 2.0, "rows_out": 0, "engines": {},
                **manifest_fields}
    (out / "_manifest.json").write_text(json.dumps(manifest))
    return str(out)


def test_errors_are_counted_by_reason_code_not_message(tmp_path):
    """Two ``empty_query`` errors whose messages share no wording, a ``no_documents`` one,
    and a row error of an output written before ``error_reason`` existed (the column is
    missing from that shard): counted by code, the old one as unrecorded."""
    new = [_row(0), _error(1, "f.parquet: row 1 (query_id='q1'): field 'query': null or empty", "empty_query"),
           _error(2, "the query was blank", "empty_query"),
           _error(3, "row 3: field 'documents': no documents (N = 0)", "no_documents")]
    old = pa.Table.from_pylist([_row(4), _error(5, "row 5 (query_id='q5'): field 'query': null or empty",
                                                None)], schema=OUTPUT_SCHEMA).drop_columns(["error_reason"])
    prefix = _write_run(tmp_path / "out", {"a.parquet": pa.Table.from_pylist(new, schema=OUTPUT_SCHEMA),
                                           "b.parquet": old})
    s = summary(load_rows(prefix))
    assert s["rows"] == 6 and s["errors"] == 4 and s["answered"] == 2
    assert s["errors_by_reason"] == {"empty_query": 2, "no_documents": 1, UNRECORDED: 1}
    assert list(s["errors_by_reason"])[0] == "empty_query"  # most frequent first
    md = write_report(prefix)["markdown"]
    assert "- 2 × empty_query" in md and f"- 1 × {UNRECORDED}" in md


def test_fallback_and_adaptive_rows_are_counted_when_the_run_wrote_them(tmp_path):
    rows = [_row(0, answer_source="first", draft_rounds=1), _row(1, answer_source="first", draft_rounds=2),
            _row(2, answer_source="fallback_standard", draft_rounds=2, low_confidence=True)]
    s = write_report(_write_run(tmp_path / "with", {"a.parquet": pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)}))
    assert s["answer_source"] == {"first": 2, "fallback_standard": 1} and s["draft_rounds"] == {"2": 2, "1": 1}
    assert "| answer source (rows) | first: 2, fallback_standard: 1 |" in s["markdown"]
    plain = summary(load_rows(_write_run(tmp_path / "without", {"a.parquet": pa.Table.from_pylist(
        [_row(0)], schema=OUTPUT_SCHEMA)})))
    assert "answer_source" not in plain and "draft_rounds" not in plain
    assert "verifier_drafts_deduplicated" not in plain


def test_verifier_passes_saved_are_summed_when_the_run_deduplicated(tmp_path):
    # null on rows the verifier did not run on (fast path), a count elsewhere
    rows = [_row(0, verifier_drafts_deduplicated=2), _row(1, verifier_drafts_deduplicated=0),
            _row(2, fast_path=True, verifier_drafts_deduplicated=None)]
    s = write_report(_write_run(tmp_path / "dedup", {"a.parquet": pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)}))
    assert s["verifier_drafts_deduplicated"] == 2
    assert "| verifier passes saved (repeated drafts) | 2 |" in s["markdown"]


@pytest.mark.parametrize("rows", [
    [_row(0), _row(1)],                                               # no gold: nothing graded
    [_row(0, correct=True, fast_path=True), _row(1, correct=False, fast_path=True)],  # τ_min applies to none
    [_row(0, correct=True, score=None), _row(1, correct=False, score=None)],          # no score to plot
], ids=["no_gold", "only_fast_path", "no_score"])
def test_plots_with_nothing_labelled_warn_nothing(tmp_path, rows):
    prefix = _write_run(tmp_path / "out", {"a.parquet": pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)})
    data = load_rows(prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = plots(data)
    graded = any(r.get("correct") is not None for r in rows)
    scored = graded and any(r.get("score") is not None for r in rows)  # exp(score) has a reliability diagram
    assert set(out) == ({"scores", "risk_coverage"} if graded else {"scores"}) | ({"reliability"} if scored else set())
    assert all(png.startswith(PNG) for png in out.values())


def _curve_spy(monkeypatch) -> list:
    """The (confidence, always) arrays each risk-coverage curve of the report is drawn from."""
    seen, real = [], calibration.risk_coverage

    def spy(conf, correct, always=None):
        seen.append((list(conf), list(always)))
        return real(conf, correct, always)
    monkeypatch.setattr(calibration, "risk_coverage", spy)
    return seen


def test_risk_coverage_is_drawn_for_the_calibrated_confidence_the_run_used(tmp_path, monkeypatch):
    """Issue 39 item 2: under ``selection.confidence: calibrated`` the plot is of the output
    column ``confidence`` (fast-path rows thresholded too), and the plot and its caption say so."""
    rows = [_row(0, correct=True, confidence=0.9), _row(1, correct=False, confidence=0.2, fast_path=True),
            _row(2, correct=True, confidence=0.7)]
    prefix = _write_run(tmp_path / "out", {"a.parquet": pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)},
                        config={"selection": {"confidence": "calibrated"}})
    seen = _curve_spy(monkeypatch)
    s = write_report(prefix)
    assert seen == [([0.9, 0.2, 0.7], [False, False, False])]
    assert s["risk_coverage"]["confidence"] == "confidence" and s["risk_coverage"]["note"] is None
    assert "![risk_coverage](risk_coverage.png)" in s["markdown"]
    assert ("Risk-coverage of the confidence this run compared with τ_min: calibrated probability of being "
            "right (output column confidence; selection.confidence: calibrated).") in s["markdown"]


@pytest.mark.parametrize("config, column, values", [
    ({}, "score", [-1.0, -3.0]),                                    # no selection.confidence: score
    ({"selection": {"confidence": "score"}}, "score", [-1.0, -3.0]),
    ({"selection": {"confidence": "mean_logprob"}}, "mean_logprob", None),
])
def test_risk_coverage_of_a_log_measure_names_it_and_keeps_fast_path_rows(tmp_path, monkeypatch, config,
                                                                           column, values):
    rows = [_row(0, correct=True), _row(1, correct=False, fast_path=True), _row(2, correct=False)]
    prefix = _write_run(tmp_path / "out", {"a.parquet": pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)},
                        config=config)
    seen = _curve_spy(monkeypatch)
    s = write_report(prefix)
    (conf, always), = seen
    assert always == [False, True, False]
    if values:
        assert [conf[0], conf[2]] == values
    assert s["risk_coverage"]["confidence"] == column
    assert f"Risk-coverage of the confidence this run compared with τ_min: {USED_LABELS[column]}; " \
        "fast-path rows are always kept." in s["markdown"]


def test_a_run_without_gold_gets_no_risk_coverage_plot_and_one_line_why(tmp_path):
    prefix = _write_run(tmp_path / "out", {"a.parquet": pa.Table.from_pylist([_row(0), _row(1)], schema=OUTPUT_SCHEMA)})
    stale = tmp_path / "out" / "_report" / "risk_coverage.png"  # an earlier report's plot
    stale.parent.mkdir()
    stale.write_bytes(PNG)
    s = write_report(prefix)
    assert not stale.exists() and (tmp_path / "out" / "_report" / "score_correct_vs_wrong.png").exists()
    note = "No risk-coverage plot: no answered row has a gold answer, so no row is known to be right or wrong."
    assert s["risk_coverage"]["note"] == note
    md = s["markdown"].splitlines()
    assert note in md and "risk_coverage.png" not in s["markdown"]


def test_failed_and_skipped_input_files_are_listed_with_their_reason(tmp_path):
    """report.md lists the shards that failed and the files skipped, each with its reason, so a
    reader of the report alone can tell rows are missing."""
    ok = pa.Table.from_pylist([_row(0)], schema=OUTPUT_SCHEMA)
    failed = {"status": "failed", "input": "in/bad.parquet", "output": None,
              "error": "in/bad.parquet: column 'query_id': required column missing\n(have: ['q'])"}
    prefix = _write_run(tmp_path / "out", {"a.parquet": ok},
                        skipped_files=[{"input": "in/notes.txt", "reason": "not a .parquet file"}])
    m = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    m["shards"].append(failed)
    (tmp_path / "out" / "_manifest.json").write_text(json.dumps(m))
    s = write_report(prefix)
    assert s["shards_not_answered"] == [
        {"input": "in/bad.parquet", "status": "failed", "reason": failed["error"]},
        {"input": "in/notes.txt", "status": "skipped", "reason": "not a .parquet file"}]
    md = s["markdown"].splitlines()
    assert "## Input files not answered" in md
    assert "- `in/bad.parquet`: failed: in/bad.parquet: column 'query_id': required column missing (have: ['q'])" in md
    assert "- `in/notes.txt`: skipped: not a .parquet file" in md
    clean = write_report(_write_run(tmp_path / "clean", {"a.parquet": ok}))
    assert clean["shards_not_answered"] == [] and "not answered" not in clean["markdown"]


def test_hostile_file_names_stay_one_code_span_on_their_line(tmp_path):
    """A bucket key may hold a newline or backticks: report.md showed it across two lines, or
    closed its code span early."""
    ok = pa.Table.from_pylist([_row(0)], schema=OUTPUT_SCHEMA)
    prefix = _write_run(tmp_path / "out", {"a.parquet": ok},
                        skipped_files=[{"input": "in/two\nlines``x.txt", "reason": "not a .parquet file"}])
    md = write_report(prefix)["markdown"].splitlines()
    assert "- ```in/two\\nlines``x.txt```: skipped: not a .parquet file" in md
