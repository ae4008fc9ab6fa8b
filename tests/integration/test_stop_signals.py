"""Stopping ``specrag-batch run`` with SIGTERM (a scheduler: Kubernetes, systemd, a Prefect
worker) or SIGINT (Ctrl-C, sent to the terminal's process group) while a shard is in flight:
the process ends promptly with 143 / 130, the shards finished before the signal keep their done
markers, the shard in flight gets none, no process of the run is left behind (Prefect's
ephemeral API server), and running the same command again computes the rest, every input row
exactly once, without recomputing the finished shards (docs/operations.md, "Stopping a run").
SIGTERM to the whole group (``timeout``, systemd) is tried on ``claims`` (its flow runs
``run``'s as a subflow); the slow stop it caused with the real engine (Prefect retrying to record
the crash against its API server, ended by the same signal) is tests/engine/test_stop_group_sigterm.py.
A run ended by SIGKILL (no handler runs) takes its Prefect API server with it (the kernel's
``PR_SET_PDEATHSIG``).

A real ``specrag-batch`` process (the CLI, Prefect's flow and task runner, storage, resume) with
tests/fakes.py's FakeEngine in place of vLLM (tests/fake_engine_cli.py), each engine call taking
``SPECRAG_TEST_ENGINE_DELAY`` seconds so that a shard is still computing when the signal comes.
No engine runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specrag_batch.run import resume
from specrag_batch.core import storage

from ..conftest import ROOT, sample_rows, stop_process_group, subprocess_env

pytestmark = pytest.mark.integration


CONFIG = str(ROOT / "configs" / "test-smollm2.yaml")


N_SHARDS = 4


STOP_BOUND_SECONDS = 60
"""A failure bound, not a speed target: a stopped run must not wait for its shard in flight
(minutes with a real model); the stop itself takes a few seconds here."""


def cli(inp, out, *extra, command: str = "run") -> list[str]:
    return [sys.executable, "-m", "tests.fake_engine_cli", command, "-i", inp, "-o", out, "-c", CONFIG, *extra]


def markers(out: str) -> dict[str, dict]:
    """Done markers under ``out``: file name -> marker."""
    mdir = storage.join(out, resume.SHARDS_DIR)
    if not storage.exists(mdir):
        return {}
    return {f.rsplit("/", 1)[-1]: json.loads(storage.read_bytes(f))
            for f in storage.list_files(mdir) if f.endswith(".json")}


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig, to_group, code, command", [(signal.SIGTERM, False, 143, "run"),
                                                          (signal.SIGINT, True, 130, "run"),
                                                          (signal.SIGTERM, True, 143, "claims")],
                         ids=["SIGTERM-to-process", "SIGINT-to-group", "SIGTERM-to-group-claims"])
def test_a_signal_stops_the_run_promptly_and_the_next_run_resumes(tmp_path, sig, to_group, code, command):
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    shards = {f"s{i}.parquet": sample_rows("climate_fever", 2, skip=2 * i) for i in range(N_SHARDS)}
    for name, t in shards.items():
        storage.write_parquet_atomic(storage.join(inp, name), t)
    expected = sorted(q for t in shards.values() for q in t.column("query_id").to_pylist())
    env = {**subprocess_env(tmp_path), "SPECRAG_TEST_ENGINE_DELAY": "4"}
    log = open(tmp_path / "first-run.log", "wb")
    p = subprocess.Popen(cli(inp, out, command=command), env=env, cwd=ROOT, start_new_session=True, stdout=log, stderr=log)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and not markers(out) and p.poll() is None:
            time.sleep(0.2)
        assert p.poll() is None, "the run ended before its first shard was done: see first-run.log"
        done_at_signal = markers(out)
        assert 1 <= len(done_at_signal) < N_SHARDS
        t0 = time.monotonic()
        (os.killpg if to_group else os.kill)(p.pid, sig)
        try:
            rc = p.wait(STOP_BOUND_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{sig.name}: still running {STOP_BOUND_SECONDS} s after the signal")
        stopped_in = time.monotonic() - t0
        deadline = time.time() + 10  # the group: Prefect's API server, stopped on the way out
        while group_alive(p.pid) and time.time() < deadline:
            time.sleep(0.2)
        left_behind = group_alive(p.pid)
    finally:
        if p.poll() is None or group_alive(p.pid):
            stop_process_group(p, 10)
        log.close()
    text = (tmp_path / "first-run.log").read_text(errors="replace")
    said = f"stopped by {sig.name}" in text and "run the same command again" in text
    # the shards finished before the signal keep their markers; the shard in flight gets none
    got = {"exit code": rc, "processes left": left_behind, "message": said, "markers": sorted(markers(out))}
    want = {"exit code": code, "processes left": False, "message": True, "markers": sorted(done_at_signal)}
    assert got == want, f"stopped in {stopped_in:.1f} s; log tail:\n{text[-3000:]}"
    for m in done_at_signal.values():
        assert storage.read_parquet(m["output"]).num_rows == m["result"]["rows_out"] == 2

    env["SPECRAG_TEST_ENGINE_DELAY"] = "0"
    r = subprocess.run(cli(inp, out, command=command), env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads(storage.read_bytes(storage.join(out, "_manifest.json")))
    assert manifest["resumed_shards"] == len(done_at_signal) and manifest["failed_shards"] == 0
    rows = [row for f in sorted(storage.list_files(out)) if f.endswith(".parquet") and "/_" not in f[len(out):]
            for row in storage.read_parquet(f).to_pylist()]
    assert sorted(row["query_id"] for row in rows) == expected  # every input row exactly once
    after = markers(out)
    assert len(after) == N_SHARDS
    for name, m in done_at_signal.items():  # finished shards were not recomputed
        assert after[name] == m
    assert not [f for _, _, files in os.walk(out) for f in files if f.endswith(".tmp")]


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (a zombie has ended; only its parent's wait is missing)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


SERVER_GONE_SECONDS = 20
"""A failure bound: the kernel ends the server as the run dies; a few seconds of slack for a
loaded machine."""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_run_killed_by_sigkill_leaves_no_prefect_api_server(tmp_path):
    """Trial finding (issue 47 item 8): a run ended by the kernel's OOM killer (SIGKILL, no
    handler runs) left the ephemeral Prefect API server it had started running as an orphan
    (a port and about 230 MB) until ended by hand. Now the server dies with the run: a real
    ``specrag-batch run`` (fake engine) is SIGKILLed, alone, while a shard is in flight, and
    its server process is gone within :data:`SERVER_GONE_SECONDS`."""
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    for i in range(2):
        storage.write_parquet_atomic(storage.join(inp, f"s{i}.parquet"), sample_rows("climate_fever", 2, skip=2 * i))
    env = {**subprocess_env(tmp_path), "SPECRAG_TEST_ENGINE_DELAY": "4"}
    env.pop("PREFECT_API_URL", None)
    log = open(tmp_path / "run.log", "wb")
    p = subprocess.Popen(cli(inp, out), env=env, cwd=ROOT, start_new_session=True, stdout=log, stderr=log)
    server = None
    try:
        deadline = time.time() + 600
        while time.time() < deadline and p.poll() is None and (server is None or not markers(out)):
            if server is None:
                server = next((c for c in _children(p.pid) if "prefect.server.api.server" in _cmdline(c)), None)
            time.sleep(0.2)
        assert p.poll() is None and server is not None, "no shard in flight with a server: see run.log"
        os.kill(p.pid, signal.SIGKILL)  # the run alone, as the OOM killer ends it
        p.wait(30)
        gone = time.monotonic() + SERVER_GONE_SECONDS
        while _running(server) and time.monotonic() < gone:
            time.sleep(0.2)
        assert not _running(server), f"the API server (pid {server}) outlived its SIGKILLed run: {_cmdline(server)}"
    finally:
        if p.poll() is None or group_alive(p.pid):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(30)
        log.close()
