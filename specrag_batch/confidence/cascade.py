"""Choosing the fallback share from labelled runs (issue 39 item 3): how many of the least
confident Speculative RAG rows ``selection.fallback: standard`` should answer again with
Standard RAG, for a target accuracy or a cost budget.

Given a labelled Speculative RAG run (``selection.fallback: none``) and a labelled Standard
RAG run over the same rows (joined on ``query_id``), the cascade that re-answers the rows
flagged ``low_confidence`` at τ_min takes Standard RAG's answer on exactly those rows, so its
accuracy at every τ_min can be read off the two runs without running it:

* the confidence is the one the run compared with τ_min
  (:func:`specrag_batch.confidence.calibration.used_confidence`, or the one asked for); rows are
  re-answered least-confident first: rows without a confidence, or flagged whatever τ is
  (:data:`specrag_batch.confidence.calibration.FORCED_LOW`), first, then by ascending confidence; under the
  log-probability measures fast-path rows are never flagged (never re-answered);
* a point of the *frontier* is one τ_min (a distinct confidence: rows below it are
  re-answered), its share of rows re-answered, the cascade's accuracy over the shared graded
  rows and its estimated seconds per row: the speculative run's seconds per row plus the share
  times the Standard RAG run's (each from its manifest; a re-answered row costs about one
  Standard RAG row); the two ends are Speculative RAG alone (share 0, fallback off) and
  Standard RAG alone (every row, its own seconds).

The Standard RAG run must answer as the fallback pass would: the fallback runs Standard RAG
with the speculative run's own retrieval, verifier model and settings, seed and labels
(:func:`standard_hash` compares them; drafter, sampling and selection do not change a Standard
RAG answer).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import yaml

from .calibration import MIN_KEPT_ROWS, PROBABILITIES, always_kept, graded_rows, measure_values
from .fit import CalibrationInputError
from ..core.records import ErrorReason

_NOT_STANDARD = (("drafter",), ("sampling",), ("selection",), ("chunk_rows",), ("mode",),
                 ("reflection_question",), ("retrieval", "fallback_top_n"),
                 ("verifier", "deduplicate_drafts"), ("verifier", "evidence_aware"))
"""Config keys a Standard RAG answer does not depend on (left out of :func:`standard_hash`)."""


def standard_view(config: dict) -> dict:
    """The part of a run config's JSON dump (its manifest's ``config``) that decides a Standard
    RAG answer, as the config hash sees it (:func:`specrag_batch.config.hashing.hashed_view`,
    without :data:`_NOT_STANDARD`).

    Raises:
        CalibrationInputError: the dump is empty (no config recorded) or does not validate."""
    from ..config import RunConfig
    from ..config.hashing import hashed_view

    if not config:
        raise CalibrationInputError("no run config recorded (_manifest.json or _run.json): cannot tell what it ran")
    try:
        data = hashed_view(RunConfig.model_validate(config).model_dump(mode="json"))
    except ValueError as e:
        raise CalibrationInputError(f"its run config cannot be read: {str(e).splitlines()[0]}") from None
    for path in _NOT_STANDARD:
        (data if len(path) == 1 else data.get(path[0]) or {}).pop(path[-1], None)
    return data


def standard_hash(config: dict) -> str:
    """sha256 (first 16 hex digits) of :func:`standard_view`: equal for a Standard RAG run and
    a Speculative RAG run whose ``fallback: standard`` pass would answer the same way."""
    return hashlib.sha256(json.dumps(standard_view(config), sort_keys=True).encode()).hexdigest()[:16]


def check_runs(spec_config: dict, std_config: dict, spec_name: str, std_name: str) -> None:
    """Refuse a pair of runs the frontier cannot be read from, in one line each.

    Raises:
        CalibrationInputError: a config missing or unreadable, the first run not Speculative
            RAG or already re-answering rows (``selection.fallback`` on), the second not
            Standard RAG, or the Standard RAG run's :func:`standard_hash` not the one the
            fallback would answer with (naming both hashes and the keys that differ)."""
    for name, cfg in ((spec_name, spec_config), (std_name, std_config)):
        try:
            standard_view(cfg)
        except CalibrationInputError as e:
            raise CalibrationInputError(f"{name}: {e}") from None
    from ..config import RunConfig

    if not RunConfig.model_validate(spec_config).uses_speculative:
        raise CalibrationInputError(f"{spec_name}: a run of mode {spec_config.get('mode')!r}; the run to "
                                    "calibrate must answer with Speculative RAG (all rows, or the tasks a per-task "
                                    "mode gives it; --fallback-run takes the Standard RAG run)")
    if std_config.get("mode") != "standard":
        raise CalibrationInputError(f"{std_name}: a run of mode {std_config.get('mode', 'speculative')!r}; "
                                    "--fallback-run takes a Standard RAG run (mode: standard) over the same rows")
    fallback = (spec_config.get("selection") or {}).get("fallback") or "none"
    if fallback != "none":
        raise CalibrationInputError(f"{spec_name}: selection.fallback is {fallback!r}, so its answers are already "
                                    "the cascade's; calibrate on a run with selection.fallback: none")
    a, b = standard_hash(spec_config), standard_hash(std_config)
    if a != b:
        from ..config.hashing import dotted

        fa, fb = dotted(standard_view(spec_config)), dotted(standard_view(std_config))
        keys = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
        raise CalibrationInputError(
            f"config hash mismatch: the Standard RAG run {std_name} answered under standard-answer hash {b}, "
            f"but the fallback of {spec_name} would answer under {a} (differs in: {', '.join(keys[:6])}"
            f"{', ...' if len(keys) > 6 else ''}); run Standard RAG with the speculative run's config and --mode standard")


@dataclass
class Point:
    """One point of the accuracy-cost frontier: ``kind`` ``speculative`` (fallback off),
    ``cascade`` or ``standard`` (Standard RAG alone); ``reanswered`` rows of the frontier's
    ``n`` (``share`` = reanswered / n, a fraction in [0, 1]); ``tau``: the τ_min that
    re-answers them (rows below it; in the confidence's unit; None at both ends);
    ``accuracy`` in [0, 1] over the shared graded rows; ``seconds``: estimated seconds per
    row (None when a run's manifest records none)."""

    kind: str
    reanswered: int
    share: float
    tau: float | None
    accuracy: float
    seconds: float | None


@dataclass
class Frontier:
    """The frontier (:func:`frontier`): ``points`` by share, Speculative RAG alone first and
    Standard RAG alone last; ``column``: the confidence (report column); ``n``: shared graded
    rows; ``tasks``: their tasks; ``spec_only`` / ``std_only``: graded rows of one run only
    (left out); ``spec_seconds`` / ``std_seconds``: each run's seconds per row or None;
    ``left_out``: tasks of graded rows of one run only (no τ_min is proposed for them)."""

    points: list[Point]
    column: str
    n: int
    tasks: list[str]
    spec_only: int
    std_only: int
    spec_seconds: float | None
    std_seconds: float | None
    left_out: list[str] = field(default_factory=list)

    @property
    def few_rows(self) -> str | None:
        """The warning when the frontier rests on fewer than
        :data:`specrag_batch.confidence.calibration.MIN_KEPT_ROWS` shared graded rows (as plain
        ``calibrate`` warns about a τ_min on a handful of rows), else None."""
        if self.n >= MIN_KEPT_ROWS:
            return None
        return (f"the frontier rests on {self.n} shared graded rows, fewer than {MIN_KEPT_ROWS}: its accuracies "
                "are not reliable estimates; calibrate on more labelled rows before relying on it")

    @property
    def left_out_note(self) -> str | None:
        """One line naming the tasks of :attr:`left_out`, else None."""
        if not self.left_out:
            return None
        return (f"task(s) {', '.join(self.left_out)}: graded in only one run, so left out of the snippet "
                "(no τ_min set for them)")


def check_unique(rows: pl.DataFrame, name: str) -> None:
    """Refuse a run (report rows, ``name`` as the message calls it) holding a ``query_id`` in
    more than one row: the runs are joined on ``query_id``, so a repeated id would count its
    rows twice. Not checked: null ids (they join nothing) and the rows ``run`` itself wrote
    for an input's repeated id (``error_reason`` ``duplicate_query_id``: unanswered, ungraded,
    beside the one row that carries the id's answer).

    Raises:
        CalibrationInputError: one line naming ``name``, the first duplicated id (sorted), its
            number of rows and how many other ids are duplicated."""
    keep = pl.col("query_id").is_not_null()
    if "error_reason" in rows.columns:
        keep &= pl.col("error_reason").fill_null("") != ErrorReason.DUPLICATE_QUERY_ID.value
    dup = (rows.filter(keep).group_by("query_id").len()
           .filter(pl.col("len") > 1).sort("query_id"))
    if dup.height:
        more = f" (and {dup.height - 1} other duplicated id(s))" if dup.height > 1 else ""
        raise CalibrationInputError(
            f"{name}: query_id {dup['query_id'][0]!r} appears in {dup['len'][0]} rows{more}; the runs are joined "
            "on query_id, so each run must hold a query once (were shards of two runs copied together?)")


def frontier(spec: pl.DataFrame, std: pl.DataFrame, *, column: str, spec_seconds: float | None = None,
             std_seconds: float | None = None) -> Frontier:
    """The accuracy-cost frontier of re-answering the least-confident rows of ``spec`` (report
    rows of the Speculative RAG run, with ``column``) with ``std``'s answers (report rows of the
    Standard RAG run), over the graded answered rows both hold (``query_id`` join).

    Args:
        column: ``score``, ``mean_logprob``, ``label_probability`` (the answer's probability
            under the label distribution) or ``confidence`` (the calibrated probability).
        spec_seconds, std_seconds: seconds per row of each run (None: unknown).

    Raises:
        CalibrationInputError: a run repeats a ``query_id`` (:func:`check_unique`), a run
            has no graded answered row (no gold), the runs share no graded row, or the speculative run has no ``column`` on any shared row (e.g.
            ``confidence`` of a run that did not use the calibrated confidence)."""
    check_unique(spec, "the speculative run")
    check_unique(std, "the Standard RAG run (--fallback-run)")
    g, h = graded_rows(spec), graded_rows(std)
    for rows, which in ((g, "the speculative run"), (h, "the Standard RAG run (--fallback-run)")):
        if rows.height == 0:
            raise CalibrationInputError(f"{which} has no answered row with a gold answer: the frontier needs two labelled runs")
    both = g.join(h.select("query_id", pl.col("correct").alias("_std_correct")), on="query_id", how="inner")
    if both.height == 0:
        raise CalibrationInputError(
            f"the runs share no graded row (query_id): the speculative run has {g.height} graded rows, the Standard "
            f"RAG run {h.height}; run both over the same input")
    conf = measure_values(both, column) if column in both.columns else np.full(both.height, np.nan)
    if column == "confidence" and not np.isfinite(conf).any():
        raise CalibrationInputError("the speculative run has no calibrated confidence (output column confidence): "
                                    "it did not run with selection.confidence: calibrated; choose --confidence score")
    if column == "label_probability" and not np.isfinite(conf).any():
        raise CalibrationInputError("the speculative run has no label probability (output column label_probability): "
                                    "it did not run with selection.label_distribution: true; choose --confidence score")
    always = always_kept(both, column)
    if "mode" in both.columns:  # a per-task mode: rows Standard RAG answered are its answers already
        always |= both["mode"].fill_null("speculative").to_numpy() == "standard"
    ok, alt = both["correct"].to_numpy().astype(bool), both["_std_correct"].to_numpy().astype(bool)
    n = both.height
    cost = (lambda share: spec_seconds + share * std_seconds) if None not in (spec_seconds, std_seconds) \
        else (lambda share: None)  # noqa: E731
    points = [Point("speculative", 0, 0.0, None, float(ok.mean()), spec_seconds)]
    eligible = ~always
    upper = 1.0 if column in PROBABILITIES else 0.0  # the largest τ_min the measure allows
    values = np.unique(conf[eligible & np.isfinite(conf)])
    taus = [float(v) for v in values] + ([upper] if not len(values) or values[-1] < upper else [])
    for tau in taus:
        redo = eligible & ~(np.isfinite(conf) & (conf >= tau))
        k = int(redo.sum())
        if k == 0:  # no row below τ and none flagged whatever τ is: Speculative RAG alone
            continue
        points.append(Point("cascade", k, k / n, tau, float(np.where(redo, alt, ok).mean()), cost(k / n)))
    points.append(Point("standard", n, 1.0, None, float(alt.mean()), std_seconds))
    shared = sorted(both["task"].drop_nulls().unique().to_list())
    graded = set(g["task"].drop_nulls().to_list()) | set(h["task"].drop_nulls().to_list())
    return Frontier(points, column, n, shared, g.height - n, h.height - n, spec_seconds, std_seconds,
                    sorted(graded - set(shared)))


def choose(f: Frontier, *, target_accuracy: float | None = None, budget_share: float | None = None,
           budget_seconds: float | None = None) -> Point | None:
    """The point of ``f`` (Speculative RAG alone or a cascade, never Standard RAG alone) meeting
    exactly one target: ``target_accuracy`` (a fraction) at the least cost (seconds when known,
    else share; ties: the higher accuracy), or the highest accuracy within ``budget_share`` (a
    fraction of rows re-answered) or ``budget_seconds`` (seconds per row); ties: the cheaper.
    None when no point meets it.

    Raises:
        ValueError: not exactly one target, or ``budget_seconds`` without seconds in ``f``."""
    if sum(v is not None for v in (target_accuracy, budget_share, budget_seconds)) != 1:
        raise ValueError("give exactly one of --target-accuracy, --budget-share and --budget-seconds")
    if budget_seconds is not None and (f.spec_seconds is None or f.std_seconds is None):
        raise ValueError("--budget-seconds: a run's manifest records no seconds per row; give --budget-share")
    pts = [p for p in f.points if p.kind != "standard"]
    price = (lambda p: (p.seconds, p.share)) if f.spec_seconds is not None and f.std_seconds is not None \
        else (lambda p: (p.share, p.share))  # noqa: E731
    if target_accuracy is not None:
        ok = [p for p in pts if p.accuracy >= target_accuracy - 1e-12]
        return min(ok, key=lambda p: (price(p), -p.accuracy)) if ok else None
    if budget_share is not None:
        ok = [p for p in pts if p.share <= budget_share + 1e-12]
    else:
        ok = [p for p in pts if p.seconds <= budget_seconds + 1e-9]
    return max(ok, key=lambda p: (p.accuracy, [-x for x in price(p)])) if ok else None


def table_points(f: Frontier, steps: int = 10, chosen: Point | None = None) -> list[Point]:
    """Points of ``f`` to print: at each share 0, 1/steps, ..., 1 the point re-answering the
    most rows without exceeding it, then Standard RAG alone, with ``chosen`` included; each
    point once, by share."""
    pts = [p for p in f.points if p.kind != "standard"]
    out = []
    for i in range(steps + 1):
        below = [p for p in pts if p.share <= i / steps + 1e-12]
        if below and below[-1] not in out:
            out.append(below[-1])
    if chosen is not None and chosen not in out:
        out.append(chosen)
    return sorted(out, key=lambda p: (p.share, p.kind != "speculative")) + [f.points[-1]]


def snippet(f: Frontier, point: Point, config: dict, header: str = "") -> str:
    """The config snippet of ``point``: ``selection.fallback: standard`` and
    ``selection.tau_min`` (the point's τ for each task of the shared rows) under the
    confidence of ``f`` (``selection.confidence``; with the run config's ``calibration`` when
    it is the calibrated one), or ``fallback: none`` for Speculative RAG alone; comments say
    what the point gives, and carry :attr:`Frontier.few_rows` (``# WARNING``) and
    :attr:`Frontier.left_out_note`.

    Raises:
        CalibrationInputError: ``point.tau`` cannot be a threshold on the confidence (a
            positive log-probability: another writer's scores)."""
    from ..config.calibration_model import check_tau

    measure = "calibrated" if f.column == "confidence" else f.column
    seconds = "" if point.seconds is None else f", about {point.seconds:.3g} s/row"
    std = f.points[-1]
    note = (f"re-answers {point.reanswered} of {f.n} shared labelled rows ({point.share:.1%}) with Standard RAG: "
            f"accuracy {point.accuracy:.3f}{seconds} (Speculative RAG alone {f.points[0].accuracy:.3f}, "
            f"Standard RAG alone {std.accuracy:.3f})")
    if point.kind == "speculative":
        body = {"selection": {"fallback": "none"}}
        note = f"no row re-answered: Speculative RAG alone meets it (accuracy {point.accuracy:.3f}{seconds})"
    else:
        if (why := check_tau(point.tau, measure)) is not None:
            raise CalibrationInputError(f"τ_min {point.tau}: {why}")
        sel = {"confidence": measure}
        if measure == "calibrated":
            sel["calibration"] = (config.get("selection") or {}).get("calibration")
        if measure == "label_probability":  # the run's label distribution, as it ran
            sel["label_distribution"] = True
            sel["label_prior"] = (config.get("selection") or {}).get("label_prior") or "none"
        body = {"selection": {**sel, "tau_min": {t: point.tau for t in f.tasks}, "fallback": "standard"}}
    lines = [*header.splitlines(), note]
    if f.few_rows:
        lines.append(f"WARNING {f.few_rows}")
    if f.left_out_note:
        lines.append(f.left_out_note)
    return "".join(f"# {line}\n" for line in lines) + yaml.safe_dump(body, sort_keys=False)


def seconds_per_row(cost_output: dict | None) -> float | None:
    """Seconds per row of a run from its manifest's output cost (``cost.output``:
    ``shard_seconds`` over ``rows``); None when either is missing, zero or not finite."""
    if not cost_output:
        return None
    s, rows = cost_output.get("shard_seconds"), cost_output.get("rows")
    if not isinstance(s, (int, float)) or not isinstance(rows, (int, float)) or rows <= 0 or s <= 0 \
            or not math.isfinite(s):
        return None
    return float(s) / float(rows)
