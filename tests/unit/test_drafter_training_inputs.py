"""``specrag-batch drafter inputs`` on damaged shared data (break3, /work/wt-break3/BREAK3.md):
a file under ``--shared`` that cannot be read is named (file, and line for JSON lines), exit 2,
not reported as "Invalid value for '--datasets'", which is kept for a name that is not a
training source. Real files in a ``--shared`` tree of the layout the converters read; the CLI
in-process, no engine."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specrag_batch.cli.commands import app

MUSIQUE = ("musique_hipporag_sample", "musique_train_sample.shared.json")
NQ = ("nq_open_oracle", "nq-open-oracle.shared.jsonl")
CLIMATE = ("climate_fever", "climate-fever.shared.jsonl")
NQ_ROW = {"question": "who?", "answers": ["x"], "ctxs": [{"title": "t", "text": "x."}]}
CLIMATE_ROW = {"claim_id": 1, "claim": "c", "claim_label": "SUPPORTS",
               "evidences": [{"evidence_id": "e", "article": "a", "evidence": "x."}]}


def _inputs(shared, dataset: str, tmp_path):
    result = CliRunner().invoke(app, ["drafter", "inputs", "--shared", str(shared), "-o",
                                      str(tmp_path / "out"), "--datasets", dataset])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.mark.parametrize("dataset, where, body, line", [
    ("musique", MUSIQUE, b'[{"id": "1",', None),
    ("musique", MUSIQUE, b"\xff\xfe[]", None),
    ("nq_open", NQ, (json.dumps(NQ_ROW) + "\n{truncated\n").encode(), 2),
    ("nq_open", NQ, json.dumps(NQ_ROW).encode() + b"\n\n" + json.dumps(NQ_ROW).encode()[:-2] + b"\xff}\n", 3),
    ("climate_fever", CLIMATE, (json.dumps(CLIMATE_ROW) + "\n") .encode() * 3 + b"not json\n", 4),
], ids=["musique_truncated", "musique_not_utf8", "nq_bad_line", "nq_not_utf8", "climate_bad_line"])
def test_a_corrupt_data_file_is_named_not_blamed_on_datasets(tmp_path, dataset, where, body, line):
    shared = tmp_path / "shared"
    (shared / where[0]).mkdir(parents=True)
    path = shared / where[0] / where[1]
    path.write_bytes(body)
    result = _inputs(shared, dataset, tmp_path)
    assert result.exit_code == 2, result.output
    assert "--datasets" not in result.output and str(path) in result.output, result.output
    if line is not None:
        assert f"line {line}" in result.output, result.output


def test_a_record_without_an_expected_field_names_dataset_and_data(tmp_path):
    """Valid JSON of another shape (a MuSiQue record without ``question``): a clear exit 2
    naming the data set, the ``--shared`` directory and the field, not a KeyError traceback."""
    shared = tmp_path / "shared"
    (shared / MUSIQUE[0]).mkdir(parents=True)
    path = shared / MUSIQUE[0] / MUSIQUE[1]
    path.write_text(json.dumps([{"id": "1", "answer": "x", "paragraphs": []}]))
    result = _inputs(shared, "musique", tmp_path)
    assert result.exit_code == 2, result.output
    out = result.output
    assert "--datasets" not in out and "'musique'" in out and str(shared) in out and "'question'" in out, out


def test_an_unknown_dataset_is_still_a_bad_datasets_value(tmp_path):
    result = _inputs(tmp_path, "popqa", tmp_path)
    assert result.exit_code == 2 and "--datasets" in result.output and "not a training source" in result.output


def test_the_data_step_fails_a_link_to_nothing_or_a_fifo_as_its_shard_only(tmp_path):
    """A ``.parquet`` link to nothing ended the data step in a traceback (its input fingerprint)
    and a FIFO would make it wait for ever; each is now that shard's failure, named, before
    any teacher engine loads (neither shard reaches one here)."""
    import os

    from specrag_batch.config import RunConfig
    from specrag_batch.drafter_training.data import build_training_data

    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "annexed.parquet").symlink_to(tmp_path / "not-fetched")
    os.mkfifo(inp / "pipe.parquet")
    manifest = build_training_data(str(inp), str(tmp_path / "out"), RunConfig())
    errors = {s["input"].rsplit("/", 1)[-1]: (s["status"], s["error"]) for s in manifest["shards"]}
    assert errors == {
        "annexed.parquet": ("failed", f"FileNotFoundError: {inp / 'annexed.parquet'}: a symbolic link to "
                                      f"{str(tmp_path / 'not-fetched')!r}, which does not exist"),
        "pipe.parquet": ("failed", f"OSError: {inp / 'pipe.parquet'}: a FIFO, not a regular file (not read)")}
