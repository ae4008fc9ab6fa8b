"""Resume on a damaged output prefix, the shard path: a done marker that is not a JSON object or
not one the pipeline writes makes its shard be recomputed, with a warning naming it, and
``--overwrite`` replaces a corrupt ``_run.json`` and corrupt markers. The flow's own planning
and shard path on real Parquet with the FakeEngine (tests/integration/test_query_id_plan.py's
``run``). The run file's checks: tests/unit/test_resume_markers.py."""

from __future__ import annotations

import json
import logging

import pytest

from specrag_batch.run import resume
from specrag_batch.run.planning import shard_output_uri

from .test_query_id_plan import run, verifier  # noqa: F401 - verifier: fixture
from ..shard_inputs import CFG, shard, write
from ..unit.test_resume_markers import NOT_AN_OBJECT, _corrupt_run_file

pytestmark = pytest.mark.integration


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
    with caplog.at_level(logging.WARNING, logger="specrag_batch.run.resume"):
        again = run(inp, out, verifier)
    assert again == {"a.parquet": ("ok", None), "b.parquet": ("done", None)}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and all(marker in w and "recomputed" in w for w in warned), warned
    assert json.loads(open(marker, "rb").read())["result"]["status"] == "ok"  # rewritten whole
    assert run(inp, out, verifier) == {"a.parquet": ("done", None), "b.parquet": ("done", None)}


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
