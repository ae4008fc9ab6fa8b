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


def _triton_unavailable(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Triton not available")
