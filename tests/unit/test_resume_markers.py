"""Resume on a damaged output prefix (break3, /work/wt-break3/BREAK3.md): a done marker or a
``_run.json`` that is not a JSON object (not JSON, a list, a string, ``null``) or not one the
pipeline writes. A corrupt marker makes its shard be recomputed, with a warning naming it (it
is not trustworthy, and the shard can be recomputed); a corrupt ``_run.json`` is refused naming
it and ``--overwrite`` (the run key cannot be checked, so results could mix), and
``--overwrite`` replaces it. The flow's own planning and shard path on real Parquet with the
FakeEngine (tests/test_query_id_plan.py's ``run``), the CLI in-process; no engine."""

from __future__ import annotations

import json
import logging

import pytest
from typer.testing import CliRunner

from specrag_batch import resume
from specrag_batch.cli import app
from specrag_batch.planning import shard_output_uri

from .test_query_id_plan import CFG, run, shard, verifier, write  # noqa: F401 - verifier: fixture

NOT_AN_OBJECT = [b"{not json", b"", b"\xff\xfe", b"[]", b'"done"', b"null", b"3"]
NOT_A_MARKER = [{"result": "ok"}, {"output": 1}, {"result": {"status": "ok", "errors": 0}, "output": None}]
"""Changes to a marker that matches this config and input version, but whose fields are not
the types the pipeline writes."""


@pytest.mark.parametrize("body", NOT_AN_OBJECT + NOT_A_MARKER)
def test_a_corrupt_done_marker_makes_its_shard_recomputed_with_a_warning(tmp_path, verifier, caplog, body):
    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "a.parquet", shard("x1", "x2"))
    write(inp, "b.parquet", shard("y1"))
    assert run(inp, out, verifier) == {"a.parquet": ("ok", None), "b.parquet": ("ok", None)}
    marker = resume.marker_uri(str(out), shard_output_uri(str(inp), str(inp / "a.parquet"), str(out)))
    if isinstance(body, dict):
        body = json.dumps({**json.loads(open(marker, "rb").read()), **body}).encode()
    with open(marker, "wb") as f:
        f.write(body)
    with caplog.at_level(logging.WARNING, logger="specrag_batch.resume"):
        again = run(inp, out, verifier)
    assert again == {"a.parquet": ("ok", None), "b.parquet": ("done", None)}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and all(marker in w and "recomputed" in w for w in warned), warned
    assert json.loads(open(marker, "rb").read())["result"]["status"] == "ok"  # rewritten whole
    assert run(inp, out, verifier) == {"a.parquet": ("done", None), "b.parquet": ("done", None)}


def _corrupt_run_file(tmp_path, body: bytes):
    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "a.parquet", shard("x1"))
    out.mkdir()
    (out / resume.RUN_FILE).write_bytes(body)
    return str(inp), str(out), str(out / resume.RUN_FILE)


@pytest.mark.parametrize("body", NOT_AN_OBJECT)
def test_a_corrupt_run_file_is_refused_naming_it_and_overwrite(tmp_path, body):
    inp, out, run_file = _corrupt_run_file(tmp_path, body)
    for call in (lambda: resume.check_output(out, inp, CFG.config_hash()),
                 lambda: resume.claim_output(out, inp, CFG.config_hash(), {}, "r1")):
        with pytest.raises(resume.RunConflictError) as e:
            call()
        assert run_file in str(e.value) and "--overwrite" in str(e.value)
    assert open(run_file, "rb").read() == body  # refused: nothing touched


def test_run_refuses_a_corrupt_run_file_with_exit_2_before_any_shard(tmp_path):
    inp, out, run_file = _corrupt_run_file(tmp_path, b"[]")
    result = CliRunner().invoke(app, ["run", "-i", inp, "-o", out])
    assert result.exit_code == 2, (result.output, result.exception)
    assert run_file in result.output and "--overwrite" in result.output
    assert sorted(p.name for p in tmp_path.joinpath("out").iterdir()) == [resume.RUN_FILE]


@pytest.mark.parametrize("body", [b"null", b"{not json"])
def test_overwrite_replaces_a_corrupt_run_file_and_corrupt_markers(tmp_path, verifier, body):
    """``--overwrite`` removes the previous results; a marker it cannot read names no data
    object, so only the marker goes (the data object left is unmarked: never trusted, and
    rewritten by the shard of that name)."""
    inp, out, run_file = _corrupt_run_file(tmp_path, body)
    assert run(inp, out, verifier) == {"a.parquet": ("ok", None)}  # run() itself claims nothing
    marker = resume.marker_uri(out, shard_output_uri(inp, inp + "/a.parquet", out))
    with open(marker, "wb") as f:
        f.write(body)
    key = resume.claim_output(out, inp, CFG.config_hash(), {"k": 1}, "r2", overwrite=True)
    assert json.loads(open(run_file).read()) == key and key["config_hash"] == CFG.config_hash()
    assert not tmp_path.joinpath("out", resume.SHARDS_DIR).joinpath("a.parquet.json").exists()
    assert resume.check_output(out, inp, CFG.config_hash()) == key


def test_a_config_conflict_names_the_keys_that_differ(tmp_path):
    """A partial run made before verifier.deduplicate_drafts was on by default (its stored
    config lacks the key: it ran without deduplication) is refused under a config that leaves
    the key out (now on), and the error names that key and only it (keys added since at their
    old behaviour do not count, as in the hash); the CLI prints it; set false, it resumes."""
    from specrag_batch import storage
    from specrag_batch.config import RunConfig

    inp, out = tmp_path / "in", tmp_path / "out"
    write(inp, "a.parquet", shard("x1"))
    inp_uri, out_uri = storage.normalize_uri(str(inp)), storage.normalize_uri(str(out))
    old = RunConfig.model_validate({"verifier": {"deduplicate_drafts": False}})
    stored = old.model_dump(mode="json")
    del stored["verifier"]["deduplicate_drafts"], stored["drafter"]["answer_on_truncation"]  # dumped before both
    resume.claim_output(out_uri, inp_uri, old.config_hash(), stored, "run-old")
    now = RunConfig()
    with pytest.raises(resume.RunConflictError) as e:
        resume.check_output(out_uri, inp_uri, now.config_hash(), config=now.model_dump(mode="json"))
    named = str(e.value).split("Config keys that differ from the stored run's: ")[1].split(". Use another output")[0]
    assert named == "verifier.deduplicate_drafts: absent in the stored run, true here"  # that key only
    changed = RunConfig.model_validate({"verifier": {"deduplicate_drafts": False}, "seed": 7})
    with pytest.raises(resume.RunConflictError, match=r"seed: 0 in the stored run, 7 here\."):
        resume.check_output(out_uri, inp_uri, changed.config_hash(), config=changed.model_dump(mode="json"))
    result = CliRunner().invoke(app, ["run", "-i", str(inp), "-o", str(out)])
    assert result.exit_code == 2 and "verifier.deduplicate_drafts: absent in the stored run, true here" in \
        " ".join(result.output.split()), result.output
    assert resume.check_output(out_uri, inp_uri, old.config_hash(), config=old.model_dump(mode="json")) is not None
