"""Resume on a damaged output prefix: a ``_run.json`` that is not a JSON object (not JSON, a
list, a string, ``null``) is refused naming it and ``--overwrite`` (the run key cannot be
checked, so results could mix), also by ``specrag-batch run`` (exit 2, before any shard); a
config conflict names the keys that differ. The CLI in-process; no engine. Corrupt done markers
and ``--overwrite`` over a run: tests/integration/test_resume_markers.py."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specrag_batch.run import resume
from specrag_batch.cli.commands import app

from ..shard_inputs import CFG, shard, write


NOT_AN_OBJECT = [b"{not json", b"", b"\xff\xfe", b"[]", b'"done"', b"null", b"3"]


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


def test_a_config_conflict_names_the_keys_that_differ(tmp_path):
    """A partial run made before verifier.deduplicate_drafts was on by default (its stored
    config lacks the key: it ran without deduplication) is refused under a config that leaves
    the key out (now on), and the error names that key and only it (keys added since at their
    old behaviour do not count, as in the hash); the CLI prints it; set false, it resumes."""
    from specrag_batch.core import storage
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
