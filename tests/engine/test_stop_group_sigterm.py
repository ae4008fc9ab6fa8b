"""SIGTERM sent to the whole process group (``timeout``, systemd's ``KillMode=control-group``)
while ``specrag-batch claims`` runs on the real vLLM engine (SmolLM2-135M): the group signal also
ends Prefect's ephemeral API server, and Prefect's own SIGTERM handler then retries recording
the crash against it (minutes to stop, with tracebacks, without the watchdog). Checks that with
the watchdog started where the signal reaches Prefect's handler
(:func:`specrag_batch.core.stopping.hook_prefect_sigterm`) the command stops within seconds, exit
143, and says so. The fake engine does not show the slow path (tests/integration/test_stop_signals.py
covers the rest of stopping), so this runs the real one."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from specrag_batch.core import storage

from ..conftest import ROOT, sample_rows, stop_process_group, subprocess_env

pytestmark = pytest.mark.slow

STOP_BOUND_SECONDS = 60
"""A failure bound, not a speed target: Prefect's retries took minutes; the stop takes seconds."""


def test_sigterm_to_the_process_group_stops_a_claims_run_within_seconds(tmp_path):
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    for i in range(4):
        storage.write_parquet_atomic(storage.join(inp, f"s{i}.parquet"), sample_rows("climate_fever", 2, skip=2 * i))
    exe = str(ROOT / ".venv" / "bin" / "specrag-batch")
    if not os.path.exists(exe):
        import sys

        exe = os.path.join(os.path.dirname(sys.executable), "specrag-batch")
    log = open(tmp_path / "run.log", "wb")
    p = subprocess.Popen([exe, "claims", "-i", inp, "-o", out, "-c", str(ROOT / "configs" / "test-smollm2.yaml")],
                         env=subprocess_env(tmp_path), cwd=ROOT, start_new_session=True, stdout=log, stderr=log)
    try:
        deadline = time.time() + 900
        while time.time() < deadline and p.poll() is None and not storage.exists(storage.join(out, "_shards")):
            time.sleep(0.2)
        assert p.poll() is None, "the run ended before its first shard was done: see run.log"
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGTERM)
        try:
            rc = p.wait(STOP_BOUND_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {STOP_BOUND_SECONDS} s after SIGTERM to its process group")
        stopped_in = time.monotonic() - t0
    finally:
        if p.poll() is None:
            stop_process_group(p, 10)
        log.close()
    text = (tmp_path / "run.log").read_text(errors="replace")
    assert rc == 143, f"exit {rc} after {stopped_in:.1f} s:\n{text[-3000:]}"
    assert "stopped by SIGTERM" in text and "Traceback" not in text, text[-3000:]
