"""Model names checked before a run writes or loads anything: a name is a packaged model, an
existing local directory, or a hub id ``owner/name`` found in the local Hugging Face cache or on
the hub. The hub is a real HTTP server on 127.0.0.1 speaking the hub's model-info API
(``huggingface_hub.HfApi`` talks to it as to huggingface.co), or a closed port; no engine, no
network. Run keys and packaged models not installed: tests/unit/test_model_names.py."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specrag_batch.cli import commands as cli
from specrag_batch.engines import models
from specrag_batch.run import orchestration, resume
from specrag_batch.cli.commands import app
from specrag_batch.config import RunConfig
from specrag_batch.engines.models import ModelNameError, check_config_models, check_model_name
from ..unit.test_model_names import DEMO

pytestmark = pytest.mark.integration


KNOWN = "someone/known-model"


class _Hub(BaseHTTPRequestHandler):
    """``GET /api/models/<owner>/<name>``: 200 with model info for :data:`KNOWN`, else the
    hub's 404 (``X-Error-Code: RepoNotFound``). Counts the requests."""

    asked: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).asked.append(self.path)
        repo = self.path.split("/api/models/", 1)[-1].split("?")[0]
        if repo == KNOWN:
            body, code, headers = json.dumps({"id": KNOWN, "modelId": KNOWN, "sha": "0" * 40}).encode(), 200, {}
        else:
            body, code, headers = b'{"error": "Repository not found"}', 404, {"X-Error-Code": "RepoNotFound"}
        self.send_response(code)
        for k, v in {"Content-Type": "application/json", **headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A hub on 127.0.0.1 (its URL), an empty Hugging Face cache, HF_HUB_OFFLINE unset and
    no hub id remembered from another test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", url)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(models, "_HUB_OK", set())
    _Hub.asked = []
    yield url
    server.shutdown()
    server.server_close()


def _cached(tmp_path, repo: str, file: str = "config.json") -> None:
    """``repo`` in the Hugging Face cache layout, as a download leaves it."""
    root = tmp_path / "hf-cache" / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("a" * 40)
    (root / "snapshots" / ("a" * 40)).mkdir(parents=True)
    (root / "snapshots" / ("a" * 40) / file).write_text("{}")


def test_packaged_names_and_local_directories_need_no_hub(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in models.PACKAGED_MODELS:
        assert check_model_name("drafter.model", name) == "packaged"
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "config.json").write_text("{}")
    assert check_model_name("drafter.model", str(tmp_path / "tuned")) == "local"
    assert check_model_name("retrieval.embedding_model", "all-minilm-l6-v2",
                            packaged=["all-MiniLM-L6-v2"], ignore_case=True) == "packaged"
    assert _Hub.asked == []


def test_a_directory_without_a_model_and_an_overlong_name_are_one_line(hub, monkeypatch, tmp_path):
    """A directory holding no model (``/etc``, ``.``) and a 300-character name (too long for a
    file name) are each a one-line ModelNameError naming the field, before anything loads,
    not an engine-load failure or an OSError traceback."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNameError, match=r"drafter.model: .* is a directory without a model: no config.json"):
        check_model_name("drafter.model", str(tmp_path))
    (tmp_path / "modules.json").write_text("[]")  # a sentence-transformers directory
    assert check_model_name("retrieval.embedding_model", str(tmp_path), packaged=[],
                            cache_file="modules.json") == "local"
    with pytest.raises(ModelNameError, match="drafter.model: 'aaaa.* cannot be used: not a packaged model"):
        check_model_name("drafter.model", "a" * 300)
    assert _Hub.asked == []


@pytest.mark.parametrize("name, why", [
    ("no-such-model", "not a packaged model, not an existing local directory, and not a hub id (owner/name)"),
    ("Qwen2.5-Coder-0.5B-Instruct", "not a hub id"),  # resolve_model matches packaged names exactly
    ("/nowhere/at/all", "not a hub id"),
    ("a/b/c", "not a hub id"),
])
def test_a_name_that_is_none_of_the_three_is_refused_in_one_line(hub, name, why):
    with pytest.raises(ModelNameError) as e:
        check_model_name("drafter.model", name)
    msg = str(e.value)
    assert msg.startswith(f"drafter.model: {name!r} cannot be used: ") and why in msg and "\n" not in msg
    assert all(p in msg for p in models.PACKAGED_MODELS) and "local model directory" in msg and "owner/name" in msg
    assert _Hub.asked == []  # decided without the hub


def test_a_file_is_not_a_model_directory(hub, tmp_path):
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelNameError, match="a file, not a model directory"):
        check_model_name("verifier.model", str(tmp_path / "model.gguf"))


def test_a_hub_id_is_asked_once_and_an_unknown_one_refused(hub):
    assert check_model_name("verifier.model", KNOWN) == "hub"
    assert check_model_name("verifier.model", KNOWN) == "hub"
    assert _Hub.asked == [f"/api/models/{KNOWN}"]  # found once: remembered for this process
    with pytest.raises(ModelNameError, match=r"verifier.model: 'someone/typo' cannot be used: .*hub has no such model"):
        check_model_name("verifier.model", "someone/typo")


def test_a_hub_id_without_hub_fails_closed_fast_unless_cached(hub, monkeypatch, tmp_path):
    """HF_HUB_OFFLINE or a hub that does not answer: refused at once, naming why; a hub id in
    the local cache is usable offline (vLLM and sentence-transformers load it from there)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNameError, match="HF_HUB_OFFLINE is set and it is not in the local Hugging Face cache"):
        check_model_name("drafter.model", KNOWN)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    t0 = time.perf_counter()
    with pytest.raises(ModelNameError, match=r"hub could not be asked \(ConnectError: .*; the check waits at most 10 s\)"):
        check_model_name("drafter.model", KNOWN)
    assert time.perf_counter() - t0 < 5
    _cached(tmp_path, KNOWN)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert check_model_name("drafter.model", KNOWN) == "hub"
    _cached(tmp_path, "someone/embedder", "modules.json")
    cfg = RunConfig.model_validate({"retrieval": {"embedding_model": "someone/embedder"}})
    assert check_config_models(cfg)["retrieval.embedding_model"] == "hub"
    assert _Hub.asked == []


def test_the_models_a_run_loads_are_the_ones_checked(hub):
    bad = "no-such-model"
    with pytest.raises(ModelNameError, match="^drafter.model: "):
        check_config_models(RunConfig.model_validate({"drafter": {"model": bad}}))
    with pytest.raises(ModelNameError, match="^verifier.model: "):
        check_config_models(RunConfig.model_validate({"mode": "standard", "verifier": {"model": bad}}))
    with pytest.raises(ModelNameError, match="^retrieval.embedding_model: .*all-MiniLM-L6-v2"):
        check_config_models(RunConfig.model_validate({"retrieval": {"embedding_model": bad}}))
    # not loaded, not checked: the drafter of Standard RAG, the embedder of random subsets
    assert check_config_models(RunConfig.model_validate({"mode": "standard", "drafter": {"model": bad}})) == \
        {"verifier.model": "packaged"}
    assert "retrieval.embedding_model" not in check_config_models(RunConfig.model_validate(
        {"sampling": {"strategy": "random"}, "retrieval": {"embedding_model": bad}}))
    # the default selection (log ρ_draft alone) never loads the verifier: not checked either
    assert check_config_models(RunConfig()) == {"drafter.model": "packaged", "retrieval.embedding_model": "packaged"}
    assert check_config_models(RunConfig.model_validate({"selection": {"use_self_reflection": True}})) == \
        {"drafter.model": "packaged", "verifier.model": "packaged", "retrieval.embedding_model": "packaged"}
    assert check_config_models(RunConfig.model_validate({"verifier": {"model": bad}})) == \
        {"drafter.model": "packaged", "retrieval.embedding_model": "packaged"}


def test_run_with_a_bad_model_exits_2_in_one_line_writing_nothing(hub, monkeypatch, tmp_path):
    """A run naming a model that does not exist: exit 2 with one line naming the field, value
    and choices, before the flow starts (no Prefect, no engine), and no output directory; the
    corrected command then finds no key refusing it."""
    monkeypatch.setattr(cli.console, "width", 2000)
    monkeypatch.setattr(cli.err_console, "width", 2000)
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["?"], "task": ["qa"]}), inp / "a.parquet")
    for name in ("no-such-model", "nobody/no-such-model"):
        r = CliRunner().invoke(app, ["run", "--config", DEMO, "--drafter", name, "-i", str(inp), "-o", str(out)])
        assert r.exit_code == 2, (r.output, r.exception)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: --drafter: drafter.model: {name!r} cannot be used"), r.output
        assert "Traceback" not in r.output
        assert r.stdout == "" and r.stderr == r.output  # the error line goes to standard error
        assert not out.exists()
    assert resume.check_output(str(out), str(inp), RunConfig().config_hash()) is None


def test_every_unusable_model_is_named_at_once(hub, monkeypatch, tmp_path):
    """Drafter and verifier both unusable: one line each, in config order, in one exit 2 (a
    user fixes both in one pass instead of meeting the second on the next try)."""
    monkeypatch.setattr(cli.err_console, "width", 2000)
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    inp = tmp_path / "in"
    inp.mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["?"], "task": ["qa"]}), inp / "a.parquet")
    r = CliRunner().invoke(app, ["run", "--config", DEMO, "--drafter", "no-such-drafter",
                                 "--verifier", "no-such-verifier", "-i", str(inp), "-o", str(tmp_path / "out")])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 2, r.output
    assert lines[0].startswith("error: --drafter: drafter.model: 'no-such-drafter' cannot be used"), lines
    assert lines[1].startswith("--verifier: verifier.model: 'no-such-verifier' cannot be used"), lines
    cfg = RunConfig.model_validate({"drafter": {"model": "no-such-drafter"}})
    with pytest.raises(ModelNameError, match=r"^drafter.model: 'no-such-drafter' cannot be used[^\n]*$"):
        check_config_models(cfg)  # one bad model: one line


def test_claims_checks_the_models_before_its_flow(hub, monkeypatch, tmp_path):
    from specrag_batch.run import claim_verification

    reached = []

    def flow(*a, **k):
        reached.append(k["config_path"])
        raise RuntimeError("the flow ran")
    monkeypatch.setattr(claim_verification, "claim_verification_flow", flow)
    r = CliRunner().invoke(app, ["claims", "-i", str(tmp_path), "-o", str(tmp_path / "o"), "-c", DEMO])
    assert r.exit_code == 1 and reached == [DEMO], r.output  # packaged models: on to the flow
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("verifier:\n  model: no-such-model\n")
    r = CliRunner().invoke(app, ["claims", "-i", str(tmp_path), "-o", str(tmp_path / "o"), "-c", str(cfg)])
    assert r.exit_code == 2 and f"{cfg}: verifier.model: 'no-such-model' cannot be used" in " ".join(r.output.split())
    assert reached == [DEMO]


def test_a_model_error_names_the_config_file_or_flag_it_came_from(hub, monkeypatch, tmp_path):
    """A model named in a config file is refused with that file's name, one named by a flag
    with the flag (as the config's own error lines), so a user with several configs knows
    which one to fix; before the flow starts, writing nothing."""
    monkeypatch.setattr(cli.err_console, "width", 2000)
    monkeypatch.setattr(orchestration, "run_flow", lambda *a, **k: pytest.fail("the flow started"))
    inp, out, cfg = tmp_path / "in", tmp_path / "out", tmp_path / "nightly b.yaml"
    inp.mkdir()
    pq.write_table(pa.table({"query_id": ["q"], "query": ["?"], "task": ["qa"]}), inp / "a.parquet")
    cfg.write_text("drafter:\n  model: no-such-drafter\nverifier:\n  model: no-such-verifier\n")
    r = CliRunner().invoke(app, ["run", "-c", str(cfg), "--verifier", "also-no-verifier", "-i", str(inp), "-o", str(out)])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 2, r.output
    assert lines[0].startswith(f"error: {cfg}: drafter.model: 'no-such-drafter' cannot be used"), lines
    assert lines[1].startswith("--verifier: verifier.model: 'also-no-verifier' cannot be used"), lines
    assert not out.exists()
    direct = RunConfig.model_validate({"drafter": {"model": "no-such-drafter"}})
    assert direct.field_source("drafter.model") is None  # built in code: no source to name
    # a default is not blamed on a file that never set it
    from specrag_batch.config import read_run_config
    only_drafter = tmp_path / "only-drafter.yaml"
    only_drafter.write_text("drafter:\n  model: no-such-drafter\n")
    read = read_run_config(only_drafter, {"verifier.max_tokens": 8}, {"verifier.max_tokens": "--verifier-max-tokens"})
    assert read.field_source("drafter.model") == str(only_drafter)
    assert read.field_source("verifier.model") is None and read.field_source("retrieval.top_n") is None
    assert read.field_source("verifier.max_tokens") == "--verifier-max-tokens"
    assert read_run_config(None).field_source("drafter.model") is None  # no file, no flag: the default
    budget_only = tmp_path / "budget-only.yaml"
    budget_only.write_text("drafter:\n  max_tokens: 32\n")
    assert read_run_config(budget_only).field_source("drafter.model") is None  # a sibling key set, not this one
    assert read == RunConfig.model_validate(read.model_dump())  # provenance is not part of equality
