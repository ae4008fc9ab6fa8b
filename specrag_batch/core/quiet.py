"""Quiet, offline-friendly runs: telemetry off by default, known-benign warnings silenced.

**Telemetry.**
Prefect's server sends an anonymous heartbeat to ``https://sens-o-matic.prefect.io/`` every
10 minutes (``prefect.server.services.telemetry``, setting ``PREFECT_SERVER_ANALYTICS_ENABLED``;
the ephemeral server of a CLI run inherits this process's environment) and logs ``ERROR Failed
to send telemetry`` when the network refuses it; the Prefect SDK, vLLM and huggingface_hub
send usage events unless ``DO_NOT_TRACK`` is set. The product's own setting
``SPECRAG_TELEMETRY`` (default ``0``) decides for all of them:

* ``0``/unset: ``PREFECT_SERVER_ANALYTICS_ENABLED=false`` and ``DO_NOT_TRACK=1`` are set as
  defaults of this process (and of the processes it starts). A value the user exported
  themselves is kept.
* ``1``: nothing is changed; each library's own settings apply (Prefect profile, ...).

Applied when :mod:`specrag_batch` is imported, i.e. before any flow run starts Prefect's
ephemeral server.

**Benign warnings** (:func:`silence_benign`): messages a normal CPU run printed at WARNING
level although nothing is wrong, each silenced by its exact source and text only:

* vLLM's ``triton_utils/dispatcher.py`` probes ``torch.distributed.reduce_op`` and torch
  answers with a ``FutureWarning`` that it is deprecated (library internals; nothing a user
  can change);
* torch's ``torch._library.triton`` logs "Triton not available" at WARNING: the CPU build has
  no Triton by design.

**Benign vLLM log records** (:func:`demote_benign_vllm`, installed by
:func:`specrag_batch.engines.engine.get_engine` before it creates an engine): records of a normal CPU
engine start that vLLM logs at WARNING, matched by logger name and the start of the message
template (:data:`BENIGN_VLLM`), are lowered to DEBUG (shown only when that logger is enabled
for DEBUG, e.g. ``VLLM_LOGGING_LEVEL=DEBUG``); every other vLLM record passes unchanged:

* ``vllm.v1.worker.cpu_worker``: "CPU backend doesn't allow to use `torch.set_num_threads`
  after the thread binding, skip it." (vLLM replaces ``torch.set_num_threads`` once it has
  bound the OpenMP threads; each later call, e.g. by sentence-transformers, logs this);
* ``vllm.engine.arg_utils``: "The global random seed is set to ..." (in-process engines,
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which :func:`~specrag_batch.engines.engine.configure_cpu_env`
  sets on purpose; the product's own sampling uses its own seeded generators);
* ``vllm.v1.worker.cpu_worker``: "libtcmalloc / libiomp is not found in LD_PRELOAD": a
  performance hint, not a fault. It stays visible once per library and process at INFO on
  the ``specrag_batch.engines.engine`` logger (docs/operations.md, "Quiet logs");
* ``vllm.platforms.cpu``: "Reset SSM cache type to float32 for accelerated GDN mamba backend
  'none'." (a CPU with ``avx512_bf16``; backend ``none``: the model has no SSM state, so the
  setting is never used; another backend stays a WARNING).

Every vLLM engine of the product is built by ``engines.get_engine`` (``run``, ``drafter data``'s
teacher, the drafter-training flow's evaluation), which installs the demotion first;
``drafter train`` (TRL/PEFT) neither imports nor starts vLLM.
"""

from __future__ import annotations

import logging
import os
import warnings

SETTING = "SPECRAG_TELEMETRY"
OFF_DEFAULTS = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}


def telemetry_enabled(environ: os._Environ | dict | None = None) -> bool:
    """True when ``SPECRAG_TELEMETRY`` is ``1``/``true``/``yes``/``on`` (case-insensitive)."""
    env = os.environ if environ is None else environ
    return env.get(SETTING, "0").strip().lower() in ("1", "true", "yes", "on")


def apply_default(environ: os._Environ | dict | None = None) -> dict[str, str]:
    """Unless telemetry is enabled, set :data:`OFF_DEFAULTS` where not already set.

    Returns the variables this call set (empty when telemetry is on or all were set)."""
    env = os.environ if environ is None else environ
    if telemetry_enabled(env):
        return {}
    added = {k: v for k, v in OFF_DEFAULTS.items() if k not in env}
    env.update(added)
    return added


def silence_benign() -> None:
    """Install the filters for the known-benign warnings listed in the module docstring
    (idempotent; other warnings from the same libraries still show)."""
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.reduce_op` is deprecated",
                            category=FutureWarning)
    logging.getLogger("torch._library.triton").addFilter(_triton_unavailable)


BENIGN_VLLM: tuple[tuple[str, str], ...] = (
    ("vllm.v1.worker.cpu_worker", "CPU backend doesn't allow to use `torch.set_num_threads`"),
    ("vllm.engine.arg_utils", "The global random seed is set to "),
    ("vllm.v1.worker.cpu_worker", "%s is not found in LD_PRELOAD."),
    # engine start on the CPU build: the product sets enforce_eager on CPU on purpose
    # (engines.py), the CPU wheel ships no Triton, so these describe the expected set-up
    ("vllm.config.vllm", "Enforce eager set, disabling torch.compile"),
    ("vllm.config.vllm", "Inductor compilation was disabled by user settings"),
    ("vllm.config.vllm", "Model Runner V2 requires Triton; using the V1 model runner"),
    ("vllm.platforms.cpu", "Triton is not installed."),
    # the second engine of a process (drafter + verifier): vLLM re-registers its kernels
    ("vllm.triton_utils.dispatcher", "Kernel %s is already registered."),
    # vLLM's own CPU worker sets VLLM_DIST_IDENT, then the next engine's check calls it
    # unknown; only that variable is demoted (:data:`BENIGN_VLLM_ARGS`), a user's typo is not
    ("vllm.platforms.interface", "Unknown vLLM environment variable detected: %s"),
    # a CPU with avx512_bf16 (vllm/platforms/cpu.py check_and_update_config): the SSM state
    # cache dtype is set to float32 for every model, but backend 'none' means the model has no
    # Mamba/SSM state (no inner state, no linear-attention layers: Qwen2.5, SmolLM2, Gemma are
    # attention only), so no cache of that dtype is ever allocated. Only 'none' is demoted
    # (:data:`BENIGN_VLLM_ARGS`); for a model with SSM layers the change is real and shown
    ("vllm.platforms.cpu", "Reset SSM cache type to float32 for accelerated GDN mamba backend '%s'."),
)
"""(logger name, start of the message template ``record.msg``) of the vLLM WARNING records
that :func:`demote_benign_vllm` lowers to DEBUG; the templates are vLLM 0.32's
(``tests/unit/test_quiet_vllm.py`` checks that the installed vLLM still logs them)."""

BENIGN_VLLM_ARGS: dict[str, tuple] = {
    "Unknown vLLM environment variable detected: %s": ("VLLM_DIST_IDENT",),
    "Reset SSM cache type to float32 for accelerated GDN mamba backend '%s'.": ("none",),
}
"""Message templates of :data:`BENIGN_VLLM` that are benign only with these exact arguments."""

_LD_PRELOAD_HINT = "%s is not found in LD_PRELOAD."
_hinted: set[str] = set()


class _DemoteBenign(logging.Filter):
    """Logger filter: a record in :data:`BENIGN_VLLM` becomes DEBUG (dropped unless its logger
    is enabled for DEBUG); other records pass unchanged."""

    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not isinstance(record.msg, str) \
                or not record.msg.startswith(self.prefixes):
            return True
        if record.msg in BENIGN_VLLM_ARGS and tuple(record.args or ()) != BENIGN_VLLM_ARGS[record.msg]:
            return True
        if record.msg.startswith(_LD_PRELOAD_HINT):
            _hint_once(record.getMessage())
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _hint_once(message: str) -> None:
    lib = message.split(" ", 1)[0]
    if lib not in _hinted:
        _hinted.add(lib)
        logging.getLogger("specrag_batch.engines.engine").info(
            "vLLM CPU: %s is not in LD_PRELOAD; preloading it can speed up CPU engines "
            "(docs/operations.md, 'Quiet logs')", lib)


def demote_benign_vllm() -> None:
    """Install the filter lowering :data:`BENIGN_VLLM` records to DEBUG on each logger named
    there (idempotent). The filter sits on the emitting logger itself: vLLM's handler hangs on
    the ``vllm`` logger, and a parent logger's filters never see records of its children."""
    by_logger: dict[str, list[str]] = {}
    for name, prefix in BENIGN_VLLM:
        by_logger.setdefault(name, []).append(prefix)
    for name, prefixes in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DemoteBenign) for f in logger.filters):
            logger.addFilter(_DemoteBenign(tuple(prefixes)))


def _triton_unavailable(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Triton not available")
