"""Run configs as a new user writes them: a
partial model section, a YAML syntax error, a seed the engines cannot take, a typo in the
sampling instruction's placeholders. Each is a clear error at load time (CLI exit 2), or is
accepted as docs/configuration.md documents, never a failure after the engines have loaded."""

import pytest
from pydantic import ValidationError

from specrag_batch.cli.options import USAGE_ERRORS
from specrag_batch.config import RunConfig, load_config


@pytest.mark.parametrize("yaml_text, field, value", [
    ("drafter:\n  max_tokens: 64\n", "drafter", "qwen2.5-coder-0.5b-instruct"),
    ("verifier:\n  engine_kwargs: {dtype: float32}\n", "verifier", "qwen2.5-coder-1.5b-instruct"),
])
def test_partial_model_section_keeps_the_default_model(tmp_path, yaml_text, field, value):
    """docs/configuration.md's table: drafter.model / verifier.model default to the packaged Qwen models, so a
    section that only sets another key keeps them (it used to fail: 'drafter.model Field
    required')."""
    path = tmp_path / "run.yaml"
    path.write_text(yaml_text)
    cfg = load_config(path)
    assert getattr(cfg, field).model == value
    assert load_config(None, {f"{field}.max_model_len": 4096}).model_dump()[field]["model"] == value


def test_default_model_keeps_the_config_hash():
    """Runs started before the model defaults moved into the sections resume under the same hash."""
    assert RunConfig().config_hash() == RunConfig.model_validate(
        {"drafter": {"model": "qwen2.5-coder-0.5b-instruct"},
         "verifier": {"model": "qwen2.5-coder-1.5b-instruct", "max_tokens": 160}}).config_hash()


def test_yaml_syntax_error_names_the_file_and_is_a_usage_error(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("sampling: {num_drafts: 3\n")
    with pytest.raises(ValueError, match=r"broken\.yaml: not valid YAML.*line 2") as e:
        load_config(path)
    assert isinstance(e.value, USAGE_ERRORS)  # CLI exit 2, no traceback


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_seed_outside_what_the_engines_take_is_refused(seed):
    """vLLM seeds numpy (``np.random.seed``: 0 <= seed < 2**32) when the engine is created: a
    seed outside that range passed the config and failed only once the engines loaded."""
    with pytest.raises(ValidationError, match="seed"):
        load_config(None, {"seed": seed})
    assert load_config(None, {"seed": 2**32 - 1}).seed == 2**32 - 1


@pytest.mark.parametrize("instruction, reason", [
    ("{quer}\n{document}", "unknown placeholder"),
    ("Query: {query}", "needs {document}"),
    ("{query} {document} {", "not a valid format string"),
])
def test_query_instruction_placeholders_checked_at_load(instruction, reason):
    """A typo in ``sampling.query_instruction`` raised KeyError inside the sampling stage of
    every shard, after the engines loaded; it is refused when the config is read."""
    with pytest.raises(ValidationError, match=reason):
        load_config(None, {"sampling.query_instruction": instruction})
    assert load_config(None, {"sampling.query_instruction": "Q: {query}\nP: {document}"})


@pytest.mark.parametrize("override, reason", [
    ({"sampling.num_draft": 3}, "did you mean 'num_drafts'"),
    ({"claim_labels": [True, False]}, "quote the labels"),
    # issue 47 item 9: labels equal but for case, spaces, underscores or hyphens were two labels
    ({"claim_labels": ["SUPPORTS", "NOT ENOUGH INFO", "NOT_ENOUGH_INFO"]},
     "'NOT ENOUGH INFO' and 'NOT_ENOUGH_INFO' are one label"),
    ({"selection.tau_min": 5.0}, "log-probability"),
    ({"selection.tau_min": {"qa": 0.5}}, "log-probability"),
    ({"reflection_question": ""}, "at least 1 character"),
    ({"drafter.model": ""}, "at least 1 character"),
    ({"sampling.num_drafts": True}, "a number is needed, got the boolean True"),  # else it runs with m = 1
    ({"drafter.temperature": True}, "got the boolean True"),
    ({"selection.consensus_min": False}, "got the boolean False"),
    ({"selection.tau_min": {"qa": -1.0, "bogus": -2.0}}, "unknown task 'bogus' in the per-task mapping; tasks: qa, "),
    ({"selection.tau_min": {"qa": False}}, "a number is needed for task 'qa', got the boolean False"),  # ran as 0.0
    ({"retrieval.index": ""}, "at least 1 character"),
])
def test_unclear_or_silently_wrong_config_values_refused_with_a_hint(override, reason):
    """Values that are unclear or would run silently wrong are refused with a hint: a typo'd key
    names its alternative, YAML's YES read as a boolean says so, a boolean where a number is
    needed, a positive tau_min, an empty model/index/question."""
    with pytest.raises(ValidationError, match=reason):
        load_config(None, override)


def test_drafter_budgets_must_leave_room_for_the_prompt():
    """Budgets that leave the drafter prompt less than MIN_PROMPT_ROOM tokens of max_model_len
    are refused at load, naming the fields and values (they used to fail every row with
    PromptTooLongError, as row errors of shards that counted as ok); the answer marker and
    answer_max_tokens count only with answer_on_truncation on."""
    from specrag_batch.config import ANSWER_MARKER_ROOM, MIN_PROMPT_ROOM

    with pytest.raises(ValidationError, match=r"max_tokens 2048 leave 0 of max_model_len 2048 .*at least 64") as e:
        load_config(None, {"drafter.max_tokens": 2048})
    assert isinstance(e.value, USAGE_ERRORS)
    edge = 2048 - MIN_PROMPT_ROOM
    assert load_config(None, {"drafter.max_tokens": edge}).drafter.max_tokens == edge  # off: just fits
    on = {"drafter.max_tokens": edge, "drafter.answer_on_truncation": True, "drafter.answer_max_tokens": 32}
    with pytest.raises(ValidationError, match=rf"max_tokens {edge} \+ up to {ANSWER_MARKER_ROOM} tokens of the forced "
                       r"answer marker \+ answer_max_tokens 32 \(answer_on_truncation is on\) leave 24 of "
                       r"max_model_len 2048"):
        load_config(None, on)
    fits = {**on, "drafter.max_tokens": edge - ANSWER_MARKER_ROOM - 32}
    assert load_config(None, fits).drafter.answer_budget == 32


def test_uses_verifier_only_when_something_reads_it():
    """RunConfig.uses_verifier: Standard RAG always; Speculative RAG when log ρ_SC or log ρ_SR is
    in log ρ or a fallback re-answers rows (both run on the verifier); not when log ρ_draft
    alone selects (the verifier engine is then never loaded)."""
    from ..conftest import small_config

    off = {"selection.use_self_consistency": False, "selection.use_self_reflection": False}
    assert not small_config(**off).uses_verifier
    assert small_config(**{**off, "selection.use_self_reflection": True}).uses_verifier
    assert small_config(**{**off, "selection.use_self_consistency": True}).uses_verifier
    assert small_config(**{**off, "selection.fallback": "standard"}).uses_verifier
    assert small_config(**{**off, "mode": "standard"}).uses_verifier


def test_a_verifier_model_nothing_uses_is_named_in_a_warning():
    """A Speculative RAG config naming a verifier other than the default while selecting by log
    ρ_draft alone gets an idle-setting warning (the flow logs it at the start of the run):
    the user may think that model scores the drafts. The defaults get none."""
    from ..conftest import small_config

    assert RunConfig().idle_settings() == []  # default verifier, not used: nothing to say
    assert small_config().idle_settings() == []  # the test config scores drafts with its verifier
    [warning] = small_config(**{"selection.use_self_reflection": False}).idle_settings()
    assert warning.startswith("verifier.model (smollm2-135m-instruct) is set, but nothing uses the verifier")
    assert small_config(**{"selection.use_self_reflection": False, "mode": "standard"}).idle_settings() == []


def test_verifier_sampling_settings_that_change_nothing_are_named():
    """``verifier.temperature`` and ``top_p`` reach only the verifier's generation (mode
    standard, ``selection.fallback: standard``); where the verifier only scores drafts in one
    forward pass they change nothing, and the run names them at its start."""
    sampled = {"verifier": {"temperature": 0.7, "top_p": 0.9}}
    idle = RunConfig.model_validate(sampled).idle_settings()
    assert [line.split(" (")[0] for line in idle] == ["verifier.temperature", "verifier.top_p"]
    assert all("scores each draft in one forward pass" in line for line in idle)
    assert RunConfig.model_validate({**sampled, "mode": "standard"}).idle_settings() == []
    assert RunConfig.model_validate({**sampled, "selection": {"fallback": "standard"}}).idle_settings() == []
    assert RunConfig.model_validate({"verifier": {"temperature": 0.0}}).idle_settings() == []  # the default
    assert RunConfig.model_validate(RunConfig().model_dump(mode="json")).idle_settings() == []  # a full dump


def test_a_config_file_with_two_spellings_of_one_label_names_the_file_and_both(tmp_path):
    from specrag_batch.config import read_run_config

    f = tmp_path / "claims.yaml"
    f.write_text("claim_labels: [SUPPORTS, REFUTES, NOT ENOUGH INFO, not-enough_info]\n")
    with pytest.raises(ValueError, match=r"claims.yaml: claim_labels: .*'NOT ENOUGH INFO' and 'not-enough_info' "
                                         r"are one label") as e:
        read_run_config(str(f))
    assert len(str(e.value).splitlines()) == 1
