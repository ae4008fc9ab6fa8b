"""Choosing τ_min from a labelled run: risk-coverage, AUROC, and a threshold per task.

The paper (§3.3) ranks drafts by ρ and leaves the use of a low score open; this product flags
a row ``low_confidence`` when the selected draft's confidence is below ``selection.tau_min``
(:func:`specrag_batch.stages.selection.select`). Which value to use depends on the models, the task
and the measure, so it is read off a run with gold answers:

* a row is *kept* (not flagged) when its confidence is ≥ τ; consensus fast-path rows are
  always kept (the verifier was skipped on purpose, ``select`` never flags them); rows whose
  selection is flagged regardless of τ (``no_valid_draft``, ``selected_draft_missing_score``)
  or that have no confidence are never kept;
* *coverage* = kept rows / graded answered rows; *accuracy* = share of kept rows that are
  ``correct``; the risk-coverage curve is (coverage, accuracy) over every candidate τ (each
  distinct confidence value);
* ``target_accuracy`` a: the lowest τ (largest coverage) whose kept rows reach accuracy ≥ a;
  ``target_coverage`` q: the highest τ whose coverage is still ≥ q;
* the interval is a percentile bootstrap over rows (resampled with replacement, τ chosen again
  on each resample).

Confidence measures: ``score`` (log ρ, nats), ``mean_logprob`` (nats per token,
:func:`specrag_batch.stages.selection.mean_logprob`) and ``label_probability`` (a claim/choice
row's answer probability under its label distribution, ``selection.label_distribution``); their AUROC for telling correct from wrong rows
is :func:`auroc`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import yaml

from ..core.records import Flag

MEASURES = ("score", "mean_logprob", "label_probability")
PROBABILITIES = ("label_probability", "confidence")
"""Measures that are probabilities in [0, 1] (the others are natural-log probabilities, <= 0)."""
MIN_KEPT_ROWS = 10
"""Least kept rows (rows at or above τ_min, fast path included) a task's τ_min should rest on:
below it the accuracy at τ_min is a share of a handful of rows (1 of 1 is 100%), and
``calibrate`` warns in its output and in the config snippet (:attr:`TaskThreshold.few_rows`)."""
FORCED_LOW = (Flag.NO_VALID_DRAFT, Flag.SELECTED_DRAFT_MISSING_SCORE, Flag.NO_DRAFTS)
"""Row flags with which ``select`` flags a row low-confidence whatever τ is."""


@dataclass
class Curve:
    """Risk-coverage curve: ``taus[i]`` keeps ``coverage[i]`` of the rows at ``accuracy[i]``
    (float arrays of equal length, one entry per distinct finite confidence; τ descending,
    in the confidence's unit; coverage ascending, a fraction in (0, 1]; accuracy in [0, 1]).
    ``n``: all rows the curve was built from, the denominator of ``coverage`` (rows with no
    finite confidence and fast-path rows included)."""

    taus: np.ndarray
    coverage: np.ndarray
    accuracy: np.ndarray
    n: int


def risk_coverage(conf, correct, always=None) -> Curve:
    """Accuracy of the kept rows vs the share kept as τ moves over every distinct confidence.

    Args:
        conf: float array (n,), the row's confidence (log ρ in nats, or nats per token); NaN
            or ±inf = never kept.
        correct: bool array (n,).
        always: bool array (n,) of rows kept at any τ (fast path); default none.

    Returns:
        :class:`Curve` (empty arrays when no row outside ``always`` has a finite confidence)."""
    conf = np.asarray(conf, dtype=float)
    correct = np.asarray(correct, dtype=bool)
    always = np.zeros(len(conf), bool) if always is None else np.asarray(always, dtype=bool)
    n = len(conf)
    cand = ~always & np.isfinite(conf)
    order = np.argsort(-conf[cand], kind="stable")
    cs, cc = conf[cand][order], correct[cand][order]
    if len(cs) == 0:
        return Curve(np.array([]), np.array([]), np.array([]), n)
    last = np.r_[cs[1:] != cs[:-1], True]  # last row of each run of equal confidence
    kept = int(always.sum()) + np.arange(1, len(cs) + 1)[last]
    right = int(correct[always].sum()) + np.cumsum(cc)[last]
    return Curve(cs[last], kept / n, right / kept, n)


def check_target(value: float, name: str) -> float:
    """``value`` when it is a valid calibration target (an accuracy or a coverage, a share in
    (0, 1]); ``name`` is what the error calls it (an argument or a CLI flag).

    Raises:
        ValueError: ``value`` outside (0, 1], naming ``name``."""
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return value


def choose_tau(curve: Curve, target_accuracy: float | None = None,
               target_coverage: float | None = None) -> int | None:
    """Index into ``curve`` of the chosen τ, or None when no τ meets the target.

    Exactly one target: ``target_accuracy`` -> the largest coverage with accuracy ≥ it;
    ``target_coverage`` -> the highest τ with coverage ≥ it.

    Raises:
        ValueError: neither or both targets given, or a target outside (0, 1]."""
    if (target_accuracy is None) == (target_coverage is None):
        raise ValueError("give exactly one of target_accuracy and target_coverage")
    t = check_target(target_accuracy, "target_accuracy") if target_accuracy is not None else \
        check_target(target_coverage, "target_coverage")
    ok = curve.accuracy >= t - 1e-12 if target_accuracy is not None else curve.coverage >= t - 1e-12
    idx = np.flatnonzero(ok)
    if len(idx) == 0:
        return None
    return int(idx[-1] if target_accuracy is not None else idx[0])


def auroc(conf, correct) -> float | None:
    """Area under the ROC curve of ``conf`` as a score for ``correct`` (scikit-learn); None
    when a class is missing or no row has a finite confidence. 0.5 = no separation."""
    from sklearn.metrics import roc_auc_score

    conf = np.asarray(conf, dtype=float)
    correct = np.asarray(correct, dtype=bool)
    ok = np.isfinite(conf)
    if ok.sum() < 2 or len(set(correct[ok].tolist())) < 2:
        return None
    return float(roc_auc_score(correct[ok], conf[ok]))


@dataclass
class TaskThreshold:
    """τ_min chosen for one task (:func:`calibrate`): ``tau`` None when the target cannot be
    met on this data.

    ``measure``: ``score`` or ``mean_logprob`` (:data:`MEASURES`); ``n``: graded answered rows
    of the task; ``tau``: in the measure's unit (log ρ in nats, or nats per token);
    ``coverage``/``accuracy``: fractions in [0, 1] at ``tau``; ``interval``: 95% percentile
    bootstrap interval of τ (None when no resample met the target);
    ``bootstrap_unreachable``: resamples where the target was not met (all ``n_boot`` when
    ``tau`` is None); ``auroc``: :func:`auroc` per measure over the rows outside the fast
    path."""

    task: str
    measure: str
    n: int
    tau: float | None
    coverage: float | None
    accuracy: float | None
    interval: tuple[float, float] | None
    bootstrap_unreachable: int
    auroc: dict[str, float | None]
    fast_path: int = 0
    """Rows kept at any τ (fast path)."""
    scored: int = 0
    """Rows τ applies to that have a finite confidence (0: no row to threshold, τ is None)."""
    kept: int = 0
    """Rows kept at τ (coverage × n; 0 when τ is None)."""
    target: str = ""
    """The target as the user gave it (``accuracy >= 0.9``, ``coverage >= 0.5``)."""
    best: tuple[float, float, float] | None = None
    """When the target is not met: (accuracy, coverage, τ) of the curve's point nearest it (the
    highest accuracy, at its largest coverage; for a coverage target the largest coverage);
    None when the target is met or no row has a confidence."""

    @property
    def unmet(self) -> str | None:
        """The one line that says a target was not met and how close the data came, else None:
        ``"<task>: accuracy >= 0.9 not reached: best accuracy 0.72 at coverage 0.15 (τ_min -1.2), n=60"``."""
        if self.tau is not None:
            return None
        if self.best is None:
            return (f"{self.task}: {self.target or 'the target'} not reached: no row has a "
                    f"{self.measure} to threshold (n={self.n}, {self.fast_path} fast-path)")
        acc, cov, tau = self.best
        return (f"{self.task}: {self.target or 'the target'} not reached: best accuracy {acc:.3g} at "
                f"coverage {cov:.3g} (τ_min {tau:.4g}), n={self.n}")

    @property
    def few_rows(self) -> str | None:
        """The warning when τ rests on fewer than :data:`MIN_KEPT_ROWS` kept rows, else None:
        ``"<task>: τ_min rests on <kept> of <n> graded rows (coverage ...), fewer than 10; ..."``."""
        if self.tau is None or self.kept >= MIN_KEPT_ROWS:
            return None
        return (f"{self.task}: τ_min rests on {self.kept} of {self.n} graded rows (coverage "
                f"{self.coverage:.3g}), fewer than {MIN_KEPT_ROWS}: its accuracy is not a reliable "
                "estimate; calibrate on more labelled rows before relying on it")

    @property
    def no_ranking(self) -> str | None:
        """The warning when τ is set although its measure ranks right rows no higher than wrong
        ones (AUROC <= 0.5 outside the fast path: τ_min then flags rows about at random or worse),
        or when no AUROC can be read (every row outside the fast path is right, or every one
        wrong: nothing shows that τ_min separates them), else None."""
        a = self.auroc.get(self.measure)
        if self.tau is None:
            return None
        if a is None:
            return (f"{self.task}: {self.measure} has no AUROC here (the rows outside the fast path "
                    "are all right or all wrong): nothing shows τ_min separates right rows from "
                    "wrong ones; calibrate on labelled rows with both")
        if a > 0.5:
            return None
        return (f"{self.task}: {self.measure} ranks right rows no higher than wrong ones (AUROC {a:.3g}): "
                "τ_min flags rows about at random; do not route rows by it on data like this")


def calibrate_task(conf, correct, always, *, target_accuracy: float | None = None,
                   target_coverage: float | None = None, n_boot: int = 1000,
                   seed: int = 0) -> tuple[float | None, float | None, float | None,
                                           tuple[float, float] | None, int]:
    """(τ, coverage, accuracy, 95% bootstrap interval of τ, resamples where the target was not
    met) for one task's rows (arrays as in :func:`risk_coverage`); τ in the confidence's unit
    (log ρ in nats, or nats per token for ``mean_logprob``). All but the count are None when
    the target is not met on the full data.

    Raises:
        ValueError: bad targets (:func:`choose_tau`)."""
    conf, correct = np.asarray(conf, float), np.asarray(correct, bool)
    always = np.asarray(always, bool)
    curve = risk_coverage(conf, correct, always)
    i = choose_tau(curve, target_accuracy, target_coverage)
    if i is None:
        return None, None, None, None, n_boot
    rng = np.random.default_rng(seed)
    taus, missed = [], 0
    for _ in range(n_boot):
        s = rng.integers(0, len(conf), len(conf))
        c = risk_coverage(conf[s], correct[s], always[s])
        j = choose_tau(c, target_accuracy, target_coverage)
        if j is None:
            missed += 1
        else:
            taus.append(c.taus[j])
    interval = (float(np.percentile(taus, 2.5)), float(np.percentile(taus, 97.5))) if taus else None
    return float(curve.taus[i]), float(curve.coverage[i]), float(curve.accuracy[i]), interval, missed


def graded_rows(df: pl.DataFrame) -> pl.DataFrame:
    """Answered rows with a gold verdict (``error`` null, ``answer`` and ``correct`` not
    null), with boolean columns ``always`` (fast path) and ``forced_low`` (a flag of
    :data:`FORCED_LOW`).

    Raises:
        polars.exceptions.ColumnNotFoundError: ``df`` lacks ``error``, ``answer``,
            ``correct``, ``fast_path`` or ``flags``."""
    return (df.filter(pl.col("error").is_null() & pl.col("answer").is_not_null()
                      & pl.col("correct").is_not_null())
            .with_columns(always=pl.col("fast_path").fill_null(False),
                          forced_low=pl.col("flags").list.eval(pl.element().is_in(FORCED_LOW)).list.any()
                          .fill_null(False)))


def tasks(g: pl.DataFrame, *, config_tasks: bool = False) -> list[str]:
    """The tasks of :func:`graded_rows` ``g``, sorted (thresholds and accuracy are per task).
    ``config_tasks``: each must be one a config's per-task τ_min can name (qa, claim, choice),
    as a snippet written for it must load.

    Raises:
        ValueError: a graded row has a null task, or (``config_tasks``) another one (another
            writer's output), naming its ``query_id``."""
    from ..core.schema import TASKS

    checks = [(pl.col("task").is_null(), "null")]
    if config_tasks:
        checks.append((~pl.col("task").is_in(TASKS), "not qa, claim or choice"))
    for bad, what in checks:
        missing = g.filter(bad)
        if missing.height:
            qid = missing["query_id"][0] if "query_id" in missing.columns else None
            value = "" if what == "null" else f" ({missing['task'][0]!r})"
            raise ValueError(f"row (query_id={qid!r}): field 'task'{value}: {what} in {missing.height} graded "
                             "row(s); accuracy and τ_min are per task (qa, claim, choice)")
    return sorted(g["task"].unique().to_list())


def measure_values(g: pl.DataFrame, measure: str) -> np.ndarray:
    """The confidence ``measure`` of each row of :func:`graded_rows`: float64 array, shape
    (rows of ``g``,), natural-log units (nats, or nats per token), or a probability for the
    column ``confidence``; NaN = never kept (null, NaN, or a :data:`FORCED_LOW` row; every row
    when ``g`` has no such column, as rows written before it existed)."""
    if measure not in g.columns:
        return np.full(g.height, np.nan)
    v = g.select(pl.when(pl.col("forced_low")).then(None).otherwise(pl.col(measure))
                 .cast(pl.Float64).fill_nan(None)).to_series()
    return v.fill_null(float("nan")).to_numpy()


USED_LABELS = {"score": "selected score log ρ (nats; selection.confidence: score)",
               "mean_logprob": "selected draft's log-probability per token (nats; selection.confidence: mean_logprob)",
               "label_probability": "answer's probability under the label distribution (selection.confidence: label_probability)",
               "confidence": "calibrated probability of being right (output column confidence; "
                             "selection.confidence: calibrated)"}
"""Caption of each confidence a run can compare with τ_min (:func:`used_confidence`)."""


def used_confidence(config: dict | None) -> tuple[str, str]:
    """(column of the report rows, caption) of the confidence a run compared with τ_min: the
    output column ``confidence`` under ``selection.confidence: calibrated``, else the measure
    ``score`` or ``mean_logprob`` it names (``score`` when the config does not say: runs made
    before the field existed). ``config``: the run config's JSON dump (its manifest's)."""
    measure = ((config or {}).get("selection") or {}).get("confidence") or "score"
    column = "confidence" if measure == "calibrated" else measure
    return column, USED_LABELS.get(column, column)


def always_kept(g: pl.DataFrame, column: str) -> np.ndarray:
    """Rows of :func:`graded_rows` ``g`` kept at any τ_min when ``column`` is the confidence
    (bool, (rows,)): fast-path rows under the log-probability measures, none under the
    calibrated probability (``confidence``), which flags fast-path rows too."""
    if column in PROBABILITIES:  # applied to fast-path rows too
        return np.zeros(g.height, bool)
    return g["always"].to_numpy().astype(bool)


def check_log_scale(g: pl.DataFrame, column: str) -> None:
    """Refuse graded rows whose ``column`` (a log-probability: ``score``, ``mean_logprob``) is
    above 0: another writer's scores, from which no confidence can be read.

    Raises:
        ValueError: naming the first such row's ``query_id``, the field and how many rows."""
    if column not in g.columns or column in PROBABILITIES:
        return
    positive = g.filter(pl.col(column).cast(pl.Float64).is_finite() & (pl.col(column).cast(pl.Float64) > 0))
    if positive.height:
        raise ValueError(f"row (query_id={positive['query_id'][0]!r}): field '{column}': "
                         f"{positive[column][0]} > 0 in {positive.height} graded row(s); confidence "
                         "measures are natural-log probabilities (<= 0), so no confidence can be read from these")


def calibrate(df: pl.DataFrame, *, measure: str = "score", target_accuracy: float | None = None,
              target_coverage: float | None = None, n_boot: int = 1000,
              seed: int = 0) -> list[TaskThreshold]:
    """τ_min per task from output rows (``df`` from :func:`specrag_batch.run.report.load_rows`, with
    ``score`` and ``mean_logprob`` columns).

    A confidence above 0 is refused rather than a τ_min clamped to 0: both measures are
    natural-log probabilities (≤ 0), so such values are another writer's scores, and a clamped
    τ would keep rows the target did not choose (:class:`specrag_batch.config.SelectionConfig`
    refuses a positive ``tau_min`` for the same reason).

    Raises:
        ValueError: unknown measure, bad targets, no graded answered rows, a graded row
            without a task or with one not qa, claim or choice (:func:`tasks`), or a graded row whose ``measure`` is above 0
            (naming its ``query_id`` and the field)."""
    if measure not in MEASURES:
        raise ValueError(f"unknown confidence measure {measure!r} (expected {', '.join(MEASURES)} or calibrated)")
    choose_tau(Curve(np.array([]), np.array([]), np.array([]), 0), target_accuracy, target_coverage)
    g = graded_rows(df)
    if g.height == 0:
        raise ValueError("no answered rows with a gold answer: calibration needs a labelled run")
    check_log_scale(g, measure)
    target = f"accuracy >= {target_accuracy}" if target_accuracy is not None else f"coverage >= {target_coverage}"
    out = []
    for task in tasks(g, config_tasks=True):
        t = g.filter(pl.col("task") == task)
        correct, always = t["correct"].to_numpy(), always_kept(t, measure)
        conf = measure_values(t, measure)
        tau, cov, acc, interval, missed = calibrate_task(
            conf, correct, always, target_accuracy=target_accuracy,
            target_coverage=target_coverage, n_boot=n_boot, seed=seed)
        aur = {m: auroc(measure_values(t, m)[~always], correct[~always]) for m in MEASURES}
        out.append(TaskThreshold(task, measure, t.height, tau, cov, acc, interval, missed, aur,
                                 int(always.sum()), int((~always & np.isfinite(conf)).sum()),
                                 0 if cov is None else int(round(cov * t.height)), target,
                                 None if tau is not None else nearest_point(risk_coverage(conf, correct, always),
                                                                      target_accuracy is not None)))
    return out


def nearest_point(curve: Curve, by_accuracy: bool) -> tuple[float, float, float] | None:
    """(accuracy, coverage, τ) of the point of ``curve`` nearest an unmet target: the highest
    accuracy (the largest coverage among equals), or for a coverage target the largest coverage."""
    if len(curve.taus) == 0:
        return None
    key = np.lexsort((curve.coverage, curve.accuracy)) if by_accuracy else np.argsort(curve.coverage, kind="stable")
    i = int(key[-1])
    return float(curve.accuracy[i]), float(curve.coverage[i]), float(curve.taus[i])


def config_snippet(results: list[TaskThreshold], header: str = "") -> str:
    """YAML that :func:`specrag_batch.config.load_config` accepts: ``selection.confidence`` and
    ``selection.tau_min`` per task (tasks without a τ are left out, noted in a comment: the
    target was not met, or no row has a confidence to threshold, e.g. every graded row took
    the fast path). A τ resting on fewer than :data:`MIN_KEPT_ROWS` kept rows is written with
    a ``# WARNING`` comment (:attr:`TaskThreshold.few_rows`)."""
    taus = {r.task: r.tau for r in results if r.tau is not None}  # exact: a rounded τ may drop its row
    body = yaml.safe_dump({"selection": {"confidence": results[0].measure if results else "score",
                                         "tau_min": taus or None}}, sort_keys=False)
    notes = [f"# {r.task}: no row has a confidence to threshold (n={r.n}: {r.fast_path} fast-path, kept at "
             f"any τ; the others have no {r.measure}); left out, so its rows are never flagged"
             if r.scored == 0 else
             f"# {r.task}: target not met on this data ({r.unmet}); left out, so its rows are "
             "never flagged: set a value by hand"
             for r in results if r.tau is None]
    notes += [f"# WARNING {line}" for r in results for line in (r.few_rows, r.no_ranking) if line]
    return "".join(f"# {line}\n" for line in header.splitlines()) + "\n".join(notes) + \
        ("\n" if notes else "") + body
