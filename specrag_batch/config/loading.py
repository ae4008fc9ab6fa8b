"""Loading a run config from YAML (local path or storage URI) and dotted-key overrides, refusing
what YAML reads other than written (non-string keys, duplicate keys, octal integers, sets,
alias bombs) before pydantic validates it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .run_config import RunConfig
from .base import YAML_BOOLEANS


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


MAX_YAML_NODES = 100_000
"""Most YAML nodes a config file may expand to through aliases (:func:`_yaml_problems`): a
real config has a few hundred; a few hundred bytes of nested aliases (a "billion laughs"
file) expand to millions and took seconds and a gigabyte before this limit."""

_YAML_TAG = "tag:yaml.org,2002:"
_DECIMAL_INT = re.compile(r"[-+]?(0|[1-9][0-9_]*)")


def _yaml_problems(text: str) -> list[str]:
    """One message per construct of the YAML ``text`` that YAML would read other than a reader
    expects, each naming the line and the dotted path as the file spells it (the node tree of
    ``yaml.compose`` keeps spellings and lines):

    * a mapping key that is not a string (``on:``/``yes:`` become the key ``True``, ``3:`` the
      key ``3``, which no config field has);
    * a key given twice in one mapping (YAML keeps the last one silently); merge keys
      (``<<: *base``) are YAML's own and pass, the keys written beside them override them;
    * an integer not in plain decimal (``010`` is 8 in YAML 1.1, ``0x3``, ``1:30`` is 90);
    * a ``!!set`` (no order: the labels' order and the config hash would change per process);
    * more than :data:`MAX_YAML_NODES` nodes once aliases are expanded (then the walk stops).

    Raises:
        yaml.YAMLError: ``text`` is not valid YAML (the caller names the file)."""
    out: list[str] = []
    seen = 0

    def where_of(path: str, node: Any) -> str:
        return f"line {node.start_mark.line + 1}: {path or '(top level)'}"

    def walk(node: Any, path: str) -> bool:  # False: stop (too many nodes)
        nonlocal seen
        seen += 1
        if seen > MAX_YAML_NODES:
            out.append(f"more than {MAX_YAML_NODES:,} YAML nodes once aliases are expanded "
                       "(nested aliases?); write the config out")
            return False
        if node.tag == _YAML_TAG + "set":
            out.append(f"{where_of(path, node)}: a YAML set (!!set) has no order; write a list")
        if isinstance(node, yaml.ScalarNode) and node.tag == _YAML_TAG + "int" \
                and not _DECIMAL_INT.fullmatch(node.value):
            out.append(f"{where_of(path, node)}: YAML reads {node.value!r} as the integer "
                       f"{yaml.safe_load(node.value)!r} (octal, hex or base 60); write it in decimal, "
                       f"or quote it for a string")
        if isinstance(node, yaml.SequenceNode):
            return all(walk(item, f"{path}[{n}]") for n, item in enumerate(node.value))
        if not isinstance(node, yaml.MappingNode):
            return True
        keys: dict[str, Any] = {}
        for key, value in node.value:
            if key.tag == _YAML_TAG + "merge":
                continue  # '<<': the merged mapping is walked where its anchor is
            spelt = key.value if isinstance(key, yaml.ScalarNode) else "<a mapping or list>"
            here = f"{path}.{spelt}" if path else str(spelt)
            if isinstance(key, yaml.ScalarNode) and key.tag == _YAML_TAG + "str":
                if spelt in keys:
                    out.append(f"{where_of(here, key)}: key given twice (also at line "
                               f"{keys[spelt].start_mark.line + 1}); YAML would keep the last one")
                keys[spelt] = key
                if not walk(value, here):
                    return False
                continue
            read = yaml.safe_load(yaml.serialize(key)) if isinstance(key, yaml.ScalarNode) else spelt
            hint = f" {YAML_BOOLEANS}" if isinstance(read, bool) else ""
            out.append(f"{where_of(here, key)}: YAML reads this key as "
                       f"{type(read).__name__} {read!r}, not a string{hint}; quote it ('{spelt}':)")
        return True

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, "")
    return out


def _config_text(path: str | Path) -> str:
    """The config file ``path`` (local path or storage URI) as text.

    Raises:
        FileNotFoundError: it does not exist.
        ValueError: it is a directory, or not UTF-8 (naming the line of the first bad byte)."""
    if "://" in str(path):  # e.g. s3://bucket/configs/nightly.yaml
        from ..core.storage import read_bytes

        try:
            raw = read_bytes(str(path))
        except FileNotFoundError:
            raise FileNotFoundError(f"config {path!r} does not exist") from None
    else:
        if Path(path).is_dir():
            raise ValueError(f"{path}: a directory, not a config file")
        raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}: not UTF-8 text (byte {raw[e.start]:#04x} at line {line}); "
                         "save the config as UTF-8") from None


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                base: dict[str, Any] | None = None) -> RunConfig:
    """Build a :class:`RunConfig` from an optional YAML file (local path or storage URI) plus
    dotted-key overrides.

    ``overrides`` maps dotted keys (``"sampling.num_drafts"``) to values; they win over the file.
    ``base`` is an inline config mapping used instead of a file.

    Raises:
        FileNotFoundError: the YAML file does not exist.
        ValueError: both ``path`` and ``base`` given; the file is a directory, not UTF-8, not
            valid YAML, holds what YAML reads other than written (:func:`_yaml_problems`: keys
            that are not strings or given twice, octal/hex integers, sets, alias bombs), or its
            top level is not a mapping.
        pydantic.ValidationError: a field is unknown or out of range (message names the field).
    """
    if path is not None and base is not None:
        raise ValueError("give either a config file or an inline config, not both")
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        text = _config_text(path)
        try:
            problems = _yaml_problems(text)
            data = {} if problems else yaml.safe_load(text)
        except yaml.YAMLError as e:  # a usage error (exit 2) naming the file, not a traceback
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ValueError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
        if problems:
            raise ValueError("\n".join(f"{path}: {line}" for line in problems))
        if data is None:  # an empty or comment-only file: the defaults
            data = {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: top level of a config file must be a mapping (got {type(data).__name__})")
    file_keys = frozenset(_dotted_keys(data)) if path is not None else frozenset()
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        node: dict[str, Any] = {}
        cur = node
        parts = key.split(".")
        for p in parts[:-1]:
            cur[p] = {}
            cur = cur[p]
        cur[parts[-1]] = value
        data = _deep_merge(data, node)
    cfg = validate_run_config(data)
    if path is not None:
        cfg._file = (str(path), file_keys)
    return cfg


def _dotted_keys(data: Any, prefix: str = "") -> set[str]:
    """Every dotted key path of a config mapping (``{"drafter": {"model": x}}`` ->
    ``{"drafter", "drafter.model"}``)."""
    out: set[str] = set()
    if isinstance(data, dict):
        for k, v in data.items():
            key = f"{prefix}{k}"
            out |= {key} | _dotted_keys(v, key + ".")
    return out


def validate_run_config(data: dict[str, Any]) -> RunConfig:
    """``RunConfig.model_validate(data)``, reporting every error at once: an unknown top-level
    key stops pydantic before the sections are validated (``_Strict._known_keys``), so the
    sections' errors are collected from ``data`` without the unknown keys and raised with them
    (a file with ``bogus_top: 1`` and ``sampling.num_draft: 3`` names both).

    Raises:
        pydantic.ValidationError: every unknown top-level key (as ``_known_keys`` words it),
            then the other errors."""
    from pydantic import ValidationError

    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        top = RunConfig.unknown_keys(data) if isinstance(data, dict) else []
        if not top:
            raise
        try:
            RunConfig.model_validate({k: v for k, v in data.items() if k not in top})
            rest = []
        except ValidationError as e2:
            rest = e2.errors()
        lines = [{"type": "value_error", "loc": (), "input": data,
                  "ctx": {"error": ValueError(RunConfig.unknown_key_message(k))}} for k in top]
        lines += [{k: x[k] for k in ("type", "loc", "input", "ctx") if k in x} for x in rest]
        try:
            combined = ValidationError.from_exception_data(e.title, lines)
        except (KeyError, TypeError, ValueError):  # an error type pydantic cannot rebuild: the first error
            raise e from None
        raise combined from None


def flow_config(config: RunConfig | dict | str | Path | None) -> dict | None:
    """The run config as :func:`specrag_batch.run.orchestration.speculative_rag_flow` receives it (a JSON-able dict, the flow
    run's parameter): a YAML path is loaded (:func:`load_config`), a :class:`RunConfig`
    becomes the fields set in it (a file's keys, arguments; ``model_dump(exclude_unset=True)``),
    as a deployment's parameters are, so the flow's warnings on settings that change nothing
    (:meth:`RunConfig.idle_settings`) see what was asked for; validating it fills the defaults
    in again, to the same config and hash. A dict or None is passed on as it is.

    Raises:
        as :func:`load_config` for a path (missing file, bad YAML, invalid config)."""
    if isinstance(config, (str, Path)):
        config = load_config(config)
    if isinstance(config, RunConfig):
        return config.model_dump(mode="json", exclude_unset=True)
    return config
