"""A local write that fails (``storage.write_bytes_atomic``) names the file being written, not
the hidden temporary it goes through (break3: a read-only ``_report/`` was reported as
``_report/.<hex>.tmp``), and leaves no temporary behind."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli import commands as cli
from specrag_batch.core import storage
from specrag_batch.cli.commands import app
from specrag_batch.core.schema import OUTPUT_SCHEMA


def _read_only(directory, monkeypatch) -> None:
    """``directory`` refuses new files: its mode when the tests run as a user; as root (modes
    do not bind root) ``open`` refuses as the kernel would, for files created there."""
    directory.chmod(0o555)
    if os.geteuid() != 0:
        return
    real_open = open

    def refusing_open(file, mode="r", *a, **kw):
        if os.path.dirname(os.fspath(file)) == str(directory) and ("w" in mode or "x" in mode):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, mode, *a, **kw)

    monkeypatch.setattr(storage, "open", refusing_open, raising=False)


def _hidden(directory) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".")]


def test_a_read_only_directory_is_reported_with_the_destination(tmp_path, monkeypatch):
    d = tmp_path / "out"
    d.mkdir()
    _read_only(d, monkeypatch)
    with pytest.raises(PermissionError) as e:
        storage.write_bytes_atomic(str(d / "report.md"), b"x")
    assert e.value.filename == str(d / "report.md") and ".tmp" not in str(e.value), str(e.value)
    d.chmod(0o755)
    assert _hidden(d) == []


def test_a_destination_that_is_a_directory_is_named_and_the_temporary_removed(tmp_path):
    (tmp_path / "report.md" / "x").mkdir(parents=True)  # a real rename failure, root or not
    with pytest.raises(OSError) as e:
        storage.write_bytes_atomic(str(tmp_path / "report.md"), b"x")
    assert str(tmp_path / "report.md") in str(e.value) and ".tmp" not in str(e.value), str(e.value)
    assert _hidden(tmp_path) == []


def test_report_into_a_read_only_report_directory_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(cli.console, "width", 2000)
    monkeypatch.setattr(cli.err_console, "width", 2000)
    out = tmp_path / "run"
    out.mkdir()
    pq.write_table(pa.Table.from_pylist([{"query_id": "q", "task": "qa", "answer": "x", "drafts": [],
                                          "flags": [], "mode": "speculative"}], schema=OUTPUT_SCHEMA),
                   out / "a.parquet")
    (out / "_manifest.json").write_text(json.dumps({"shards": [{"status": "ok", "output": str(out / "a.parquet")}]}))
    (out / "_report").mkdir()
    _read_only(out / "_report", monkeypatch)
    result = CliRunner().invoke(app, ["report", str(out)])
    (out / "_report").chmod(0o755)
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"{out / '_report'}/" in result.output and ".tmp" not in result.output, result.output


def test_a_bare_file_name_is_written_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage.write_bytes_atomic("fallback.yaml", b"selection: {}\n")
    assert (tmp_path / "fallback.yaml").read_bytes() == b"selection: {}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["fallback.yaml"]
    assert storage.create_exclusive("claim.json", b"{}") and not storage.create_exclusive("claim.json", b"{}")
