"""The parts every config section shares: :class:`Section` (strict keys, booleans only where
meant, the hash factors beside the fields) and the names the sections and :class:`RunConfig` use."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator



Mode = Literal["speculative", "standard"]
TauTask = Literal["qa", "claim", "choice"]
"""The tasks a per-task ``selection.tau_min`` mapping may name (``schema.TASKS``)."""

DEFAULT_CLAIM_LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO"]
YAML_BOOLEANS = "(YAML reads true/false, yes/no and on/off as booleans)"
REFLECTION_QUESTION = "Do you think the explanation supports the answers? (Yes or No)"


class Section(BaseModel):
    """A config section: a strict pydantic model (unknown keys refused with a did-you-mean, booleans
    only where meant) that declares beside its fields how they enter the config hash
    (:mod:`specrag_batch.config.hashing`):

    * ``hash_added``: (field, value before the field existed) of fields added after 0.1, left out
      of the hash at that value so a run started before them resumes under the same hash;
    * ``hash_switched``: (field, boolean switch of the same section) of fields read only while
      the switch is on, left out of the hash while it is off;
    * ``hashed``: False for a section that changes no row (left out of the hash whatever its
      values)."""

    hash_added: ClassVar[tuple[tuple[str, Any], ...]] = ()
    hash_switched: ClassVar[tuple[tuple[str, str], ...]] = ()
    hashed: ClassVar[bool] = True

    model_config = ConfigDict(extra="forbid", frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        """Refuse an unknown key naming the closest known one (``num_draft`` -> ``num_drafts``).

        Raises:
            ValueError: a key that is not a field of this section."""
        if isinstance(data, dict) and (unknown := cls.unknown_keys(data)):
            raise ValueError(cls.unknown_key_message(unknown[0]))
        return data

    @classmethod
    def unknown_keys(cls, data: dict) -> list[str]:
        """The keys of mapping ``data`` that are not fields of this section, in order."""
        return [k for k in data if isinstance(k, str) and k not in cls.model_fields]

    @classmethod
    def unknown_key_message(cls, key: str) -> str:
        """``unknown key 'num_draft'; did you mean 'num_drafts'?`` (or the known keys)."""
        near = difflib.get_close_matches(key, list(cls.model_fields), n=1)
        return f"unknown key {key!r}" + (f"; did you mean {near[0]!r}?" if near else
                                         f"; known keys: {', '.join(cls.model_fields)}")

    @field_validator("*", mode="before")
    @classmethod
    def _booleans_only_where_meant(cls, value: Any, info) -> Any:
        """Refuse a boolean for a number field: pydantic reads ``true`` as 1, so
        ``num_drafts: true`` (or YAML's ``yes``/``on``) ran with m = 1, silently.

        And the mirror case: a boolean field takes only a boolean (pydantic's lax mode read
        ``use_draft_score: 0`` or ``"off"`` as False).

        Raises:
            ValueError: ``value`` is a bool and the field's type is ``int`` or ``float`` (or
                either ``| None``), not also ``bool``; or the field's type is ``bool`` (or
                ``bool | None``) and ``value`` is neither a bool nor None."""
        ann = cls.model_fields[info.field_name].annotation
        members = typing.get_args(ann) if typing.get_origin(ann) in (typing.Union, types.UnionType) else (ann,)
        if isinstance(value, bool):
            if (int in members or float in members) and bool not in members:
                raise ValueError(f"a number is needed, got the boolean {value!r} {YAML_BOOLEANS}")
        elif bool in members and value is not None and not ({int, float, str, dict} & set(members)):
            raise ValueError(f"true or false is needed, got {value!r}")
        return value
