"""``specrag-batch calibrate --confidence calibrated`` (issue 39 item 2): a labelled run gives a
snippet that a run config loads (a model per task, τ_min a probability); bad input gets one
line, exit 2, and no snippet."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli.commands import app
from specrag_batch.config import RunConfig, load_config
from specrag_batch.core.schema import OUTPUT_SCHEMA


def _draft(answer, score):
    return {"answer": answer, "written_answer": answer, "rationale": "r", "score": score, "score_draft": score,
            "tokens_draft": 12, "flags": []}


def _run_dir(out, n=60, gold=True, right=None, right_rows=None):
    """n qa rows: a right row's drafts agree (3 of 3), a wrong row's split (1 of 3), scores noisy;
    right: every row (True/False), else every other row, or with ``right_rows`` the first that many."""
    rng = np.random.default_rng(0)
    out.mkdir(parents=True)
    rows = []
    for i in range(n):
        ok = right if right is not None else (i < right_rows) if right_rows is not None else (i % 2 == 0)
        s = float(rng.normal(-5, 1))
        answers = ["x", "x", "x"] if ok else ["x", "y", "z"]
        rows.append({"query_id": f"q{i}", "task": "qa", "answer": "x", "score": s, "score_draft": s,
                     "low_confidence": False, "fast_path": False, "mode": "speculative", "flags": [],
                     "drafts": [_draft(a, s - j) for j, a in enumerate(answers)],
                     "correct": ok if gold else None})
    pq.write_table(pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA), out / "a.parquet")
    (out / "_manifest.json").write_text(json.dumps({"shards": [{"status": "ok", "output": str(out / "a.parquet")}],
                                                    "config": RunConfig().model_dump(mode="json")}))
    return str(out)


def test_calibrated_snippet_loads_as_a_config_and_flags_by_probability(tmp_path):
    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(app, ["calibrate", _run_dir(tmp_path / "run"), "--confidence", "calibrated",
                                 "--target-accuracy", "0.9", "--out", str(out)])
    assert r.exit_code == 0, r.output
    cfg = load_config(out)
    model = cfg.selection.calibration["qa"]
    assert cfg.selection.confidence == "calibrated" and model.config_hash == RunConfig().scoring_hash()
    assert "agreement" in model.features and 0 <= cfg.selection.tau_for("qa") <= 1
    assert "qa: 60 rows, accuracy 0.500" in r.output and f"config snippet -> {out}" in r.output


@pytest.mark.parametrize("kind, line", [
    ("no_gold", "has no answered rows with a gold answer: calibration needs a labelled run"),
    ("one_class", "task 'qa': 60 graded rows (60 right, 0 wrong): a model of being right needs at least 5"),
    ("few", "task 'qa': 12 graded rows (6 right, 6 wrong), fewer than the 30"),
])
def test_bad_input_gets_one_line_exit_2_and_no_snippet(tmp_path, kind, line):
    prefix = _run_dir(tmp_path / "run", n=12 if kind == "few" else 60, gold=kind != "no_gold",
                      right=True if kind == "one_class" else None)
    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(app, ["calibrate", prefix, "--confidence", "calibrated",
                                 "--target-accuracy", "0.9", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert line in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_an_unmet_target_exits_3_as_without_a_model(tmp_path, monkeypatch):
    """An unmet target exits 3 under --confidence calibrated too (calibrate and calibrate
    --fallback-run do): the snippet is this run's and leaves the task out."""
    monkeypatch.setattr("specrag_batch.confidence.calibration.calibrate_task", lambda *a, **k: (None, None, None, None, 1))
    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(app, ["calibrate", _run_dir(tmp_path / "run"), "--confidence", "calibrated",
                                 "--target-accuracy", "0.9", "--out", str(out)])
    assert r.exit_code == 3, r.output
    assert "error: accuracy >= 0.9 not met for task(s) qa: the snippet leaves them out" in r.output
    # the best accuracy reached and at what coverage, as without a model, not only "target not met"
    assert "qa: 60 rows, accuracy 0.500" in r.output and "accuracy >= 0.9 not reached: best accuracy" in r.output
    assert load_config(out).selection.tau_for("qa") is None


def test_a_run_without_a_recorded_config_is_refused(tmp_path):
    """Shards copied without _manifest.json/_run.json are refused: a model fitted on them would
    carry the default config's hash, which any default-config run would then accept."""
    prefix = _run_dir(tmp_path / "run")
    m = tmp_path / "run" / "_manifest.json"
    m.write_text(json.dumps({k: v for k, v in json.loads(m.read_text()).items() if k != "config"}))
    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(app, ["calibrate", prefix, "--confidence", "calibrated", "--target-accuracy", "0.9",
                                 "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "no run config recorded (_manifest.json or _run.json)" in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_calibrated_prints_out_of_fold_auroc_and_the_warnings_the_plain_measure_prints(tmp_path):
    """--confidence calibrated prints the out-of-fold AUROC, warns of a τ_min resting on a
    handful of rows, and an unmet target says what was reached, not only 'target not met'."""
    prefix = _run_dir(tmp_path / "run")
    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(app, ["calibrate", prefix, "--confidence", "calibrated", "--target-coverage", "0.05",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "on rows not fitted on (5-fold)" in r.output
    assert "warning: qa: τ_min rests on 3 of 60 graded rows" in " ".join(r.output.split())
    assert "# WARNING qa: τ_min rests on 3 of 60" in out.read_text()


def test_out_never_replaces_a_file_calibrate_did_not_write(tmp_path):
    """--out refuses to replace a file calibrate did not write: the user's run config, a data
    shard, a symlink, /dev/full."""
    import os

    prefix = _run_dir(tmp_path / "run")
    args = ["calibrate", prefix, "--target-accuracy", "0.5", "--out"]
    config = tmp_path / "run.yaml"
    config.write_text("drafter:\n  model: x\n")
    link = tmp_path / "link.yaml"
    os.symlink(config, link)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    for path, line in ((config, "a file calibrate did not write is there"),
                       (tmp_path / "run" / "a.parquet", "a file calibrate did not write is there"),
                       (link, "is a link or a special file"), (fifo, "is a link or a special file")):
        before = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        r = CliRunner().invoke(app, [*args, str(path)])
        assert r.exit_code == 2 and line in r.output and "Traceback" not in r.output, r.output
        if before is not None:
            assert path.read_bytes() == before
    assert link.is_symlink() and config.read_text() == "drafter:\n  model: x\n"
    # its own snippet is replaced on a rerun
    out = tmp_path / "tau.yaml"
    assert CliRunner().invoke(app, [*args, str(out)]).exit_code in (0, 3)
    first = out.read_text()
    assert first.startswith("# specrag-batch calibrate ")
    r = CliRunner().invoke(app, ["calibrate", prefix, "--target-coverage", "0.5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text() != first


@pytest.mark.parametrize("n, right_rows, folds", [(30, None, 5), (30, 5, 5), (37, 6, 5), (24 + 6, 24, 5)])
def test_a_run_at_the_documented_minimums_is_calibrated(tmp_path, n, right_rows, folds):
    """Issue 47 item 4: the 30-row and 5-per-class minimums were applied again to each training
    fold of the 5-fold check, so 30-37 graded rows, or 5-6 right or wrong rows, were refused
    ("25 graded rows", no task). A run that meets them is calibrated."""
    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(app, ["calibrate", _run_dir(tmp_path / "run", n=n, right_rows=right_rows),
                                 "--confidence", "calibrated", "--target-coverage", "0.5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"qa: {n} rows" in r.output and f"on rows not fitted on ({folds}-fold)" in r.output
    assert load_config(out).selection.calibration["qa"].rows == n
