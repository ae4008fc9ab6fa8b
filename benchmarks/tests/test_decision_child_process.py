"""decision.py runs each computing cell in its own spawned process (``in_child_process``), so
that the engines of one cell are freed before the next loads its own. Real processes here, no
engine: the function run in the child is a small module-level function of this file."""

from __future__ import annotations

import os
import signal

import pytest

import decision


def _pid_and(x):
    return os.getpid(), x * 2


def _raises(msg):
    raise ValueError(msg)


class _Unpicklable(Exception):
    def __init__(self, a, b):  # two required args: pickling re-creates it with one, and fails
        super().__init__(a)
        self.b = b


def _raises_unpicklable():
    raise _Unpicklable("cannot travel", lambda: None)


def _killed():
    os.kill(os.getpid(), signal.SIGKILL)


def test_result_comes_back_from_another_process():
    pid, value = decision.in_child_process(_pid_and, 21)
    assert value == 42 and pid != os.getpid()


def test_child_exception_is_raised_in_the_parent():
    with pytest.raises(ValueError, match="row 7: bad field"):
        decision.in_child_process(_raises, "row 7: bad field")


def test_unpicklable_exception_arrives_named():
    with pytest.raises(RuntimeError, match="_Unpicklable: cannot travel"):
        decision.in_child_process(_raises_unpicklable)


def test_killed_child_is_a_clear_error():
    with pytest.raises(decision.CellProcessError, match=r"popqa-speculative: .*exit code -9.*out of memory"):
        decision.in_child_process(_killed, name="popqa-speculative")


def test_finished_cell_is_skipped_without_a_process(monkeypatch, tmp_path):
    monkeypatch.setattr(decision, "cell_shards", lambda cell: [("in", "out", {"done": 1})] * 3)
    monkeypatch.setattr(decision, "in_child_process", lambda *a, **k: pytest.fail("a process was started"))
    cell = type("C", (), {"name": "popqa/standard"})()
    assert decision.run_cell_isolated(cell) == {"cell": "popqa/standard", "status": "skipped", "seconds": 0.0,
                                                "shards_done_before": 3}
