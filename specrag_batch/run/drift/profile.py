"""A run's profile (``<output>/_report/profile.json``): what a night-over-night comparison
(:mod:`specrag_batch.run.drift.compare`) reads of a run, written beside ``summary.json`` by
:func:`specrag_batch.run.report.write_report`, local or ``s3://`` alike.

* ``rates``: measure -> ``{"k": count, "n": of how many}``: ``low_confidence_rate`` and
  ``fast_path_rate`` (of answered rows), ``error_rate`` (of rows), ``accuracy:<task>`` (correct
  of graded rows, where gold exists).
* ``shares``: family -> ``{"n": of how many, "counts": {value: count}}``: ``error_reason`` (of
  rows), ``answer_source`` (of answered rows); the comparison takes every value tonight or the
  baseline has as one rate (a reason that appears tonight is compared with zero).
* ``mixes``: ``answers:<task>`` -> answers per value, for the label tasks (claim, choice);
  answers outside the claim labels count as ``(not a label)``.
* ``distributions``: ``score:<task>`` (the selected log ρ), ``confidence:<task>`` (the calibrated
  probability, where the run wrote it), ``answer_length:qa`` (characters) and ``draft_tokens`` (the selected
  draft's drafter tokens of β and α: its rationale's length, mostly),
  each ``{"n", "mean", "quantiles": {q: value}, "sample": [values]}``; ``sample`` holds every value,
  or :data:`SAMPLE_SIZE` drawn with a fixed seed.
* ``per_row``: ``seconds_per_row`` (the output's shard task seconds over its rows),
  ``tokens_per_row:<model>:prompt`` / ``:generated``, ``engine_seconds_per_row:<model>``.

Rows reused from an earlier run (``answer_source: reused``, :mod:`specrag_batch.run.reuse`): the
row measures (rates, shares, mixes, distributions) take every answered row, reused ones
included (a reused row is what recomputing it writes; in ``answer_source`` it counts under
the pass that answered it, ``reused_answer_source``); the ``per_row`` costs take the computed
rows only (output rows less ``rows_reused``; none when every row was reused), so a night that
reused much is not a cost drop. ``rows_reused``: the manifest's ``reuse.rows``.
"""

from __future__ import annotations

import hashlib
import json
import math

import polars as pl

from ...confidence import calibration
from ...config import hashed_view
from ...core.redaction import redact_text
from ..results import RunData

PROFILE_VERSION = 1
PROFILE_FILE = "profile.json"
SAMPLE_SIZE = 2000
"""Most values a distribution keeps for the two-sample test (drawn with seed 0 beyond it)."""
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
LABEL_TASKS = ("claim", "choice")
NOT_A_LABEL = "(not a label)"


def config_hash_of(config: dict) -> str | None:
    """The config hash (:meth:`RunConfig.config_hash`) of a stored config dump (a manifest's
    or ``_run.json``'s ``config``), computed from the dump as it is (:func:`hashed_view`), so an
    older run's config is hashed as it was; None for an empty dump."""
    if not config:
        return None
    return hashlib.sha256(json.dumps(hashed_view(config), sort_keys=True).encode()).hexdigest()[:16]


def _distribution(values: pl.Series) -> dict | None:
    """``{"n", "mean", "quantiles", "sample"}`` of the finite values of ``values`` (None when
    there is none)."""
    v = values.cast(pl.Float64).drop_nulls()
    v = v.filter(v.is_finite())
    if not v.len():
        return None
    sample = v if v.len() <= SAMPLE_SIZE else v.sample(SAMPLE_SIZE, seed=0)
    return {"n": v.len(), "mean": float(v.mean()),
            "quantiles": {str(q): float(v.quantile(q, "linear")) for q in QUANTILES},
            "sample": [float(x) for x in sample.sort().to_list()]}


def _counts(values: pl.Series) -> dict[str, int]:
    counts = values.value_counts(sort=True, name="n")
    return {str(k): int(n) for k, n in zip(counts[values.name].to_list(), counts["n"].to_list())}


def profile(data: RunData, s: dict) -> dict:
    """The profile (module docstring) of a run's rows ``data`` and its report summary ``s``
    (:func:`specrag_batch.run.report.summary`): a JSON-able dict with ``profile_version``,
    ``output`` (redacted), ``config_hash`` (the manifest's, else of the stored config; None without one),
    ``run_id``, ``rows``, ``answered`` and the measures."""
    df = data.rows
    ok = df.filter(pl.col("error").is_null() & pl.col("answer").is_not_null())
    n, answered = df.height, ok.height
    out: dict = {"profile_version": PROFILE_VERSION, "output": redact_text(data.prefix),
                 "config_hash": (data.manifest or {}).get("config_hash") or config_hash_of(data.config), "run_id": (data.manifest or {}).get("run_id"),
                 "rows": n, "answered": answered, "rates": {}, "shares": {}, "mixes": {},
                 "distributions": {}, "per_row": {}}
    out["rates"]["low_confidence_rate"] = {"k": int(ok["low_confidence"].fill_null(False).sum()), "n": answered}
    out["rates"]["fast_path_rate"] = {"k": int(ok["fast_path"].fill_null(False).sum()), "n": answered}
    out["rates"]["error_rate"] = {"k": s["errors"], "n": n}
    g = calibration.graded_rows(df)
    for task in calibration.tasks(g):
        t = g.filter(pl.col("task") == task)
        out["rates"][f"accuracy:{task}"] = {"k": int(t["correct"].sum()), "n": t.height}
    out["shares"]["error_reason"] = {"n": n, "counts": dict(s["errors_by_reason"])}
    if "answer_source" in df.columns and ok["answer_source"].drop_nulls().len():
        source = ok["answer_source"]  # a reused row counts under the pass that answered it
        if "reused_answer_source" in ok.columns:
            source = ok.select(pl.coalesce("reused_answer_source", "answer_source").alias("answer_source"))["answer_source"]
        out["shares"]["answer_source"] = {"n": answered, "counts": _counts(source.drop_nulls())}
    labels = set((data.config or {}).get("claim_labels") or [])
    for task in LABEL_TASKS:
        answers = ok.filter(pl.col("task") == task)["answer"]
        if task == "claim" and labels:
            answers = answers.map_elements(lambda a: a if a in labels else NOT_A_LABEL, return_dtype=pl.String)
        if answers.len():
            out["mixes"][f"answers:{task}"] = _counts(answers)
    dist = out["distributions"]
    for task in sorted(ok["task"].drop_nulls().unique().to_list()):
        t = ok.filter(pl.col("task") == task)
        for column in ("score", "confidence"):
            if column in t.columns and (d := _distribution(t[column])) is not None:
                dist[f"{column}:{task}"] = d
    if (d := _distribution(ok.filter(pl.col("task") == "qa")["answer"].str.len_chars())) is not None:
        dist["answer_length:qa"] = d
    if "draft_tokens" in ok.columns and (d := _distribution(ok["draft_tokens"])) is not None:
        dist["draft_tokens"] = d
    out["rows_reused"] = reused = int(((data.manifest or {}).get("reuse") or {}).get("rows") or 0)
    output_rows = (s.get("output_cost") or {}).get("rows") or n
    rows = max(0, output_rows - reused)  # the costs are per computed row
    if s.get("shard_seconds") is not None and rows:
        out["per_row"]["seconds_per_row"] = s["shard_seconds"] / rows
    for model, u in (s.get("tokens_per_row") or {}).items():
        for kind in ("prompt", "generated"):  # the summary's are per output row
            if u.get(kind) is not None and rows:
                out["per_row"][f"tokens_per_row:{model}:{kind}"] = u[kind] * output_rows / rows if reused else u[kind]
        if u.get("engine_seconds") and rows:
            out["per_row"][f"engine_seconds_per_row:{model}"] = u["engine_seconds"] / rows
    return out


MAX_COUNT = 10**9
"""Largest count a profile may hold (rows of one night); larger ones are refused when a
profile is read (:func:`check_profile`): no night has them, and exact tests overflow on them."""


class ProfileError(ValueError):
    """A profile (``profile.json``) of the wrong shape: ``str()`` is ``<field>: <what is wrong>``."""


def _shown(v) -> str:
    text = "null" if v is None else json.dumps(v) if isinstance(v, (str, list, dict)) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _count(v, field: str, at_most: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProfileError(f"{field}: expected a whole number, got {_shown(v)}")
    if not 0 <= v <= (MAX_COUNT if at_most is None else at_most):
        bound = f"its n ({at_most})" if at_most is not None else f"{MAX_COUNT:,}"
        raise ProfileError(f"{field}: expected a count from 0 to {bound}, got {_shown(v)}")
    return v


def _number(v, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ProfileError(f"{field}: expected a finite number, got {_shown(v)}")
    return v


def _object(v, field: str, what: str = "an object") -> dict:
    if not isinstance(v, dict):
        raise ProfileError(f"{field}: expected {what}, got {'a list' if isinstance(v, list) else _shown(v)}")
    return v


def _key(name: str) -> str:
    """A key of a profile as a field name shows it: one line (control characters escaped), at
    most 60 characters."""
    text = json.dumps(name, ensure_ascii=False)[1:-1]
    return text if len(text) <= 60 else text[:57] + "..."


def check_profile(p: dict) -> dict:
    """``p`` (a profile read from ``profile.json``, any JSON object) checked to hold what a
    comparison (:func:`specrag_batch.run.drift.compare.compare`) reads, in range: ``rates`` of count pairs
    ``{"k", "n"}`` (whole numbers, ``0 <= k <= n <= MAX_COUNT``), ``shares`` of ``{"n",
    "counts"}`` (each count <= n), ``mixes`` of label counts, ``distributions`` with a whole
    ``n``, finite ``quantiles`` (``"0.5"`` among them when there is a sample) and a ``sample``
    of at most :data:`SAMPLE_SIZE` finite numbers, ``per_row`` of finite numbers >= 0, and a
    ``config_hash`` of one word or null. Returns ``p``.

    Raises:
        ProfileError: the first field that is wrong, as ``<field>: <what is wrong>``
            (``rates.error_rate: expected a count pair {"k", "n"}, got null``)."""
    h = p.get("config_hash")
    if h is not None and not (isinstance(h, str) and len(h) <= 64 and h.isprintable() and not any(c.isspace() for c in h)):
        raise ProfileError(f"config_hash: expected a hash (a word of at most 64 characters), got {_shown(h)}")
    if "rates" not in p:
        raise ProfileError("rates: missing")
    for name, r in _object(p["rates"], "rates").items():
        r = _object(r, f"rates.{_key(name)}", 'a count pair {"k", "n"}')
        n = _count(r.get("n"), f"rates.{_key(name)}.n")
        _count(r.get("k"), f"rates.{_key(name)}.k", n)
    for family, s in _object(p.get("shares", {}), "shares").items():
        s = _object(s, f"shares.{_key(family)}", 'an object {"n", "counts"}')
        n = _count(s.get("n"), f"shares.{_key(family)}.n")
        for value, c in _object(s.get("counts"), f"shares.{_key(family)}.counts").items():
            _count(c, f"shares.{_key(family)}.counts.{_key(value)}", n)
    for name, m in _object(p.get("mixes", {}), "mixes").items():
        for label, c in _object(m, f"mixes.{_key(name)}", "label counts").items():
            _count(c, f"mixes.{_key(name)}.{_key(label)}")
    for name, d in _object(p.get("distributions", {}), "distributions").items():
        d = _object(d, f"distributions.{_key(name)}", 'an object {"n", "quantiles", "sample"}')
        _count(d.get("n"), f"distributions.{_key(name)}.n")
        sample = d.get("sample")
        if not isinstance(sample, list) or len(sample) > SAMPLE_SIZE:
            raise ProfileError(f"distributions.{_key(name)}.sample: expected a list of at most {SAMPLE_SIZE} numbers, "
                               f"got {_shown(sample) if not isinstance(sample, list) else f'{len(sample)} values'}")
        for i, x in enumerate(sample):
            _number(x, f"distributions.{_key(name)}.sample[{i}]")
        quantiles = _object(d.get("quantiles"), f"distributions.{_key(name)}.quantiles")
        for q, x in quantiles.items():
            _number(x, f"distributions.{_key(name)}.quantiles.{_key(q)}")
        if sample and "0.5" not in quantiles:
            raise ProfileError(f"distributions.{_key(name)}.quantiles: missing \"0.5\" (the median)")
    for name, v in _object(p.get("per_row", {}), "per_row").items():
        if _number(v, f"per_row.{_key(name)}") < 0:
            raise ProfileError(f"per_row.{_key(name)}: expected a number >= 0, got {_shown(v)}")
    return p
