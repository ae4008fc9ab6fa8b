"""Secrets never reach the output bucket or the logs: redaction of settings before they are
written (``_run.json``, ``_manifest.json``, the flow's return value) or logged.

What counts as a secret (the rule, applied to every mapping key and every string value at any
depth of a settings mapping, e.g. ``execution.shard_resources.runtime_env.env_vars``,
``execution.ray_init_kwargs``, ``drafter.engine_kwargs``):

* a **key** starting with ``AWS_`` (any case; e.g. ``AWS_SECRET_ACCESS_KEY``, and also the
  harmless ``AWS_REGION``: over-redacting a region costs nothing, the hash still compares);
* a **key** one of whose words (split at ``_``, ``-``, ``.``, spaces and camelCase) is
  ``token``, ``secret``, ``password``, ``passwd``, ``pwd``, ``credential(s)``, ``key``,
  ``apikey``, ``auth``, ``authorization``, ``cookie``, ``signature``, ``private`` or
  ``passphrase``. Whole words only: ``max_tokens``, ``top_k``, ``keep_drafts``,
  ``kmeans_n_init`` or ``monkey`` are *not* secrets (``tokens`` is a length, ``token`` is a
  credential);
* a **value** whose text looks like a credential whatever its key: an AWS access key id
  (``AKIA``/``ASIA`` + 16 characters), a Hugging Face (``hf_...``) or GitHub (``ghp_...``,
  ``github_pat_...``) token, ``Bearer <token>``, a PEM private key block;
* inside any string, the password of a URL with ``user:password@`` (only the password is
  replaced; scheme, user, host and path stay readable).

A redacted value becomes ``<redacted sha256:<first 12 hex of sha256(value)>>``: two runs can
still be compared (same secret, same marker) without the secret being recoverable from a
short hash of a high-entropy credential. Non-string secret values are hashed from their JSON
text. Redaction is a pure function: the settings a run *uses* are never changed, only what is
written or logged.
"""

from __future__ import annotations

import hashlib
import logging
import json
import re
from typing import Any

SECRET_WORDS = frozenset({
    "token", "secret", "password", "passwd", "pwd", "credential", "credentials", "key", "apikey",
    "auth", "authorization", "cookie", "signature", "private", "passphrase"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?!<redacted )(?P<pw>[^@/\s]+)(?=@)")
_SECRET_VALUE = re.compile(
    r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"             # AWS access key id
    r"|\bhf_[A-Za-z0-9]{20,}\b"                   # Hugging Face token
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}\b|\bgithub_pat_[A-Za-z0-9_]{20,}\b"
    r"|\bBearer\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)")
REDACTED_PREFIX = "<redacted sha256:"


def fingerprint(value: Any) -> str:
    """``<redacted sha256:<12 hex>>`` of a secret value (strings hashed as UTF-8, other values
    as their sorted-key JSON text). Same value, same marker."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return f"{REDACTED_PREFIX}{hashlib.sha256(text.encode()).hexdigest()[:12]}>"


def is_secret_key(key: Any) -> bool:
    """True when a mapping key names a secret (see the module docstring for the rule)."""
    if not isinstance(key, str):
        return False
    if key.upper().startswith("AWS_"):
        return True
    return any(w.lower() in SECRET_WORDS for w in _WORD_SPLIT.split(key) if w)


def redact_text(text: str) -> str:
    """``text`` with URL passwords and credential-looking substrings replaced by their
    :func:`fingerprint` (everything else unchanged)."""
    if text.startswith(REDACTED_PREFIX):
        return text
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + fingerprint(m.group("pw")), text)
    return _SECRET_VALUE.sub(lambda m: fingerprint(m.group(0)), text)


def redact(value: Any) -> Any:
    """A copy of ``value`` (mappings, lists, tuples, strings, scalars; any depth) with every
    secret replaced by its :func:`fingerprint`: values under secret keys as a whole, and
    secret-looking parts of other strings. Mapping keys themselves are kept."""
    if isinstance(value, dict):
        return {k: (fingerprint(v) if is_secret_key(k) and v not in (None, "", {}, [])
                    and not (isinstance(v, str) and v.startswith(REDACTED_PREFIX)) else redact(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that applies :func:`redact_text` to each record's formatted message
    (and drops its args when that changes it), so secrets in URIs or error texts never reach a log handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always True (the record is kept)."""
        msg = record.getMessage()
        clean = redact_text(msg)
        if clean != msg:
            record.msg, record.args = clean, ()
        return True


RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def install_log_filter(names: tuple[str, ...] = RUN_LOGGERS) -> None:
    """Attach one :class:`RedactingFilter` to each named logger (idempotent). The defaults are
    the loggers behind Prefect's ``get_run_logger()``, whose records go to the console and to
    the Prefect API (the flow run's logs in the UI)."""
    for name in names:
        lg = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in lg.filters):
            lg.addFilter(RedactingFilter())
