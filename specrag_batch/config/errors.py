"""A config that does not validate, for people: one line per error naming the file or the
command-line flag, the field and the message (CLI exit 2)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .loading import load_config
from .run_config import RunConfig, flag_for, flags_given
from .base import YAML_BOOLEANS


class ConfigError(ValueError):
    """A run config that does not validate, for people: one line per error,
    ``<source>: <field path>: <message>`` (:func:`explain_config_error`). CLI exit 2."""


def _string_hint(value: Any) -> str:
    """What YAML read instead of the text a string field needs, and the fix (quote it): an
    unquoted ``null``/``~``/empty value, a date, a boolean word or a number."""
    import datetime

    if value is None:
        return " (got null: YAML reads null, ~ and an empty value so; quote the text, or leave the key out for the default)"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f" (got the date {value.isoformat()}: YAML reads an unquoted date so; quote it)"
    if isinstance(value, bool):
        return f" (got {value!r}: {YAML_BOOLEANS.strip('()')}; quote it)"
    if isinstance(value, (int, float)):
        return f" (got the number {value!r}; quote it for text)"
    return ""


def _error_line(err: dict, source: str, flagged: dict[str, str]) -> str:
    """One pydantic error (``ValidationError.errors()`` item) as ``<source>: <field>: <msg>``:
    pydantic's ``Value error, `` prefix dropped; an unknown key's path is the field
    (``drafter.max_tokenz: unknown key; did you mean 'max_tokens'?``); a scalar input value shown as ``(got ...)``;
    ``source`` replaced by the flag when the field was given on the command line (``flagged``:
    dotted field -> flag)."""
    field = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", ""))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    unknown = re.match(r"unknown key '([^']*)'(.*)", msg, re.S)  # Strict._known_keys: the key's path
    if unknown:
        field, msg = ".".join(x for x in (field, unknown.group(1)) if x), "unknown key" + unknown.group(2)
    value = err.get("input")
    if err.get("type") == "string_type":
        msg += _string_hint(value)
    elif err.get("type") != "value_error" and isinstance(value, (bool, int, float, str)) and len(repr(value)) <= 60:
        msg += f" (got {value!r})"
    return ": ".join(x for x in (flag_for(field, flagged) or source, field, msg) if x)


def explain_config_error(error: Any, path: str | Path | None = None,
                         overrides: dict[str, Any] | None = None,
                         flags: dict[str, str] | None = None) -> ConfigError:
    """A :class:`ConfigError` for pydantic's ``ValidationError`` ``error`` raised by
    :func:`load_config` (``path``, ``overrides`` as given to it): one line per error,
    ``<config file>: <field path>: <message>`` (``config`` when no file was given; the flag,
    from ``flags`` (dotted field -> flag name) or ``command line``, for a field an override
    set), without pydantic's input dump and documentation link, keeping the validators'
    hints (``did you mean 'num_drafts'?``)."""
    source = str(path) if path is not None else "config"
    given = flags_given(overrides, flags)
    return ConfigError("\n".join(_error_line(e, source, given) for e in error.errors()))


def read_run_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                    flags: dict[str, str] | None = None) -> RunConfig:
    """:func:`load_config` for commands: a config that does not validate raises
    :class:`ConfigError` (:func:`explain_config_error`) instead of pydantic's ValidationError.

    Raises:
        ConfigError: a field is unknown or out of range, one line per error naming the file.
        FileNotFoundError, ValueError: as :func:`load_config`.

    The config returned knows where each value came from (:meth:`RunConfig.field_source`)."""
    from pydantic import ValidationError

    try:
        cfg = load_config(path, overrides)
    except ValidationError as e:
        raise explain_config_error(e, path, overrides, flags) from None
    return note_sources(cfg, overrides, flags)


def note_sources(cfg: RunConfig, overrides: dict[str, Any] | None = None,
                 flags: dict[str, str] | None = None) -> RunConfig:
    """Record on ``cfg`` (returned, the same object) which fields command-line flags set, as
    :func:`load_config` applied ``overrides`` (``flags``: dotted field -> flag name), for
    :meth:`RunConfig.field_source` (:func:`load_config` records the file's own keys)."""
    cfg._flagged = flags_given(overrides, flags)
    return cfg
