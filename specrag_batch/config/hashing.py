"""Which fields make a config's hash (:meth:`RunConfig.config_hash`), so that a run started
before a field existed resumes under the same hash, and how two stored configs differ. The
factors are declared by each section beside its fields (``hash_added``, ``hash_switched``,
``hashed``: :class:`~specrag_batch.config.base.Section`); this module collects them."""

from __future__ import annotations

import json

from .drafter import DrafterConfig
from .drift import DriftConfig
from .retrieval import RetrievalConfig
from .reuse import ReuseConfig
from .sampling import SamplingConfig
from .selection import SelectionConfig
from .verifier import VerifierConfig


def hashed_view(data: dict) -> dict:
    """The part of a config's JSON dump (``RunConfig.model_dump(mode="json")``, or the
    ``config`` a run's ``_run.json`` stored, possibly of an older version) that
    :meth:`RunConfig.config_hash` hashes: a copy without ``task`` when it is None, without
    :data:`SWITCHED_FIELDS` whose switch is off, without :data:`ADDED_FIELDS` at their
    value before they existed and without :data:`UNHASHED_SECTIONS`. Sections or keys the
    dump lacks are left absent."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    if data.get("task") is None:
        data.pop("task", None)
    for section in UNHASHED_SECTIONS:
        data.pop(section, None)
    sampling, selection = data.get("sampling"), data.get("selection")
    if isinstance(sampling, dict) and "adaptive" in sampling and sampling["adaptive"] is None:
        # left out: hashed as what RunConfig.adaptive_drafting resolves it to
        sel = selection if isinstance(selection, dict) else {}
        sampling["adaptive"] = bool(sel.get("consensus_enabled", True) and (
            sel.get("use_self_consistency", False) or sel.get("use_self_reflection", False)))
    for section, name, switch in SWITCHED_FIELDS:  # read before ADDED_FIELDS drops the switch
        if isinstance(data.get(section), dict) and not data[section].get(switch):
            data[section].pop(name, None)
    for section, name, before in ADDED_FIELDS:  # added after 0.1: no hash change at the old behaviour
        if isinstance(data.get(section), dict) and name in data[section] and data[section][name] == before:
            del data[section][name]
    return data


def dotted(d: dict, prefix: str = "") -> dict:
    """A nested config dump flattened to ``{"section.key": value}`` (an empty mapping is kept as
    a value)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(dotted(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_differences(stored: dict, current: dict, limit: int = 8) -> list[str]:
    """Dotted config keys whose hashed values (:func:`hashed_view`) differ between two
    config dumps, as ``"<key>: <stored> in the stored run, <current> here"`` (JSON values,
    ``absent`` where a dump lacks the key), sorted, at most ``limit`` (then ``"... and N
    more"``): why two configs hash differently (``resume.check_output``'s conflict message)."""
    a, b = dotted(hashed_view(stored)), dotted(hashed_view(current))
    absent = object()
    show = lambda v: "absent" if v is absent else json.dumps(v, sort_keys=True)  # noqa: E731
    keys = [k for k in sorted(a.keys() | b.keys()) if a.get(k, absent) != b.get(k, absent)]
    lines = [f"{k}: {show(a.get(k, absent))} in the stored run, {show(b.get(k, absent))} here" for k in keys[:limit]]
    return lines + ([f"... and {len(keys) - limit} more"] if len(keys) > limit else [])


SECTIONS = {"drafter": DrafterConfig, "verifier": VerifierConfig, "retrieval": RetrievalConfig,
            "sampling": SamplingConfig, "selection": SelectionConfig, "drift": DriftConfig, "reuse": ReuseConfig}
"""The sections of :class:`~specrag_batch.config.RunConfig` by key; each declares its hash factors
beside its fields (:class:`~specrag_batch.config.base.Section`)."""

ADDED_FIELDS = tuple((name, field, before) for name, section in SECTIONS.items()
                     for field, before in section.hash_added)
"""(section, field, value before the field existed) of fields added after 0.1: left out of
:meth:`RunConfig.config_hash` at that value, so a run started before they existed resumes under
the same hash. The value is what the code did before the field existed (its default when it was
added), not necessarily its default now: ``verifier.deduplicate_drafts`` came in at False and
is True by default since the decision benchmark measured it, yet stays ``False`` here. So a run
made before the field existed (it ran without deduplication) resumes only under a config that
sets ``deduplicate_drafts: false``; a config that leaves it out (now on) or sets it true hashes
with ``"deduplicate_drafts": true``, the same hash either way (configs/bench.yaml sets it
explicitly and kept its hash through the flip), and never resumes a run that ran without it
(its rows' ``verifier_drafts_deduplicated`` would be null on part of the output)."""


SWITCHED_FIELDS = tuple((name, field, switch) for name, section in SECTIONS.items()
                        for field, switch in section.hash_switched)
"""(section, field, switch) of fields read only while the boolean ``switch`` of the same
section is on: left out of :meth:`RunConfig.config_hash` whatever their value while it is off,
so a config with ``answer_on_truncation: false`` and any ``answer_max_tokens`` hashes as before
both fields existed (it behaves so)."""


UNHASHED_SECTIONS = tuple(name for name, section in SECTIONS.items() if not section.hashed)
"""Sections left out of :meth:`RunConfig.config_hash` whatever their values: they change no
row. ``drift`` (the night-over-night comparison's thresholds) is read after the run; in the
hash, a changed threshold would make every earlier night "another config hash" (no baseline)
and refuse to resume the night's own run. ``reuse`` (which earlier outputs rows are copied from)
changes no answer: a reused row equals the recomputed one."""
