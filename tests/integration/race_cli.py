"""``specrag-batch run`` as tests/fake_engine_cli.py runs it (FakeEngine in place of vLLM; the
CLI, Prefect's flow, storage and resume are the product's), with one seam for a race: the
flow's claim of the output's run key (``resume.claim_output``) waits, right after it has checked
the key and before it writes one, until every racing process has checked too. Two processes
started together then claim at the same moment whatever the scheduling, which is the window
issue 40 item 5 describes (long on S3). The wait is on ``resume.check_output`` when called by
``claim_output`` only (not ``run_batch``'s check before the flow starts), once per process.

``SPECRAG_TEST_RACE_DIR``: a directory the racers share; ``SPECRAG_TEST_RACERS``: how many.
``python -m tests.integration.race_cli run -i ... -o ...`` from the repository root."""

from __future__ import annotations

import os
import sys
import time

from specrag_batch.cli import commands as cli
from specrag_batch.run import resume

from .. import fake_engine_cli  # noqa: F401 - puts the fake engine in place

RACE_DIR = os.environ["SPECRAG_TEST_RACE_DIR"]
RACERS = int(os.environ.get("SPECRAG_TEST_RACERS", "2"))
WAIT_SECONDS = 300

_check_output = resume.check_output
_waited = False


def _barrier() -> None:
    """Announce this process, then wait until ``RACERS`` processes have."""
    open(os.path.join(RACE_DIR, f"checked-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + WAIT_SECONDS
    while len([f for f in os.listdir(RACE_DIR) if f.startswith("checked-")]) < RACERS:
        if time.monotonic() > deadline:
            raise RuntimeError(f"race: the other racers never reached the claim ({RACE_DIR})")
        time.sleep(0.005)


def _check_then_wait(*args, **kwargs):
    global _waited
    out = _check_output(*args, **kwargs)
    if not _waited and sys._getframe(1).f_code.co_name == "claim_output":
        _waited = True
        _barrier()
    return out


resume.check_output = _check_then_wait

if __name__ == "__main__":
    cli.main()
