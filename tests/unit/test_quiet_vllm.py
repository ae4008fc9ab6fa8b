"""Known-benign vLLM WARNING records of a CPU engine start are lowered to DEBUG; any other vLLM
warning still reaches vLLM's handler (issue 14 item 4). No engine: the records are logged on
the real vLLM logger names, with vLLM's own layout (one handler on the ``vllm`` logger,
``propagate=False``), and the message templates are checked against the installed vLLM source.
Every engine start demoted: tests/integration/test_quiet_vllm.py."""

from __future__ import annotations

import ast
import importlib.util
import logging
from pathlib import Path

import pytest

from specrag_batch.core import quiet


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)  # vLLM's handler level: VLLM_LOGGING_LEVEL
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def vllm_handler():
    """A handler on the ``vllm`` logger as vLLM's dictConfig sets it up (state restored)."""
    root = logging.getLogger("vllm")
    names = {n for n, _ in quiet.BENIGN_VLLM} | {"vllm.v1.worker.gpu_worker"}
    saved = (root.level, root.propagate, list(root.handlers),
             {n: list(logging.getLogger(n).filters) for n in names})
    handler = _Collect()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    root.propagate = False
    quiet._hinted.clear()
    yield handler
    root.setLevel(saved[0])
    root.propagate = saved[1]
    root.handlers[:] = saved[2]
    for n, filters in saved[3].items():
        logging.getLogger(n).filters[:] = filters


def _log_benign():
    cpu = logging.getLogger("vllm.v1.worker.cpu_worker")
    cpu.warning("CPU backend doesn't allow to use `torch.set_num_threads` after the thread binding, skip it.")
    cpu.warning("%s is not found in LD_PRELOAD. For best performance, please follow the section "
                "`set LD_PRELOAD` in https://docs.vllm.ai/en/latest/getting_started/installation/cpu/ "
                "to setup required pre-loaded libraries.", "libtcmalloc")
    cpu.warning("%s is not found in LD_PRELOAD. For best performance, ...", "libiomp")
    logging.getLogger("vllm.engine.arg_utils").warning(
        "The global random seed is set to %d. Since VLLM_ENABLE_V1_MULTIPROCESSING is set to "
        "False, this may affect the random state of the Python process that launched vLLM.", 0)


def test_benign_records_are_suppressed_and_unknown_warnings_pass(vllm_handler, caplog):
    quiet.demote_benign_vllm()
    quiet.demote_benign_vllm()  # idempotent: one filter per logger
    assert sum(isinstance(f, quiet._DemoteBenign)
               for f in logging.getLogger("vllm.v1.worker.cpu_worker").filters) == 1
    with caplog.at_level(logging.INFO, logger="specrag_batch.engines.engine"):
        _log_benign()
        _log_benign()  # a second engine start
    assert vllm_handler.records == []
    # an unknown warning from the same logger, another vLLM logger, and an error all pass
    logging.getLogger("vllm.v1.worker.cpu_worker").warning("Speculative decoding on CPU without Intel OpenMP ...")
    logging.getLogger("vllm.engine.arg_utils").warning("The seed is odd")
    logging.getLogger("vllm.v1.worker.gpu_worker").error("CPU backend doesn't allow to use `torch.set_num_threads`")
    assert [(r.name, r.levelname, r.getMessage()) for r in vllm_handler.records] == [
        ("vllm.v1.worker.cpu_worker", "WARNING", "Speculative decoding on CPU without Intel OpenMP ..."),
        ("vllm.engine.arg_utils", "WARNING", "The seed is odd"),
        ("vllm.v1.worker.gpu_worker", "ERROR", "CPU backend doesn't allow to use `torch.set_num_threads`"),
    ]
    # the LD_PRELOAD performance hint stays visible once per library, at INFO, on the product's logger
    hints = [r for r in caplog.records if r.name == "specrag_batch.engines.engine"]
    assert [(r.levelname, r.getMessage().split(";")[0]) for r in hints] == [
        ("INFO", "vLLM CPU: libtcmalloc is not in LD_PRELOAD"),
        ("INFO", "vLLM CPU: libiomp is not in LD_PRELOAD"),
    ]


def test_demoted_records_show_at_debug_when_vllm_logs_debug(vllm_handler):
    quiet.demote_benign_vllm()
    logging.getLogger("vllm").setLevel(logging.DEBUG)
    vllm_handler.setLevel(logging.DEBUG)
    _log_benign()
    assert [r.levelname for r in vllm_handler.records] == ["DEBUG"] * 4


def _string_constants(module: str) -> list[str]:
    """String literals of an installed vLLM module, read from its source (vLLM not imported)."""
    base = Path(importlib.util.find_spec("vllm").origin).parent
    path = base.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


@pytest.mark.parametrize("logger_name,prefix", quiet.BENIGN_VLLM)
def test_installed_vllm_still_logs_each_demoted_message(logger_name, prefix):
    """A vLLM upgrade that rewords a message would let it through again: this says so."""
    assert any(s.startswith(prefix) for s in _string_constants(logger_name))


def test_engine_start_messages_of_the_cpu_build_are_demoted_but_a_users_unknown_variable_is_not(vllm_handler):
    quiet.demote_benign_vllm()
    cfg = logging.getLogger("vllm.config.vllm")
    cfg.warning("Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. ...")
    cfg.warning("Inductor compilation was disabled by user settings, optimizations ...")
    cfg.warning("Model Runner V2 requires Triton; using the V1 model runner instead.")
    logging.getLogger("vllm.platforms.cpu").warning("Triton is not installed. triton-cpu is expected on x86 CPUs.")
    logging.getLogger("vllm.triton_utils.dispatcher").warning("Kernel %s is already registered. Overwriting.", "k")
    env = logging.getLogger("vllm.platforms.interface")
    env.warning("Unknown vLLM environment variable detected: %s", "VLLM_DIST_IDENT")  # set by vLLM itself
    assert vllm_handler.records == []
    env.warning("Unknown vLLM environment variable detected: %s", "VLLM_CPU_KVCACHE_SPAC")  # a user's typo
    assert [r.getMessage() for r in vllm_handler.records] == [
        "Unknown vLLM environment variable detected: VLLM_CPU_KVCACHE_SPAC"]


SSM_RESET = "Reset SSM cache type to float32 for accelerated GDN mamba backend '%s'."
"""vLLM's template (vllm/platforms/cpu.py), logged on a CPU with avx512_bf16 at engine start."""


def test_the_ssm_cache_reset_is_demoted_for_models_without_ssm_state_only(vllm_handler):
    quiet.demote_benign_vllm()
    cpu = logging.getLogger("vllm.platforms.cpu")
    cpu.warning(SSM_RESET, "none")  # Qwen2.5 / SmolLM2: no SSM state, the dtype is never used
    assert vllm_handler.records == []
    cpu.warning(SSM_RESET, "qwen3_next")  # a model with SSM layers: a real change, shown
    assert [(r.levelname, r.getMessage()) for r in vllm_handler.records] == [
        ("WARNING", "Reset SSM cache type to float32 for accelerated GDN mamba backend 'qwen3_next'.")]
