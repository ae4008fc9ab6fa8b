"""The unit tier's guard: a test under tests/unit that starts a process, opens a socket or
reads a tokenizer or model file fails, naming what it did (such a test belongs in
tests/integration, see docs/development.md).

A Python audit hook (``sys.addaudithook``) watches ``subprocess.Popen``, ``os.fork``,
``os.posix_spawn``, ``os.system``, ``socket.bind``, ``socket.connect`` and the files a
tokenizer, a sentence-transformers model or model weights are read from (a vLLM engine, a
Prefect server or flow run and moto's S3 server all start a process or open a socket). It is
active only while a unit test is set up, run and torn down, and only in the test's own thread
and the threads started during it (a thread an earlier tier left running is not the test's)."""

from __future__ import annotations

import os
import sys
import tempfile
import threading

import joblib
import pytest

_MODEL_FILES = frozenset({
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
    "vocab.json", "vocab.txt", "merges.txt", "modules.json", "config_sentence_transformers.json",
    "sentence_bert_config.json", "model.safetensors", "pytorch_model.bin",
})
_MODEL_SUFFIXES = (".safetensors", ".gguf")
_TMP = os.path.join(os.path.realpath(tempfile.gettempdir()), "")
"""Files a test wrote under the temporary directory (a stand-in model directory) are its own."""
_PROCESS_EVENTS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                   "os.system", "os.startfile", "pty.spawn"}
_SOCKET_EVENTS = {"socket.bind", "socket.connect"}


class UnitTierViolation(RuntimeError):
    """A unit test did what only an integration test may (a process, a socket, a model file)."""


_state = {"active": False, "main": None, "before": frozenset(), "seen": []}


def _what(event: str, args: tuple) -> str | None:
    """What ``event`` does that a unit test may not, in words; None when it is allowed."""
    if event == "open":
        path, mode = (args + (None, None))[:2]
        if isinstance(path, (str, bytes, os.PathLike)) and not any(c in (mode or "r") for c in "wax+"):
            path = os.path.abspath(os.fsdecode(path))
            name = os.path.basename(path)
            if (name in _MODEL_FILES or name.endswith(_MODEL_SUFFIXES)) and not path.startswith(_TMP):
                return f"reads a tokenizer or model file ({path})"
        return None
    if event in _PROCESS_EVENTS:
        cmd = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:1]
        return f"starts a process ({event}: {str(cmd)[:200]})"
    if event in _SOCKET_EVENTS:
        return f"opens a socket ({event}: {args[1] if len(args) > 1 else ''})"
    return None


def _importing() -> bool:
    """Whether a module is being imported: what a library does once at import (urllib3 binds a
    socket to ``::1`` to learn whether IPv6 works) is not the test's doing."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _audit(event: str, args: tuple) -> None:
    if not _state["active"]:
        return
    if event != "open" and event not in _PROCESS_EVENTS and event not in _SOCKET_EVENTS:
        return
    ident = threading.get_ident()
    if ident != _state["main"] and ident in _state["before"]:
        return
    what = _what(event, args)
    if what is None or _importing():
        return
    _state["seen"].append(what)
    raise UnitTierViolation(f"a unit test {what}: move it to tests/integration")


# scikit-learn's K-Means asks joblib for the physical cores, which runs ``lscpu`` once per
# process: asked here, before any test, so the answer is cached.
joblib.cpu_count(only_physical_cores=True)

if not getattr(sys, "_specrag_unit_guard", False):
    sys.addaudithook(_audit)  # cannot be removed; inactive outside unit tests
    sys._specrag_unit_guard = True


def _watch():
    _state.update(active=True, main=threading.get_ident())
    try:
        yield
    finally:
        _state["active"] = False


# Per-phase hooks: pytest calls them through the item's own conftests (``item.ihook``), so they
# watch the tests under this folder only.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Watch the test's setup (its fixtures, those of wider scope included)."""
    _state.update(seen=[], before=frozenset(t.ident for t in threading.enumerate()))
    yield from _watch()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Watch the test itself."""
    yield from _watch()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Watch the test's teardown."""
    yield from _watch()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Fail the phase that did something only an integration test may, even when the code
    under test caught the :class:`UnitTierViolation`."""
    outcome = yield
    report = outcome.get_result()
    seen, _state["seen"] = _state["seen"], []
    if seen and report.outcome != "skipped":
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid}: the unit tier allows no process, socket or model file; this "
                           f"test " + "; ".join(dict.fromkeys(seen)) + ". Move it to tests/integration.")
