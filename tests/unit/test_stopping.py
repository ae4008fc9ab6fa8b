"""Once a stop is asked for (``stopping``), a shard in flight writes neither its output nor its
done marker. Stopping a real ``specrag-batch run`` process with SIGTERM or SIGINT:
tests/integration/test_stop_signals.py."""

from __future__ import annotations

import signal

import pytest

from specrag_batch.core import storage

from ..conftest import sample_rows


def test_once_stopping_a_shard_writes_neither_its_output_nor_its_marker(tmp_path, monkeypatch):
    """The shard in flight when the process is told to stop: PrefectIO (the flow's shard I/O)
    refuses both writes, naming the file and the signal, before any task run starts."""
    import threading

    from specrag_batch.core import stopping
    from specrag_batch.run.storage_tasks import PrefectIO

    monkeypatch.setattr(stopping, "STOP", threading.Event())
    monkeypatch.setattr(stopping, "_received", [signal.SIGTERM])
    monkeypatch.setattr(stopping, "_stop_started_services", lambda: None)  # nothing started here
    stopping.STOP.set()
    out = str(tmp_path / "out")
    table = sample_rows("popqa", 1)
    with pytest.raises(stopping.RunStopping, match=r"stopping \(SIGTERM\): .*a\.parquet"):
        PrefectIO().write_table(storage.join(out, "a.parquet"), table)
    with pytest.raises(stopping.RunStopping, match=r"stopping \(SIGTERM\): .*_shards/a\.parquet\.json"):
        PrefectIO().mark_done(out, storage.join(out, "a.parquet"), "hash", {"size": 1}, "run", {"status": "ok"})
    assert not (tmp_path / "out").exists()  # nothing written, not even the directory



@pytest.mark.parametrize("offline", [False, True])
def test_a_stop_says_what_it_keeps_for_the_command_it_stopped(offline, monkeypatch, capsys):
    """A stopped run says shards keep their output and done markers and how to resume; a stopped
    ``report``, ``calibrate`` or ``drift`` (which compute no shards) says only that nothing is
    left half-written. (``os._exit`` raises SystemExit here instead of ending pytest.)"""
    import threading

    from specrag_batch.core import stopping

    def exit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(stopping.os, "_exit", exit_now)
    monkeypatch.setattr(stopping, "_exiting", threading.Lock())
    monkeypatch.setattr(stopping, "_note", [stopping.SHARD_NOTE])
    monkeypatch.setattr(stopping, "_received", [signal.SIGTERM])
    monkeypatch.setattr(stopping, "_stop_started_services", lambda: None)  # nothing started here
    if offline:
        stopping.computes_no_shards()
    with pytest.raises(SystemExit) as stopped:
        stopping.exit_stopped()
    err = capsys.readouterr().err
    assert stopped.value.code == 143 and "stopped by SIGTERM" in err
    assert ("done marker" in err) is not offline and ("half-written" in err) is offline, err
