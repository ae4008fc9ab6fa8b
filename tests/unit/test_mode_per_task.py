"""``mode`` per task (issue 49): the config's mapping, its hash (old single-mode configs keep
theirs), the ``--mode task=mode`` flag, which engines a config needs, the disaggregated check,
and the per-mode numbers of the manifest. Runs: tests/integration/test_mode_per_task.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specrag_batch.config import RunConfig
from specrag_batch.config.execution import ExecutionConfig
from specrag_batch.stages.evaluation import summarize
from specrag_batch.run.manifest import merge_summaries, output_cost

PER_TASK = {"claim": "speculative", "choice": "speculative", "qa": "standard"}


def test_a_single_mode_config_hashes_as_before_the_mapping_existed():
    """Recorded at fa4b01a (as in test_answer_on_truncation): a config whose ``mode`` is one
    word keeps the hash it had, so its runs resume."""
    old = {"verifier": {"deduplicate_drafts": False}, "sampling": {"adaptive": False},
           "selection": {"use_self_consistency": True, "use_self_reflection": True}}
    assert RunConfig.model_validate(old).config_hash() == "420716c9f187c07c"
    assert RunConfig.model_validate({**old, "mode": "speculative"}).config_hash() == "420716c9f187c07c"


def test_a_mapping_is_completed_and_hashed_by_what_it_does():
    """Tasks left out take ``default`` (else speculative); the same behaviour hashes the same;
    a mapping giving every task one mode is that mode (and its hash)."""
    a = RunConfig(mode={"qa": "standard"})
    assert a.mode == PER_TASK and a.mixed_modes
    assert RunConfig(mode={"default": "speculative", "qa": "standard"}).config_hash() == a.config_hash()
    assert RunConfig(mode={"default": "standard", "claim": "speculative", "choice": "speculative"}).mode == PER_TASK
    assert a.config_hash() not in (RunConfig().config_hash(), RunConfig(mode="standard").config_hash())
    assert RunConfig(mode={"qa": "standard", "claim": "standard"}).config_hash() != a.config_hash()
    same = RunConfig(mode={"claim": "standard", "choice": "standard", "qa": "standard"})
    assert same.mode == "standard" and same.config_hash() == RunConfig(mode="standard").config_hash()
    assert RunConfig(mode={"qa": "standard"}, task="claim").mode == "speculative"  # the only task it sees
    assert RunConfig.model_validate_json(a.model_dump_json()) == a  # what shard tasks receive


def test_mode_for_each_task_and_the_engines_a_config_needs():
    a = RunConfig(mode={"qa": "standard"})
    assert [a.mode_for(t) for t in ("claim", "choice", "qa")] == ["speculative", "speculative", "standard"]
    assert a.mode_for(None) == "speculative"  # a row that failed validation
    assert a.uses_speculative and a.uses_verifier  # Standard RAG rows answer with the verifier
    assert not RunConfig().uses_verifier and RunConfig().mode_for("qa") == "speculative"
    assert not RunConfig(mode="standard").uses_speculative


def test_the_flag_form_and_bad_mappings_are_one_line_each():
    assert RunConfig(mode="claim=speculative, qa=standard").mode == PER_TASK
    with pytest.raises(ValidationError) as e:
        RunConfig(mode={"claims": "speculative", "qa": "fast"})
    msg = str(e.value)
    assert "unknown task 'claims'" in msg and "task 'qa': mode must be one of speculative, standard, got 'fast'" in msg
    with pytest.raises(ValidationError, match="'qa' is not task=mode"):
        RunConfig(mode="claim=standard,qa")
    with pytest.raises(ValidationError) as e:  # one line, not one per member of the union
        RunConfig(mode="fast")
    assert e.value.error_count() == 1 and "got 'fast'" in str(e.value)
    with pytest.raises(ValidationError, match="empty per-task mode"):
        RunConfig(mode={})


def test_fallback_needs_some_speculative_task():
    assert RunConfig(mode={"qa": "standard"}, selection={"fallback": "standard"}).selection.fallback == "standard"
    with pytest.raises(ValidationError, match="takes fallback: none"):
        RunConfig(mode="standard", selection={"fallback": "standard"})


def test_disaggregated_stages_need_some_speculative_task():
    ex = ExecutionConfig(stages="disaggregated")
    ex.check_mode(RunConfig(mode={"qa": "standard"}))
    ex.check_mode("speculative")
    with pytest.raises(ValueError, match="needs config mode 'speculative'"):
        ex.check_mode(RunConfig(mode="standard"))


def _row(task, mode, correct):
    return {"task": task, "mode": mode, "correct": correct, "answer": "a", "error": None, "f1": 0.0,
            "exact_match": correct}


def test_metrics_and_cost_per_mode_merge_over_shards():
    one = summarize([_row("claim", "speculative", True), _row("qa", "standard", False)])
    two = summarize([_row("claim", "speculative", False), _row("qa", "standard", True),
                     _row("qa", "standard", True), {**_row("qa", "standard", None), "error": "bad"}])
    assert one["by_mode"] == {"speculative": {"rows": 1, "n_with_gold": 1, "accuracy": 1.0},
                              "standard": {"rows": 1, "n_with_gold": 1, "accuracy": 0.0}}
    merged = merge_summaries([one, two])
    assert merged["by_mode"]["standard"] == {"rows": 4, "n_with_gold": 3, "accuracy": pytest.approx(2 / 3)}
    assert merged["by_mode"]["speculative"]["accuracy"] == 0.5
    assert merged["by_task"]["qa"]["mode"] == "standard" and merged["by_task"]["claim"]["mode"] == "speculative"
    shards = [{"status": "ok", "mode_seconds": {"speculative": 2.0, "standard": 1.0}},
              {"status": "ok", "mode_seconds": {"standard": 0.5}}, {"status": "failed", "mode_seconds": {"standard": 9}}]
    assert output_cost(shards)["mode_seconds"] == {"speculative": 2.0, "standard": 1.5}


@pytest.mark.parametrize("command", [["nightly", "--input-root", "in", "--output-root", "out", "--date", "2026-01-01"],
                                     ["backfill", "--input-root", "in", "--output-root", "out", "--start",
                                      "2026-01-01", "--end", "2026-01-01"],
                                     ["claims", "-i", "in", "-o", "out"]])
def test_the_scheduled_commands_take_mode_as_run_does(command):
    """``--mode`` on nightly, backfill and claims is checked before any flow starts: a bad
    value is one line naming the flag, exit 2."""
    from typer.testing import CliRunner

    from specrag_batch.cli.commands import app

    r = CliRunner().invoke(app, [*command, "--mode", "qa=fast"])
    assert r.exit_code == 2, r.output
    assert "--mode: mode: task 'qa': mode must be one of speculative, standard, got 'fast'" in r.output
