"""``specrag-batch calibrate --fallback-run`` (issue 39 item 3): the accuracy-cost frontier of
re-answering the least-confident Speculative RAG rows with a labelled Standard RAG run's
answers, the share meeting a target, the snippet, and one line with no file for bad input.
Real Parquet outputs and manifests written here; the CLI in-process."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from specrag_batch.confidence import cascade
from specrag_batch.cli import commands as cli, calibrate as cli_calibrate
from specrag_batch.cli.commands import app
from specrag_batch.config import RunConfig, load_config
from specrag_batch.run.report import load_rows
from specrag_batch.core.schema import OUTPUT_SCHEMA

pytestmark = pytest.mark.unit

SPEC_RIGHT = [True, True, True, True, True, True, False, False, False, False]  # q0 most confident
STD_RIGHT = [False, True, True, True, True, True, True, True, True, False]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setattr(cli.console, "width", 2000)
    monkeypatch.setattr(cli.err_console, "width", 2000)


def _row(i: int, mode: str, correct, **kw) -> dict:
    return {"query_id": f"q{i}", "task": "qa", "answer": "x", "score": -float(i + 1), "score_draft": -float(i + 1),
            "low_confidence": False, "fast_path": False, "drafts": [], "flags": [], "mode": mode,
            "correct": correct, **kw}


def _run(path, rows: list[dict], config: RunConfig | dict, seconds: float | None) -> str:
    path.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA), path / "a.parquet")
    shard = {"status": "ok", "output": str(path / "a.parquet"), "rows_out": len(rows)}
    if seconds is not None:
        shard["seconds"] = seconds * len(rows)
    cfg = config.model_dump(mode="json") if isinstance(config, RunConfig) else config
    (path / "_manifest.json").write_text(json.dumps({"shards": [shard], "config": cfg}))
    return str(path)


def _pair(tmp_path, spec_rows=None, std_rows=None, std_config=None, spec_config=None):
    spec = _run(tmp_path / "spec", spec_rows or [_row(i, "speculative", c) for i, c in enumerate(SPEC_RIGHT)],
                spec_config or RunConfig(), 1.0)
    std = _run(tmp_path / "std", std_rows or [_row(i, "standard", c) for i, c in enumerate(STD_RIGHT)],
               std_config or RunConfig(mode="standard"), 2.0)
    return spec, std


def _cli(*args: str):
    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def test_frontier_by_hand(tmp_path):
    spec, std = _pair(tmp_path)
    f = cascade.frontier(load_rows(spec).rows, load_rows(std).rows, column="score", spec_seconds=1.0, std_seconds=2.0)
    got = [(p.kind, p.reanswered, p.tau, round(p.accuracy, 6), p.seconds) for p in f.points]
    assert got[0] == ("speculative", 0, None, 0.6, 1.0) and got[-1] == ("standard", 10, None, 0.8, 2.0)
    # τ = -9 re-answers q9 (wrong both ways), -8 adds q8 (wrong -> right), ..., 0 adds q0 (right -> wrong)
    assert [(k, tau, acc) for _, k, tau, acc, _ in got[1:-1]] == [
        (1, -9.0, 0.6), (2, -8.0, 0.7), (3, -7.0, 0.8), (4, -6.0, 0.9), (5, -5.0, 0.9), (6, -4.0, 0.9),
        (7, -3.0, 0.9), (8, -2.0, 0.9), (9, -1.0, 0.9), (10, 0.0, 0.8)]
    assert f.points[4].seconds == pytest.approx(1.0 + 0.4 * 2.0)
    assert cascade.choose(f, target_accuracy=0.9).tau == -6.0                 # the cheapest meeting it
    assert cascade.choose(f, budget_share=0.25).tau == -8.0                   # the best within 2 of 10 rows
    assert cascade.choose(f, budget_seconds=1.5).tau == -8.0                  # 1 + 2 x share <= 1.5
    assert cascade.choose(f, budget_share=0.0).kind == "speculative"
    assert cascade.choose(f, target_accuracy=0.95) is None
    assert cascade.choose(f, budget_seconds=0.5) is None                      # Speculative RAG alone costs 1 s/row


def test_fast_path_rows_are_never_re_answered_and_forced_rows_always(tmp_path):
    rows = [_row(i, "speculative", c) for i, c in enumerate(SPEC_RIGHT)]
    rows[9]["fast_path"] = True                             # never flagged under log ρ
    rows[0]["flags"] = ["no_valid_draft"]                   # flagged whatever τ_min is
    spec, std = _pair(tmp_path, spec_rows=rows)
    f = cascade.frontier(load_rows(spec).rows, load_rows(std).rows, column="score")
    first = f.points[1]
    assert (first.reanswered, first.tau, first.accuracy) == (1, -9.0, 0.5)  # q0 alone: right -> wrong
    assert max(p.reanswered for p in f.points if p.kind == "cascade") == 9  # q9 stays
    assert f.points[1].seconds is None


def test_calibrated_confidence_thresholds_fast_path_rows_too(tmp_path):
    rows = [_row(i, "speculative", c, confidence=0.95 - i / 10, fast_path=i == 9) for i, c in enumerate(SPEC_RIGHT)]
    spec, std = _pair(tmp_path, spec_rows=rows)
    f = cascade.frontier(load_rows(spec).rows, load_rows(std).rows, column="confidence")
    assert (f.points[1].reanswered, f.points[1].tau) == (1, pytest.approx(0.15))  # q9, a fast-path row
    assert f.points[-2].reanswered == 10 and f.points[-2].tau == 1.0  # τ_min 1 flags every row below 1


def test_cli_prints_the_frontier_and_writes_a_snippet_a_config_loads(tmp_path, monkeypatch):
    spec, std = _pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = _cli("calibrate", spec, "--fallback-run", std, "--target-accuracy", "0.9")
    assert r.exit_code == 0, r.output
    for share in ("0%", "10%", "20%", "30%", "40%", "50%", "90%", "100%"):
        assert f" {share} " in r.output
    assert "Speculative RAG alone" in r.output and "Standard RAG alone" in r.output
    assert "--target-accuracy 0.9: re-answer 40.0% of the rows (4 of 10, τ_min -6): accuracy 0.900, about 1.8 s/row" \
        in r.output
    assert "config snippet -> fallback.yaml" in r.output
    text = (tmp_path / "fallback.yaml").read_text()
    assert yaml.safe_load(text) == {"selection": {"confidence": "score", "tau_min": {"qa": -6.0}, "fallback": "standard"}}
    cfg = load_config(tmp_path / "fallback.yaml")
    assert cfg.selection.fallback == "standard" and cfg.selection.tau_for("qa") == -6.0
    assert "# re-answers 4 of 10 shared labelled rows (40.0%) with Standard RAG: accuracy 0.900" in text


def test_cli_budget_share_and_an_unmet_target(tmp_path):
    spec, std = _pair(tmp_path)
    out = tmp_path / "f.yaml"
    r = _cli("calibrate", spec, "--fallback-run", std, "--budget-share", "0.25", "--out", str(out))
    assert r.exit_code == 0 and yaml.safe_load(out.read_text())["selection"]["tau_min"] == {"qa": -8.0}
    out.unlink()
    r = _cli("calibrate", spec, "--fallback-run", std, "--target-accuracy", "0.95", "--out", str(out))
    assert r.exit_code == 3 and "no snippet written" in r.output and not out.exists()  # exit 3: unmet


@pytest.mark.parametrize("case, line", [
    ("std_no_gold", "error: the Standard RAG run (--fallback-run) has no answered row with a gold answer"),
    ("no_shared_rows", "error: the runs share no graded row (query_id): the speculative run has 10 graded rows"),
    ("hash_mismatch", "error: config hash mismatch: the Standard RAG run {std} answered under standard-answer hash "),
    ("std_is_speculative", "error: {std}: a run of mode 'speculative'; --fallback-run takes a Standard RAG run"),
    ("spec_has_fallback", "error: {spec}: selection.fallback is 'standard', so its answers are already the cascade's"),
    ("no_calibrated_column", "error: the speculative run has no calibrated confidence"),
])
def test_bad_input_gets_one_line_and_no_file(tmp_path, case, line):
    kw, args = {}, ["--target-accuracy", "0.9"]
    if case == "std_no_gold":
        kw["std_rows"] = [_row(i, "standard", None) for i in range(10)]
    elif case == "no_shared_rows":
        kw["std_rows"] = [{**_row(i, "standard", True), "query_id": f"other{i}"} for i in range(10)]
    elif case == "hash_mismatch":
        kw["std_config"] = RunConfig(mode="standard", verifier={"model": "another-verifier"}, seed=3)
    elif case == "std_is_speculative":
        kw["std_config"] = RunConfig()
    elif case == "spec_has_fallback":
        kw["spec_config"] = RunConfig(selection={"fallback": "standard"})
    else:
        args += ["--confidence", "calibrated"]
    spec, std = _pair(tmp_path, **kw)
    out = tmp_path / "f.yaml"
    r = _cli("calibrate", spec, "--fallback-run", std, *args, "--out", str(out))
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
    assert r.output.startswith(line.format(std=std, spec=spec)), r.output
    assert not out.exists()
    if case == "hash_mismatch":
        a, b = cascade.standard_hash(RunConfig().model_dump(mode="json")), cascade.standard_hash(
            kw["std_config"].model_dump(mode="json"))
        assert a != b and f"hash {b}, but the fallback of {spec} would answer under {a}" in r.output
        assert "(differs in: seed, verifier.model)" in r.output


def test_a_drafter_setting_does_not_make_the_standard_runs_hash_differ():
    spec = RunConfig(drafter={"model": "some-drafter", "max_tokens": 96}, sampling={"num_drafts": 3},
                     selection={"tau_min": -2.0})
    assert cascade.standard_hash(spec.model_dump(mode="json")) == \
        cascade.standard_hash(RunConfig(mode="standard").model_dump(mode="json"))


@pytest.mark.parametrize("args, line", [
    ([], "error: give exactly one of --target-accuracy and --target-coverage"),
    (["--target-accuracy", "0.8", "--target-coverage", "0.5"],
     "error: give exactly one of --target-accuracy and --target-coverage (got --target-accuracy and --target-coverage)"),
    (["--budget-share", "0.2"], "error: --budget-share: without --fallback-run the target is one of "
                                "--target-accuracy, --target-coverage"),
    (["--fallback-run", "x", "--target-coverage", "0.5"],
     "error: --target-coverage: with --fallback-run the target is one of --target-accuracy, --budget-share, "
     "--budget-seconds"),
    (["--fallback-run", "x"], "error: give exactly one of --target-accuracy, --budget-share, --budget-seconds"),
    (["--fallback-run", "x", "--budget-share", "1.5"], "error: --budget-share must be in [0, 1]"),
    (["--fallback-run", "x", "--budget-seconds", "nan"], "error: --budget-seconds must be a positive number"),
])
def test_target_errors_name_the_flags(tmp_path, args, line):
    """Every target error names the command-line flags (not the Python arguments
    target_accuracy / target_coverage), before any run is read."""
    r = _cli("calibrate", str(tmp_path / "missing"), *args)
    assert r.exit_code == 2 and r.output.startswith(line), r.output
    assert "target_accuracy" not in r.output and "target_coverage" not in r.output


# Bad input to calibrate --fallback-run: each refusal is one line naming the run or the flag.

@pytest.mark.parametrize("where", ["missing_parent", "a_directory", "under_a_file", "empty", "run_manifest"])
@pytest.mark.parametrize("fallback", [True, False])
def test_an_unwritable_out_is_refused_before_any_run_is_read(tmp_path, monkeypatch, where, fallback):
    """--out in a missing directory, a directory, a path under a file, or "" was a traceback
    after the whole frontier was computed; now one line naming --out and the path, exit 2,
    before a run is read (plain calibrate shares the check). A ``_`` name (a run's
    ``_manifest.json`` not yet written) is refused too."""
    spec, std = _pair(tmp_path)
    (tmp_path / "file").write_text("in the way")
    out = {"missing_parent": str(tmp_path / "no" / "f.yaml"), "a_directory": str(tmp_path),
           "under_a_file": str(tmp_path / "file" / "f.yaml"), "empty": "",
           "run_manifest": str(tmp_path / "no_manifest_yet" / "_manifest.json")}[where]
    (tmp_path / "no_manifest_yet").mkdir()  # a run still going has no manifest: refused, the snippet never takes its name
    monkeypatch.setattr("specrag_batch.run.report.load_rows", lambda *a: pytest.fail("a run was read"))
    args = ["--fallback-run", std, "--target-accuracy", "0.9"] if fallback else ["--target-accuracy", "0.5"]
    r = _cli("calibrate", spec, *args, "--out", out)
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
    assert r.output.startswith(f"error: --out {out}" if out else "error: --out: an empty path"), r.output
    assert not (tmp_path / "no").exists() and (tmp_path / "file").read_text() == "in the way"
    assert not (tmp_path / "no_manifest_yet" / "_manifest.json").exists()


def test_out_may_be_a_uri(tmp_path):
    """--out was a Path, which read s3://b/x.yaml as the local s3:/b/x.yaml; a URI is written
    through the storage layer (fsspec's in-process memory file system stands in for S3)."""
    import fsspec

    spec, std = _pair(tmp_path)
    fs = fsspec.filesystem("memory")
    try:
        r = _cli("calibrate", spec, "--fallback-run", std, "--budget-share", "0.25", "--out", "memory://snips/f.yaml")
        assert r.exit_code == 0, r.output
        assert yaml.safe_load(fs.cat_file("snips/f.yaml"))["selection"]["tau_min"] == {"qa": -8.0}
    finally:
        fs.rm("snips", recursive=True)


@pytest.mark.parametrize("which", ["spec", "std"])
def test_duplicate_query_ids_are_refused_naming_the_run_and_an_id(tmp_path, which):
    """Duplicated query_ids doubled the joined rows ("16 shared labelled rows" from 8)."""
    mode = "speculative" if which == "spec" else "standard"
    rows = [_row(i, mode, c) for i, c in enumerate(SPEC_RIGHT if which == "spec" else STD_RIGHT)]
    spec, std = _pair(tmp_path, **{f"{which}_rows": rows + [dict(rows[3])]})
    out = tmp_path / "f.yaml"
    r = _cli("calibrate", spec, "--fallback-run", std, "--target-accuracy", "0.9", "--out", str(out))
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
    name = f"the speculative run {spec}" if which == "spec" else f"the Standard RAG run {std}"
    assert r.output.startswith(f"error: {name}: query_id 'q3' appears in 2 rows"), r.output
    assert not out.exists()
    with pytest.raises(cascade.CalibrationInputError, match="query_id 'q3' appears in 2 rows"):
        cascade.frontier(load_rows(spec).rows, load_rows(std).rows, column="score")


@pytest.mark.parametrize("args", [["--target-accuracy", "0.95"], ["--budget-seconds", "0.5"]])
def test_an_unmet_target_exits_3_and_leaves_no_older_snippet(tmp_path, args):
    """An unmet target exited 0 and left an older --out in place, so `calibrate && merge`
    went on with a stale file. Now exit 3 and the older file is removed, saying so."""
    spec, std = _pair(tmp_path)
    out = tmp_path / "f.yaml"
    out.write_text("# specrag-batch calibrate earlier/ --fallback-run std/\nselection: {fallback: none}\n")  # an earlier run's snippet
    r = _cli("calibrate", spec, "--fallback-run", std, *args, "--out", str(out))
    assert r.exit_code == cli_calibrate.UNMET == 3, r.output
    assert not out.exists()
    assert f"no snippet written; removed the older {out} (not this run's)" in r.stderr, r.stderr
    r = _cli("calibrate", spec, "--fallback-run", std, *args, "--out", str(out))  # nothing there: nothing to remove
    assert r.exit_code == 3 and "no snippet written" in r.stderr and "removed" not in r.stderr


def test_few_shared_rows_are_warned_about_and_a_task_left_out_is_named(tmp_path):
    """8 shared rows gave a snippet without the small-sample warning plain calibrate gives,
    and a task only one run graded was dropped from the snippet without a word."""
    spec_rows = [_row(i, "speculative", c) for i, c in enumerate(SPEC_RIGHT[:8])]
    spec_rows += [{**_row(20 + i, "speculative", True), "task": "claim"} for i in range(3)]
    spec, std = _pair(tmp_path, spec_rows=spec_rows,
                      std_rows=[_row(i, "standard", c) for i, c in enumerate(STD_RIGHT[:8])])
    out = tmp_path / "f.yaml"
    r = _cli("calibrate", spec, "--fallback-run", std, "--budget-share", "0.5", "--out", str(out))
    assert r.exit_code == 0, r.output
    warn = "the frontier rests on 8 shared graded rows, fewer than 10: its accuracies are not reliable estimates"
    left = "task(s) claim: graded in only one run, so left out of the snippet (no τ_min set for them)"
    assert f"warning: {warn}" in r.output and f"note: {left}" in r.output, r.output
    text = out.read_text()
    assert f"# WARNING {warn}" in text and f"# {left}" in text
    assert list(yaml.safe_load(text)["selection"]["tau_min"]) == ["qa"]


def test_an_empty_fallback_run_is_refused(tmp_path, monkeypatch):
    """--fallback-run "" was read as the current directory."""
    monkeypatch.chdir(tmp_path)
    r = _cli("calibrate", str(tmp_path), "--fallback-run", "", "--target-accuracy", "0.9")
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
    assert r.output.startswith("error: --fallback-run: an empty value"), r.output
    assert not (tmp_path / "fallback.yaml").exists()


def test_the_label_probability_is_a_confidence_the_cascade_thresholds(tmp_path, monkeypatch):
    """``selection.confidence: label_probability`` (issue 50): a probability, so fast-path rows are
    thresholded too and τ_min reaches 1; the snippet keeps the label distribution it needs."""
    on = {"selection": {"label_distribution": True, "label_prior": "batch", "confidence": "label_probability"}}
    rows = [_row(i, "speculative", c, label_probability=0.95 - i / 10, fast_path=i == 9)
            for i, c in enumerate(SPEC_RIGHT)]
    spec, std = _pair(tmp_path, spec_rows=rows, spec_config=RunConfig.model_validate(on))
    f = cascade.frontier(load_rows(spec).rows, load_rows(std).rows, column="label_probability")
    assert (f.points[1].reanswered, f.points[1].tau) == (1, pytest.approx(0.15))  # q9 (0.05), a fast-path row
    assert f.points[-2].reanswered == 10 and f.points[-2].tau == 1.0
    monkeypatch.chdir(tmp_path)
    r = _cli("calibrate", spec, "--fallback-run", std, "--target-accuracy", "0.9")
    assert r.exit_code == 0, r.output
    sel = yaml.safe_load((tmp_path / "fallback.yaml").read_text())["selection"]
    assert sel["confidence"] == "label_probability" and sel["label_distribution"] is True
    assert sel["label_prior"] == "batch" and sel["fallback"] == "standard"
    assert load_config(tmp_path / "fallback.yaml").selection.tau_for("qa") == sel["tau_min"]["qa"]
    (tmp_path / "plain").mkdir()
    plain, _ = _pair(tmp_path / "plain")  # a run without the label distribution
    r = _cli("calibrate", plain, "--fallback-run", std, "--confidence", "label_probability", "--budget-share", "0.5")
    assert r.exit_code == 2 and "has no label probability" in r.output


def test_a_per_task_mode_run_is_calibrated_on_its_speculative_rows_only(tmp_path):
    """A run with ``mode: {claim: speculative, qa: standard}``: its qa rows are Standard RAG's
    answers already, so no τ_min re-answers them; its claim rows are the cascade's."""
    mixed = RunConfig.model_validate({"mode": {"claim": "speculative", "qa": "standard"}})
    rows = [_row(i, "speculative" if i < 5 else "standard", c, task="claim" if i < 5 else "qa")
            for i, c in enumerate(SPEC_RIGHT)]
    std_rows = [_row(i, "standard", c, task="claim" if i < 5 else "qa") for i, c in enumerate(STD_RIGHT)]
    spec, std = _pair(tmp_path, spec_rows=rows, std_rows=std_rows, spec_config=mixed)
    cascade.check_runs(load_rows(spec).config, load_rows(std).config, "spec", "std")  # not refused
    f = cascade.frontier(load_rows(spec).rows, load_rows(std).rows, column="score")
    assert max(p.reanswered for p in f.points if p.kind == "cascade") == 5  # q0..q4, the claim rows
