"""The output's run key is claimed by exclusive create, not check-then-write (issue 40 item 5;
docs/operations.md, "Two runs into one output at once"): ``storage.create_exclusive`` creates
a file once, whoever else tries; a run whose claim is overtaken between its check and its write
by a run of another config is refused (``--overwrite`` or not), one of the same config shares
the key as a resumed run does. Local files only; the same on S3 (a conditional PUT) and with
real processes is tested in tests/integration/test_concurrent_runs.py."""

from __future__ import annotations

import json
import os
import threading

import pytest

from specrag_batch.run import resume
from specrag_batch.core import storage


def test_create_exclusive_creates_once(tmp_path):
    uri = str(tmp_path / "deeper" / "_run.json")
    assert storage.create_exclusive(uri, b'{"run_id": "a"}') is True
    assert storage.create_exclusive(uri, b'{"run_id": "b"}') is False
    assert json.loads(storage.read_bytes(uri)) == {"run_id": "a"}
    assert os.listdir(tmp_path / "deeper") == ["_run.json"]  # no temporary left behind


def test_of_many_threads_creating_at_once_exactly_one_wins(tmp_path):
    uri, n = str(tmp_path / "_run.json"), 16
    start, won = threading.Barrier(n), []

    def claim(i: int) -> None:
        start.wait()
        if storage.create_exclusive(uri, json.dumps({"run_id": i}).encode()):
            won.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and json.loads(storage.read_bytes(uri)) == {"run_id": won[0]}


def _overtaken(monkeypatch, out: str, other_hash: str) -> None:
    """Between this claim's check of the key and its write, run ``run-other`` (config
    ``other_hash``, same input) writes its key: the window of two runs started at once."""
    check, done = resume.check_output, []

    def check_then_other_claims(*args, **kwargs):
        existing = check(*args, **kwargs)
        if not done:
            done.append(1)
            storage.write_bytes_atomic(storage.join(out, resume.RUN_FILE), json.dumps(
                {"input": "/in", "output": out, "config_hash": other_hash, "run_id": "run-other",
                 "config": {}}).encode())
        return existing

    monkeypatch.setattr(resume, "check_output", check_then_other_claims)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_claim_overtaken_by_another_config_is_refused(tmp_path, monkeypatch, overwrite):
    out = str(tmp_path / "out")
    _overtaken(monkeypatch, out, "other-config")
    with pytest.raises(resume.RunConflictError, match="claimed by another run .*run-other"):
        resume.claim_output(out, "/in", "this-config", {}, "run-this", overwrite=overwrite)
    key = json.loads(storage.read_bytes(storage.join(out, resume.RUN_FILE)))
    assert key["run_id"] == "run-other" and key["config_hash"] == "other-config"  # untouched


def test_a_claim_overtaken_by_the_same_config_shares_the_key(tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    _overtaken(monkeypatch, out, "same-config")
    key = resume.claim_output(out, "/in", "same-config", {}, "run-this")
    assert key["run_id"] == "run-other"  # as a resumed run: the key that is there, unchanged
    assert json.loads(storage.read_bytes(storage.join(out, resume.RUN_FILE)))["run_id"] == "run-other"


def test_an_unraced_claim_and_its_resume_are_unchanged(tmp_path):
    out = str(tmp_path / "out")
    first = resume.claim_output(out, "/in", "h", {"seed": 1}, "run-1")
    assert first["run_id"] == "run-1" and first["config"] == {"seed": 1}
    assert resume.claim_output(out, "/in", "h", {"seed": 1}, "run-2") == first
    with pytest.raises(resume.RunConflictError, match="holds results of input"):
        resume.claim_output(out, "/in", "other", {"seed": 2}, "run-3")
    replaced = resume.claim_output(out, "/in", "other", {"seed": 2}, "run-3", overwrite=True)
    assert replaced["run_id"] == "run-3"
    assert json.loads(storage.read_bytes(storage.join(out, resume.RUN_FILE)))["run_id"] == "run-3"
