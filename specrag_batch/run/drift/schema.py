"""The schema of a night's stored comparison, ``_report/drift.json``
(:func:`specrag_batch.run.drift.watch.night_drift` writes it): checked before
``specrag-batch report`` renders it again (:func:`specrag_batch.run.drift.watch.restore_section`),
so a file of another shape is refused naming the field instead of rendered with wrong values."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, StringConstraints,
                      ValidationError, model_validator)

from ...core.redaction import redact_text

_Text = Annotated[StrictStr, StringConstraints(max_length=2000)]
"""A stored string the section shows: at most 2,000 characters (a report is no place for more)."""
_Finite = Annotated[StrictFloat, Field(allow_inf_nan=False)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Side(_Open):
    """One side of a stored measure: a rate (``rate``, ``k``, ``n``), label ``shares``, a
    ``median`` over ``n`` rows, or a ``value`` (:func:`drift.describe` shows the first present)."""

    rate: Optional[_Finite] = None
    k: Optional[StrictInt] = None
    n: Optional[StrictInt] = None
    shares: Optional[dict[_Text, _Finite]] = None
    median: Optional[_Finite] = None
    value: Optional[_Finite] = None

    @model_validator(mode="after")
    def _one_shape(self):
        if self.rate is not None:
            if self.k is None or self.n is None:
                raise ValueError("a rate needs its counts k and n")
        elif self.shares is None and self.median is None and "value" not in self.model_fields_set:
            raise ValueError("needs one of rate (with k, n), shares, median or value")
        return self


class _Measure(_Open):
    measure: _Text
    test: _Text
    tonight: _Side
    baseline: _Side
    p_value: Optional[Annotated[StrictFloat, Field(ge=0, le=1)]]
    effect: Optional[_Finite]
    effect_name: _Text
    threshold: _Finite
    moved: StrictBool
    fails: StrictBool


class StoredComparison(_Open):
    """The fields of a night's comparison (:func:`~.watch.night_drift`, stored as ``_report/drift.json``)
    that :func:`drift.markdown` renders or a reader of the file relies on, with strict types (the
    string ``"false"`` is no boolean), finite numbers, p-values in [0, 1] and strings of at most
    2,000 characters: ``date``, ``status`` (``compared`` only with baseline nights),
    ``baseline`` (night dates), ``notes``, ``reason``, ``error``, ``config_hash``, ``measures``
    (each ``measure``, ``test``, its ``tonight`` and ``baseline`` sides, ``p_value``, ``effect``,
    ``effect_name``, ``threshold``, ``moved``, ``fails``), ``moved`` and ``fails`` (measure
    names), ``excluded`` (``{date, reason}``). Other keys are allowed."""

    date: _Text
    status: Literal["compared", "no_baseline", "no_profile", "error"]
    reason: Optional[_Text] = None
    error: Optional[_Text] = None
    config_hash: Optional[_Text] = None
    baseline: list[_Text]
    notes: list[_Text] = []
    measures: list[_Measure]
    moved: list[_Text] = []
    fails: list[_Text] = []
    excluded: list[dict[_Text, _Text]] = []

    @model_validator(mode="after")
    def _compared_has_a_baseline(self):
        if self.status == "compared" and not self.baseline:
            raise ValueError("status 'compared' with no baseline night")
        return self


def stored_result(data: object, uri: str) -> dict:
    """A night's stored comparison checked against :class:`StoredComparison`, so a file of
    another shape is refused rather than rendered with wrong values. Returns ``data`` itself.

    Raises:
        ValueError: naming ``uri`` and the first field that is missing or of the wrong type
            (``measures.0.moved: Input should be a valid boolean``)."""
    try:
        StoredComparison.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "the file"
        raise ValueError(f"{redact_text(uri)}: not a drift comparison ({where}: {err['msg']})") from None
    return data
