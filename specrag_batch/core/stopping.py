"""Stopping a run on SIGTERM or SIGINT (Ctrl-C): promptly, keeping the shards already finished
(docs/operations.md, "Stopping a run").

Why ``specrag-batch run`` did not stop on SIGTERM before (a fresh-clone trial needed SIGKILL;
reproduced with tests/integration/test_stop_signals.py, Prefect 3.7):

* During a flow run Prefect owns SIGTERM (``prefect.utilities.engine.capture_sigterm``): its
  handler raises ``TerminationSignal`` in the main thread. On the way out Prefect's
  ``ThreadPoolTaskRunner`` leaves with ``executor.shutdown(wait=True)``, which waits for the
  shard in flight (a thread cannot be interrupted; with a real model a shard takes minutes) and
  so marks it done; only then does Prefect re-send the signal to the handler that was there
  before its own: Python's default, death on the spot (exit status -15), skipping the exit
  handlers, so Prefect's ephemeral API server (a subprocess) was left running.
* A signal sent to the whole process group (Ctrl-C in a terminal, systemd's default
  ``KillMode=control-group``) also ends that API server at once; at exit Prefect's event
  service then retried every queued event against it, about 7 s each: still running after
  60 s.

What happens now (the CLI calls :func:`install`, and :func:`exit_stopped` once the command
returns or raises with :func:`requested` true):

1. The first SIGTERM or SIGINT sets :data:`STOP` and raises :class:`StopRequested` in the main
   thread (a ``KeyboardInterrupt``: Prefect records the flow run ``Crashed``, "aborted by an
   interrupt signal"). Under a flow run SIGTERM first goes through Prefect's handler, which
   hands it on to this one once it has recorded the crash; :func:`hook_prefect_sigterm` sets
   :data:`STOP` and starts the watchdog as soon as it arrives there.
2. The flow's task runner (:class:`~specrag_batch.config.execution.StoppableThreadPoolTaskRunner`)
   cancels the shard tasks not started (Prefect's cancel events and queued futures) and does
   not wait for the one in flight.
3. Once :data:`STOP` is set, the shard in flight writes neither its output nor its done marker
   (:func:`check`): the next run computes it again. A shard whose marker was already being
   written is complete (its output is written first) and stays done.
4. Once Prefect has recorded the flow run's end and the exception reaches the CLI,
   :func:`exit_stopped` says what was kept and how to resume, stops Prefect's ephemeral API
   server and a Ray runtime this process started, and ends the process with exit status
   128 + the signal number (:data:`EXIT_CODES`: 130 SIGINT, 143 SIGTERM) by ``os._exit``,
   without waiting for the thread in flight. A watchdog calls it sooner when the ephemeral
   API server is gone (nothing can be recorded then) and at the latest after
   :data:`GRACE_SECONDS`. Temporary files a write in flight leaves
   (``.<hex>.tmp``) are removed by the next run (:func:`resume.remove_stale_temporaries`).

A second signal while stopping ends the process at once (the signal's default action).

SIGKILL (the kernel's OOM killer, ``kill -9``) runs no handler at all, so none of the above
can stop the ephemeral API server; it lived on as an orphan (a port and about 230 MB) until
ended by hand. In the CLI the server's start is tied to the run's process instead
(:func:`tie_ephemeral_server`): the kernel sends the server SIGKILL when the process that
started it dies, however it dies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, NoReturn

STOP = threading.Event()
"""Set by the first SIGTERM/SIGINT after :func:`install` or by :func:`request`: the process is
stopping."""

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
"""Exit status of a stopped run: 128 + the signal number, as a shell reports a process the
signal ended (docs/operations.md, "Exit codes")."""

GRACE_SECONDS = 15.0
"""Longest time from the first signal to :func:`exit_stopped` (a watchdog thread calls it when
the main thread has not by then): the main thread can be held up by Prefect recording the flow
run's end against an API server that is gone (its client retries for about a minute)."""

CLEANUP_SECONDS = 10.0
"""Longest wait for the clean-up of :func:`exit_stopped` (Prefect's own ``stop`` gives the API
server 5 s, then kills it) before the process exits anyway. With :data:`GRACE_SECONDS`, a stop
takes at most 25 s: within Kubernetes' default grace period of 30 s before SIGKILL."""

_received: list[int] = []
_exiting = threading.Lock()

SHARD_NOTE = ("Shards finished before it keep their output and done marker; a shard still computing was "
              "not marked done and the next run computes it again. To resume, run the same command again.")
"""What :func:`exit_stopped` says a stop keeps, for the commands that compute shards."""
_note = [SHARD_NOTE]


def computes_no_shards() -> None:
    """Mark this process's command as one that computes no shards (report, calibrate, drift):
    a stop then says only that nothing was left half-written (their files are written
    atomically, :mod:`specrag_batch.core.storage`) and that running the command again starts over."""
    _note[0] = "Nothing it writes is left half-written; run the command again to start over."


class StopRequested(KeyboardInterrupt):
    """The process got SIGTERM or SIGINT (``signum``) and is stopping; raised in the main
    thread by the handler :func:`install` sets. A ``KeyboardInterrupt``, so that Prefect,
    click and other libraries treat it as an interrupt, never as an error to retry or report."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class RunStopping(RuntimeError):
    """A shard's output or done marker was about to be written after the process was told to
    stop (:func:`check`); the shard is not done and the next run computes it."""


def _on_signal(signum: int, frame) -> None:
    if _received:  # a second signal: its default action, now
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _received.append(signum)
    _begin_stop()
    raise StopRequested(signum)


def _begin_stop() -> None:
    """Set :data:`STOP` (the shard in flight writes nothing from now on) and start the watchdog."""
    STOP.set()
    threading.Thread(target=_watchdog, name="specrag-stop-watchdog", daemon=True).start()


def _ephemeral_server_gone() -> bool:
    """True when this process started Prefect's ephemeral API server and it has exited (a
    signal sent to the process group, Ctrl-C or systemd's, ends it too): nothing more can be
    recorded, and Prefect's client would retry against it for about a minute."""
    server_module = sys.modules.get("prefect.server.api.server")
    if server_module is None:
        return False
    process = server_module.SubprocessASGIServer().server_process
    return process is not None and process.poll() is not None


def _watchdog() -> None:
    """Started by the first signal: :func:`exit_stopped` once the ephemeral API server is gone
    or :data:`GRACE_SECONDS` have passed, whichever comes first (normally the main thread gets
    there before, and this thread ends with the process)."""
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and not _ephemeral_server_gone():
        time.sleep(0.2)
    exit_stopped()


_installed = [False]


def install() -> None:
    """Handle SIGTERM and SIGINT as described in the module docstring. Call from the main
    thread before the command runs (Python only runs signal handlers there).

    Raises:
        ValueError: not called from the main thread (``signal.signal``)."""
    for s in EXIT_CODES:
        signal.signal(s, _on_signal)
    _installed[0] = True


def hook_prefect_sigterm(prefect_engine) -> None:
    """Start the stop's watchdog when SIGTERM reaches Prefect's own handler during a flow run
    (``prefect.utilities.engine._prefect_sigterm_handler``, which raises ``TerminationSignal``
    and hands the signal on to :func:`_on_signal` only after recording the crash): a SIGTERM
    sent to the whole process group (``timeout``, systemd's ``KillMode=control-group``) has
    also ended Prefect's ephemeral API server, and Prefect's client would retry recording the
    crash for minutes. Only in a process that called :func:`install` (the CLI); a Prefect
    worker's flow run keeps Prefect's handling. Idempotent.

    Args:
        prefect_engine: the module ``prefect.utilities.engine`` (its handler is replaced
            before any flow run installs it)."""
    original = prefect_engine._prefect_sigterm_handler
    if getattr(original, "_specrag_hooked", False):
        return

    def handler(signum: int, *args: object):
        if _installed[0] and not STOP.is_set():
            _begin_stop()
        return original(signum, *args)

    handler._specrag_hooked = True
    prefect_engine._prefect_sigterm_handler = handler


PR_SET_PDEATHSIG = 1
"""``prctl`` option (linux/prctl.h): the signal the calling process gets when its parent dies."""


def _dies_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen`` (Linux): the child asks the kernel for SIGKILL
    when its parent dies (``prctl(PR_SET_PDEATHSIG)``; strictly, when the parent's thread that
    started it ends, so call Popen with it from the main thread only), and ends itself at once
    when the parent died before that request was made."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class _SubprocessTiedToParent:
    """The ``subprocess`` module as Prefect's server module sees it after
    :func:`tie_ephemeral_server`: the same, except that ``Popen`` called from the main thread
    starts a child that dies with this process (:func:`_dies_with_parent`)."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(*args, **kwargs):  # noqa: N802 - subprocess's name
        if threading.current_thread() is threading.main_thread() and kwargs.get("preexec_fn") is None:
            kwargs["preexec_fn"] = _dies_with_parent()
        return subprocess.Popen(*args, **kwargs)


def tie_ephemeral_server() -> None:
    """Tie Prefect's ephemeral API server to this process: on Linux, when this process dies,
    even by SIGKILL (the OOM killer), the kernel ends the server too
    (``PR_SET_PDEATHSIG``), where it used to live on as an orphan holding a port and about
    230 MB. Prefect starts the server with ``subprocess.Popen`` in
    ``prefect.server.api.server`` (``SubprocessASGIServer``, on the first API call, which in
    a CLI run comes from the main thread); that module's ``subprocess`` is replaced by
    :class:`_SubprocessTiedToParent`. A server started from another thread is left as it was
    (the kernel would end it with that thread).

    Only in a process that called :func:`install` (the CLI) and uses an ephemeral server (no
    ``PREFECT_API_URL``); elsewhere nothing is imported or changed. Idempotent."""
    if not _installed[0] or not sys.platform.startswith("linux"):
        return
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return
    import prefect.server.api.server as server_module

    if not isinstance(server_module.subprocess, _SubprocessTiedToParent):
        server_module.subprocess = _SubprocessTiedToParent()


def requested() -> bool:
    """True once the process is stopping: a SIGTERM or SIGINT was received after
    :func:`install`, or :func:`request` was called."""
    return STOP.is_set()


def request() -> None:
    """Mark the process as stopping without a signal of its own handler: a flow run left on
    Prefect's ``TerminationSignal`` (SIGTERM under Prefect's handler, e.g. a Prefect worker
    cancelling a deployment's run, where this module's handler is not installed), after which
    the process only tears down (:class:`~specrag_batch.config.execution.StoppableThreadPoolTaskRunner`)."""
    STOP.set()


def check(what: str) -> None:
    """Refuse to write ``what`` (a shard's output or done marker) once the process is stopping.

    Raises:
        RunStopping: :data:`STOP` is set; the message names ``what`` and the signal."""
    if STOP.is_set():
        name = signal.Signals(_received[0]).name if _received else "a signal"
        raise RunStopping(f"not written, the run is stopping ({name}): {what}")


def _stop_started_services() -> None:
    """Stop what this process started and would otherwise leave running when it exits without
    its exit handlers: Prefect's ephemeral API server (Prefect's own ``SubprocessASGIServer``
    ``stop``: terminate, 5 s, kill; the instance its clients share) and a Ray runtime
    (``ray.shutdown``). Modules not imported started nothing and are not imported here."""
    server_module = sys.modules.get("prefect.server.api.server")
    if server_module is not None:
        server_module.SubprocessASGIServer().stop()
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def exit_stopped() -> NoReturn:
    """Print on stderr what a stop keeps and how to resume, stop the services this process
    started (at most :data:`CLEANUP_SECONDS`), and end the process with the stop's exit status
    (:data:`EXIT_CODES`), without waiting for threads still computing a shard. Called by the
    CLI's main thread or by the watchdog, whichever comes first; the other one waits here
    until the process ends."""
    if not _exiting.acquire(blocking=False):
        threading.Event().wait()  # the first caller ends the process
    signum = _received[0] if _received else signal.SIGTERM
    code = EXIT_CODES.get(signum, 128 + int(signum))
    name = signal.Signals(signum).name
    try:
        sys.stdout.flush()
        print(f"\nspecrag-batch: stopped by {name}. {_note[0]} Exit code {code}.", file=sys.stderr, flush=True)
    except OSError:  # a closed stdout/stderr must not keep the process alive
        pass
    worker = threading.Thread(target=_stop_started_services, name="specrag-stop", daemon=True)
    worker.start()
    worker.join(CLEANUP_SECONDS)
    os._exit(code)
