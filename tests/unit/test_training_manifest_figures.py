"""The training manifest's figures over the whole training (issue 40 items 4 and 10), from a
Trainer log history and checkpoint state written here by hand: no model, no tokenizer. The
real kill-and-resume run is tests/engine/test_drafter_training.py."""

import json

import pytest

from specrag_batch.drafter_training.train import resumed_state, trl_dropped, whole_loss

STEPS = [3.0, 2.5, 2.2, 2.0, 1.9, 1.8]  # loss of optimizer steps 1..6


def entry(a: int, b: int) -> dict:
    """A log entry at step b: the mean loss of steps a+1..b, as the Trainer logs it."""
    return {"step": b, "loss": sum(STEPS[a:b]) / (b - a)}


def test_loss_of_the_whole_training_from_log_entries_of_every_session():
    # checkpoints at 2 and 4 (each logs), logging_steps 5, the last step logs
    uninterrupted = [entry(0, 2), entry(2, 4), entry(4, 5), entry(5, 6)]
    assert whole_loss(uninterrupted, [0]) == (pytest.approx(sum(STEPS) / 6), 6)
    # killed after checkpoint-4, resumed: the checkpoint's history plus the new session's
    resumed = [entry(0, 2), entry(2, 4), entry(4, 5), entry(5, 6)]
    assert whole_loss(resumed, [0, 4]) == (pytest.approx(sum(STEPS) / 6), 6)
    # a checkpoint written without a log at its step (before this change): the new session's
    # first entry covers only its own steps; the uncovered ones are not counted
    old = [entry(4, 5), entry(5, 6)]
    assert whole_loss(old, [0, 4]) == (pytest.approx((STEPS[4] + STEPS[5]) / 2), 2)
    assert whole_loss([], [0]) == (None, 0)


def test_what_a_checkpoint_carries_across_a_resume(tmp_path):
    ck = tmp_path / "checkpoint-4"
    ck.mkdir()
    sessions = [{"from_step": 0, "to_step": 4, "train_seconds": 40.0}]
    (ck / "trainer_state.json").write_text(json.dumps({
        "global_step": 4, "log_history": [{"step": 2, "loss": 2.7, "num_tokens": 700},
                                          {"step": 4, "loss": 2.1, "num_tokens": 1450}],
        "stateful_callbacks": {"TrainingProgress": {"args": {"sessions": sessions}, "attributes": {}}}}))
    assert resumed_state(str(ck)) == {"step": 4, "sessions": sessions, "num_tokens": 1450}
    assert resumed_state(None) == {"step": 0, "sessions": [], "num_tokens": 0}


def test_rows_trl_drops_are_named_by_their_example_index():
    from datasets import Dataset

    before = Dataset.from_list([{"example_index": i, "input_ids": [1, 2]} for i in (0, 2, 5)])
    after = before.filter(lambda r: r["example_index"] != 2)
    assert trl_dropped(before, after) == [2]
    assert trl_dropped(None, None) == []
    assert trl_dropped(before, after.remove_columns("example_index")) is None  # count only


def test_the_loss_is_logged_at_every_checkpoint_and_at_the_last_step():
    """A 1-step run logs its one step (its loss curve is not empty whatever logging_steps is),
    and a checkpoint's log history covers every step up to it."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from specrag_batch.drafter_training.train import _progress_class

    cb = _progress_class()([{"from_step": 0, "to_step": 4, "train_seconds": 40.0}])
    args = TrainingArguments(output_dir="unused", report_to=[], use_cpu=True)
    state, control = TrainerState(max_steps=1), TrainerControl()
    cb.on_train_begin(args, state, control)
    state.global_step = 1
    cb.on_step_end(args, state, control)
    assert control.should_log is True
    state.max_steps, control = 10, TrainerControl(should_save=True)
    cb.on_step_end(args, state, control)
    assert control.should_log is True
    control = TrainerControl()
    cb.on_step_end(args, state, control)
    assert control.should_log is False
    saved = cb.state()["args"]["sessions"]
    assert saved[0] == {"from_step": 0, "to_step": 4, "train_seconds": 40.0}
    assert saved[1]["from_step"] == 0 and saved[1]["to_step"] == 1
