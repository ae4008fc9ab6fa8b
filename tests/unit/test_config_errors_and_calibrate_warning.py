"""Config errors name the file, and ``calibrate`` warns when a task's τ_min rests on a handful
of rows. The CLI in-process (typer's runner),
real YAML files and real Parquet; no engine, no flow (every config case is refused first)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from specrag_batch.cli import commands as cli
from specrag_batch.run import orchestration
from specrag_batch.confidence.calibration import MIN_KEPT_ROWS
from specrag_batch.cli.commands import app
from specrag_batch.config import ConfigError, load_config, read_run_config
from specrag_batch.core.schema import OUTPUT_SCHEMA


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setattr(cli.console, "width", 2000)
    monkeypatch.setattr(cli.err_console, "width", 2000)
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))


def _run(*args: str):
    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def test_a_bad_config_gives_one_line_per_error_naming_the_file(tmp_path):
    bad = tmp_path / "bad-unknown-key.yaml"  # misspelt keys in two sections
    bad.write_text("mode: speculative\ndrafter:\n  model: qwen2.5-coder-0.5b-instruct\n  max_tokenz: 96\n"
                   "sampling:\n  num_draft: 5\n")
    r = _run("run", "--config", str(bad), "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2
    assert r.output.splitlines() == [
        f"error: {bad}: drafter.max_tokenz: unknown key; did you mean 'max_tokens'?",
        f"{bad}: sampling.num_draft: unknown key; did you mean 'num_drafts'?"]
    assert not (tmp_path / "out").exists()


def test_yaml_boolean_and_number_keys_are_named_as_the_file_spells_them(tmp_path):
    """YAML reads ``on``/``yes`` keys as ``True`` and ``3`` as an int: each such key is one line
    with its line number, its spelling and the way to quote it, not pydantic's "Keys should be
    strings (got True)"."""
    bad = tmp_path / "keys.yaml"
    bad.write_text("on: 1\nsampling:\n  yes: 2\n  3: x\n  num_drafts: 2\n")
    r = _run("run", "--config", str(bad), "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2
    boolean = "(YAML reads true/false, yes/no and on/off as booleans)"
    assert r.output.splitlines() == [
        f"error: {bad}: line 1: on: YAML reads this key as bool True, not a string {boolean}; quote it ('on':)",
        f"{bad}: line 3: sampling.yes: YAML reads this key as bool True, not a string {boolean}; quote it ('yes':)",
        f"{bad}: line 4: sampling.3: YAML reads this key as int 3, not a string; quote it ('3':)"]
    quoted = tmp_path / "quoted.yaml"  # quoted, they are plain unknown keys
    quoted.write_text("'on': 1\n")
    r = _run("run", "--config", str(quoted), "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2 and r.output.startswith(f"error: {quoted}: on: unknown key")


@pytest.mark.parametrize("text, expected", [
    # a key given twice: YAML kept the last silently (num_drafts: 3 was dropped)
    ("sampling:\n  num_drafts: 3\nsampling:\n  num_clusters: 4\n",
     "line 3: sampling: key given twice (also at line 1); YAML would keep the last one"),
    ("drafter:\n  max_tokens: 96\n  max_tokens: 9\n", "line 3: drafter.max_tokens: key given twice"),
    # YAML 1.1 integers: 010 ran as m = 8, 1:30 as 90
    ("sampling:\n  num_drafts: 010\n", "line 2: sampling.num_drafts: YAML reads '010' as the integer 8"),
    ("seed: 1:30\n", "line 1: seed: YAML reads '1:30' as the integer 90"),
    # a set has no order: the labels' order and the config hash changed per process
    ("claim_labels: !!set {REFUTES, SUPPORTS}\n", "line 1: claim_labels: a YAML set (!!set) has no order"),
    # false / [] / "" at the top level ran with every default
    ("false\n", "top level of a config file must be a mapping (got bool)"),
    ("[]\n", "top level of a config file must be a mapping (got list)"),
    # lax booleans: 0 and "off" were read as False
    ("selection:\n  use_draft_score: 0\n", "selection.use_draft_score: true or false is needed, got 0"),
    ("selection:\n  random_selection: 'off'\n", "true or false is needed, got 'off'"),
    ("drafter:\n  temperature: .inf\n", "drafter.temperature: Input should be a finite number"),
    # a billion-laughs file of 600 bytes expanded to a gigabyte
    ("x0: &a0 {v: 1}\n" + "".join(f"x{n}: &a{n} {{" + ", ".join(f"k{i}: *a{n - 1}" for i in range(10)) + "}\n"
                                   for n in range(1, 7)),
     "more than 100,000 YAML nodes once aliases are expanded"),
])
def test_yaml_that_reads_other_than_written_is_refused(tmp_path, text, expected):
    """YAML that reads other than it is written (each case would run with a value the user did
    not write) or that expands without bound (the alias bomb) is refused in one line naming
    the file."""
    bad = tmp_path / "c.yaml"
    bad.write_text(text)
    r = _run("run", "--config", str(bad), "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2 and expected in r.output.splitlines()[0], r.output
    assert r.output.startswith(f"error: {bad}: ")


def test_a_per_task_tau_min_names_every_problem_in_one_line(tmp_path):
    """``{qa: .nan, bogus: -1, claim: 5}`` names every problem, not only ``bogus``, in one line;
    a date or a list is one line without pydantic's union member names."""
    f = tmp_path / "tau.yaml"
    f.write_text("selection:\n  tau_min: {qa: .nan, bogus: -1, claim: 5}\n")
    r = _run("run", "--config", str(f), "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2 and r.output.splitlines() == [
        f"error: {f}: selection.tau_min: task 'qa': must be finite, got nan; unknown task 'bogus' "
        "in the per-task mapping; tasks: qa, claim, choice; task 'claim': 5 is positive, but the "
        "confidence it is compared with is a log-probability (<= 0)"]
    for text, said in (("{qa: 2024-01-01}", "a number is needed for task 'qa', got datetime.date(2024, 1, 1)"),
                       ("[-1, -2]", "a number (<= 0), a mapping task -> number, or null is needed, got [-1, -2]")):
        f.write_text(f"selection:\n  tau_min: {text}\n")
        r = _run("run", "--config", str(f), "-i", str(tmp_path), "-o", str(tmp_path / "out"))
        assert r.exit_code == 2 and r.output.splitlines() == [f"error: {f}: selection.tau_min: {said}"]


def test_merge_keys_empty_files_and_plain_aliases_still_load(tmp_path):
    """YAML's merge key (``<<: *base``) is valid and its keys yield to the ones beside it; an
    empty or comment-only file is the defaults; a non-UTF-8 file names its line."""
    f = tmp_path / "merge.yaml"
    f.write_text("drafter: &d\n  max_tokens: 96\nverifier:\n  <<: *d\n  max_tokens: 64\n")
    cfg = load_config(f)
    assert (cfg.drafter.max_tokens, cfg.verifier.max_tokens) == (96, 64)
    for text in ("", "# nothing\n"):
        f.write_text(text)
        assert load_config(f).sampling.num_drafts == load_config().sampling.num_drafts
    f.write_bytes(b"seed: 3\nreflection_question: caf\xe9?\n")
    with pytest.raises(ValueError, match=r"merge.yaml: not UTF-8 text \(byte 0xe9 at line 2\)"):
        load_config(f)


def test_config_as_a_file_uri(tmp_path):
    """``-c file:///...`` is read as load_config reads storage URIs (by ``run`` and the
    scheduled commands), not refused by click as missing; a missing URI and a directory are
    one line each."""
    f = tmp_path / "odd #1 %20.yaml"
    f.write_text("sampling:\n  num_draft: 3\n")
    uri = f"file://{f}"
    for cmd in (["run", "-i", str(tmp_path), "-o", str(tmp_path / "out")],
                ["claims", "-i", str(tmp_path), "-o", str(tmp_path / "out")]):
        r = _run(*cmd, "-c", uri)
        assert r.exit_code == 2 and r.output.startswith(f"error: {uri}: sampling.num_draft: unknown key"), r.output
    r = _run("run", "-c", f"file://{tmp_path}/missing.yaml", "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2 and f"config 'file://{tmp_path}/missing.yaml' does not exist" in r.output
    r = _run("run", "-c", str(tmp_path), "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2 and "is a directory" in r.output and "flow started" not in r.output


def test_an_unknown_top_level_key_does_not_hide_the_sections_errors(tmp_path):
    """With ``bogus_top: 1`` and ``sampling.num_draft: 3`` both are reported: the top-level
    check does not stop validation before the sections."""
    bad = tmp_path / "unknown.yaml"
    bad.write_text("bogus_top: 1\nsampling:\n  num_draft: 3\nsed: 4\n")
    r = _run("run", "--config", str(bad), "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2
    lines = r.output.splitlines()
    assert lines[0].startswith(f"error: {bad}: bogus_top: unknown key; known keys: mode, seed")
    assert lines[1:] == [f"{bad}: sed: unknown key; did you mean 'seed'?",
                         f"{bad}: sampling.num_draft: unknown key; did you mean 'num_drafts'?"]


@pytest.mark.parametrize("yaml_text, flags, line", [
    ("seed: -1\n", [], "{file}: seed: Input should be greater than or equal to 0 (got -1)"),
    ("sed: 3\n", [], "{file}: sed: unknown key; did you mean 'seed'?"),
    ("selection:\n  tau_min: 0.5\n", [], "{file}: selection.tau_min: tau_min 0.5 is positive, but"),
    ("mode: standard\nselection:\n  fallback: standard\n", [],
     "{file}: selection.fallback 'standard' re-answers low-confidence"),  # a whole-config rule
    ("seed: 1\n", ["--tau-min", "0.5"], "--tau-min: selection.tau_min: tau_min 0.5 is positive"),
    # a bad --tau-min is blamed on the flag, not on the config file
    ("seed: 1\n", ["--tau-min", "nan"], "--tau-min: selection.tau_min: must be finite or null, got nan"),
    ("seed: 1\n", ["--tau-min", "-inf"], "--tau-min: selection.tau_min: must be finite or null, got -inf"),
    ("selection:\n  tau_min: .nan\n", [], "{file}: selection.tau_min: must be finite or null, got nan"),
    # text fields YAML read as something else: what it read, and the fix
    ("drafter:\n  model:\n", [], "{file}: drafter.model: Input should be a valid string (got null: YAML reads null"),
    ("verifier:\n  model: 2024-01-01\n", [],
     "{file}: verifier.model: Input should be a valid string (got the date 2024-01-01: YAML reads an unquoted date so; quote it)"),
    ("reflection_question: yes\n", [], "{file}: reflection_question: Input should be a valid string (got True: YAML reads"),
    ("drafter:\n  model: 12\n", [], "{file}: drafter.model: Input should be a valid string (got the number 12; quote it"),
])
def test_each_error_names_where_the_value_came_from(tmp_path, yaml_text, flags, line):
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    r = _run("run", "-c", str(path), *flags, "-i", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2 and r.output.startswith("error: " + line.format(file=path)), r.output
    assert "pydantic" not in r.output and "input_value" not in r.output and "[type=" not in r.output


def test_read_run_config_keeps_load_configs_contract_for_the_api(tmp_path):
    """``load_config`` (Python API, tests) still raises pydantic's ValidationError; the
    commands' ``read_run_config`` raises ConfigError, a ValueError (exit 2)."""
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  num_drafts: 0\n")
    with pytest.raises(ValidationError):
        load_config(path)
    with pytest.raises(ConfigError) as e:
        read_run_config(path, {"seed": 3}, {"seed": "--seed"})
    assert isinstance(e.value, ValueError)
    assert str(e.value) == f"{path}: sampling.num_drafts: Input should be greater than or equal to 1 (got 0)"
    with pytest.raises(ConfigError, match=r"^command line: drafter.model: String should have at least 1 character \(got ''\)$"):
        read_run_config(None, {"drafter.model": ""}, {})  # an override without a flag name
    with pytest.raises(ConfigError, match=r"^config: selection.fallback 'standard' re-answers"):
        read_run_config(None, {"mode": "standard", "selection.fallback": "standard"})  # no file, no field
    assert read_run_config(None, {"seed": 3}).seed == 3


def _labelled_run(out, n: int, right_at_top: int) -> str:
    """A finished run of ``n`` graded qa rows scored -1, -2, ...: the ``right_at_top``
    best-scored rows correct, the rest wrong (the calibrated τ keeps exactly them)."""
    out.mkdir(parents=True)
    rows = [{"query_id": f"q{i}", "task": "qa", "answer": "x", "score": -1.0 - i, "score_draft": -1.0 - i,
             "low_confidence": False, "fast_path": False, "drafts": [], "flags": [], "mode": "speculative",
             "correct": i < right_at_top} for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA), out / "a.parquet")
    (out / "_manifest.json").write_text(json.dumps({"shards": [{"status": "ok", "output": str(out / "a.parquet")}]}))
    return str(out)


@pytest.mark.parametrize("right, warned", [(1, True), (MIN_KEPT_ROWS - 1, True), (MIN_KEPT_ROWS, False)])
def test_calibrate_warns_when_tau_rests_on_few_rows(tmp_path, monkeypatch, right, warned):
    """A qa τ_min from 1 of 20 rows (coverage 0.05) does not come without a word: a
    τ resting on fewer than MIN_KEPT_ROWS kept rows is warned about on screen and in the
    snippet, which stays a config; the default --out is tau_min.yaml in the current directory."""
    prefix = _labelled_run(tmp_path / "run", 20, right)
    monkeypatch.chdir(tmp_path)
    r = _run("calibrate", prefix, "--target-accuracy", "1.0", "--bootstrap", "5")
    assert r.exit_code == 0, r.output
    snippet = (tmp_path / "tau_min.yaml").read_text()
    assert load_config(tmp_path / "tau_min.yaml").selection.tau_for("qa") == -float(right)
    line = f"qa: τ_min rests on {right} of 20 graded rows (coverage {right / 20:.3g}), fewer than {MIN_KEPT_ROWS}"
    assert (f"warning: {line}" in r.output) is warned, r.output
    assert (f"# WARNING {line}" in snippet) is warned, snippet
    assert yaml.safe_load(snippet)["selection"]["tau_min"] == {"qa": -float(right)}
    assert "config snippet -> tau_min.yaml" in r.output


def test_calibrate_says_how_close_an_unmet_target_came(tmp_path):
    """A target no τ meets printed a row of dashes only. Now one line names the target, the best
    accuracy reached and at what coverage and τ, on screen and in the snippet's comment. An
    unmet target exits 3 (as calibrate --fallback-run does), so `calibrate && merge` stops; the
    snippet written is this run's and leaves the task out."""
    prefix = _labelled_run(tmp_path / "run", 20, 0)  # every row wrong: accuracy 1.0 is out of reach
    rows = _labelled_run(tmp_path / "run2", 20, 3)  # 3 right at the top, then wrong: best 1.0 at 0.15
    out = tmp_path / "t.yaml"
    r = _run("calibrate", prefix, "--target-accuracy", "0.5", "--bootstrap", "5", "--out", str(out))
    assert r.exit_code == 3, r.output
    line = "qa: accuracy >= 0.5 not reached: best accuracy 0 at coverage 1 (τ_min -20), n=20"
    assert f"warning: {line}" in r.output, r.output
    assert "error: accuracy >= 0.5 not met for task(s) qa: the snippet leaves them out" in r.stderr, r.stderr
    assert line in out.read_text() and load_config(out).selection.tau_for("qa") is None
    r = _run("calibrate", rows, "--target-coverage", "1.0", "--bootstrap", "5", "--out", str(out))
    assert "not reached" not in r.output and r.exit_code == 0  # met: every row has a score
    r = _run("calibrate", rows, "--target-accuracy", "1.0", "--bootstrap", "5", "--out", str(out))
    assert "not reached" not in r.output and load_config(out).selection.tau_for("qa") == -3.0


@pytest.mark.parametrize("flag, value", [("--target-accuracy", "1.5"), ("--target-coverage", "0")])
def test_calibrate_names_the_flag_whose_target_is_out_of_range(tmp_path, flag, value):
    """`--target-accuracy 1.5` (or `--target-coverage 0`) names the flag, on standard error,
    exit 2, and no snippet is written."""
    prefix = _labelled_run(tmp_path / "run", 20, 5)
    r = CliRunner().invoke(app, ["calibrate", prefix, flag, value, "--out", str(tmp_path / "t.yaml")])
    assert r.exit_code == 2, r.output
    assert f"error: {flag} must be in (0, 1], got {float(value)}" in r.stderr, r.stderr
    assert not (tmp_path / "t.yaml").exists()


@pytest.mark.parametrize("command", [["nightly", "--date", "2026-11-30"], ["backfill", "--start", "2026-11-29", "--end", "2026-11-30"]])
def test_scheduled_commands_check_config_and_models_before_their_flow(tmp_path, monkeypatch, command):
    """nightly and backfill read the config inside their flow: a bad key or model there was a
    failed flow run with Prefect's traceback. Both are one line, exit 2, no flow."""
    from specrag_batch.run.scheduled import backfill, nightly

    monkeypatch.setattr(nightly, "nightly_flow", lambda *a, **k: pytest.fail("the flow started"))
    monkeypatch.setattr(backfill, "backfill_flow", lambda *a, **k: pytest.fail("the flow started"))
    roots = ["--input-root", str(tmp_path / "in"), "--output-root", str(tmp_path / "out")]
    for text, line in (("sampling:\n  num_draft: 5\n", "{file}: sampling.num_draft: unknown key; did you mean 'num_drafts'?"),
                       ("verifier:\n  model: no-such-model\n", "{file}: verifier.model: 'no-such-model' cannot be used: ")):
        path = tmp_path / "c.yaml"
        path.write_text(text)
        r = _run(*command, *roots, "-c", str(path))
        assert r.exit_code == 2 and r.output.startswith("error: " + line.format(file=path)), r.output
        assert len(r.output.strip().splitlines()) == 1
