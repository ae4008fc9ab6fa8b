"""Once a stop is asked for (``stopping``), a shard in flight writes neither its output nor its
done marker. Stopping a real ``specrag-batch run`` process with SIGTERM or SIGINT:
tests/integration/test_stop_signals.py."""

from __future__ import annotations

import signal

import pytest

from specrag_batch import storage

from ..conftest import sample_rows


def test_once_stopping_a_shard_writes_neither_its_output_nor_its_marker(tmp_path, monkeypatch):
    """The shard in flight when the process is told to stop: PrefectIO (the flow's shard I/O)
    refuses both writes, naming the file and the signal, before any task run starts."""
    import threading

    from specrag_batch import stopping
    from specrag_batch.storage_tasks import PrefectIO

    monkeypatch.setattr(stopping, "STOP", threading.Event())
    monkeypatch.setattr(stopping, "_received", [signal.SIGTERM])
    stopping.STOP.set()
    out = str(tmp_path / "out")
    table = sample_rows("popqa", 1)
    with pytest.raises(stopping.RunStopping, match=r"stopping \(SIGTERM\): .*a\.parquet"):
        PrefectIO().write_table(storage.join(out, "a.parquet"), table)
    with pytest.raises(stopping.RunStopping, match=r"stopping \(SIGTERM\): .*_shards/a\.parquet\.json"):
        PrefectIO().mark_done(out, storage.join(out, "a.parquet"), "hash", {"size": 1}, "run", {"status": "ok"})
    assert not (tmp_path / "out").exists()  # nothing written, not even the directory
