"""Fitting the calibrated confidence (:mod:`specrag_batch.confidence.measures`) per task on a labelled
run, with the checks that refuse data no model should be fitted on, and the config snippet it
goes into (``selection.confidence: calibrated``, ``selection.calibration``).

The model is scikit-learn's L2 logistic regression on standardised features, its strength
``C`` chosen among :data:`CS` by cross-validated log-loss (``LogisticRegressionCV``, stratified
folds within the rows it is fitted on: a strong penalty on a small run, where 11 features
overfit); the standardisation is folded back into the coefficients, so the config holds one
weight per feature in the feature's own unit, an intercept, and the NaN fill values (the
training medians). Features that are NaN on more than half the rows of the task (a term
switched off) or constant on them are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .calibration import check_log_scale, tasks
from .measures import FEATURES, probability, row_features

CS = tuple(float(c) for c in np.logspace(-3, 1, 9))
"""Candidate inverse L2 strengths of the logistic regression (``LogisticRegressionCV``)."""
MIN_ROWS = 30
"""Least graded rows per task a model is fitted on."""
MIN_CLASS = 5
"""Least right and least wrong rows per task a model is fitted on."""


class CalibrationInputError(ValueError):
    """Data no model can be fitted on (no gold, one class, too few rows, constant signals);
    the message is one line naming the task and what is missing."""


@dataclass
class TaskModel:
    """A fitted model of one task: ``features`` (names of :data:`FEATURES`), ``coefficients``
    (log-odds per unit of each), ``intercept`` (log-odds), ``fill`` (value of a NaN feature),
    ``rows`` it was fitted on and their share right (``accuracy``), ``config_hash``: the
    scoring hash of the run (:meth:`RunConfig.scoring_hash`)."""

    task: str
    features: list[str]
    coefficients: list[float]
    intercept: float
    fill: list[float]
    rows: int
    accuracy: float
    config_hash: str

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Probabilities of being right, (rows,), for ``x`` (rows, len(FEATURES))."""
        return probability(x, self.features, self.coefficients, self.intercept, self.fill)

    def config(self) -> dict:
        """The ``selection.calibration.<task>`` mapping."""
        return {"features": self.features, "coefficients": [round(c, 6) for c in self.coefficients],
                "intercept": round(self.intercept, 6), "fill": [round(f, 6) for f in self.fill],
                "config_hash": self.config_hash, "rows": self.rows}


def feature_matrix(rows: pl.DataFrame) -> np.ndarray:
    """(rows, len(FEATURES)) float array of :func:`~specrag_batch.confidence.measures.row_features`."""
    cols = [c for c in ("drafts", "answer", "score", "fast_path") if c in rows.columns]
    return np.array([row_features(r) for r in rows.select(cols).iter_rows(named=True)]).reshape(-1, len(FEATURES))


def check_counts(correct: np.ndarray, task: str = "") -> None:
    """The documented minimums of a calibrated confidence, on a task's graded rows of the run
    (``correct``: (rows,) bool): at least :data:`MIN_ROWS` rows and :data:`MIN_CLASS` right
    and :data:`MIN_CLASS` wrong ones. The out-of-fold check (:func:`out_of_fold`) then chooses
    its folds so that any run meeting them can be checked.

    Raises:
        CalibrationInputError: one line naming the task and the run's counts."""
    y = np.asarray(correct, bool)
    n, right = len(y), int(y.sum())
    where = f"task {task!r}: " if task else ""
    counts = f"{n} graded rows ({right} right, {n - right} wrong)"
    if n < MIN_ROWS:
        raise CalibrationInputError(f"{where}{counts}, fewer than the {MIN_ROWS} a calibrated "
                                    "confidence is fitted on; calibrate on a larger labelled run")
    if min(right, n - right) < MIN_CLASS:
        raise CalibrationInputError(f"{where}{counts}: a model of being right needs at least {MIN_CLASS} "
                                    f"right and {MIN_CLASS} wrong rows")


def fit_task(x: np.ndarray, correct: np.ndarray, *, task: str = "", config_hash: str = "",
             checked: bool = True) -> TaskModel:
    """Fit one task's model on ``x`` (rows, len(FEATURES)) and ``correct`` (rows,) bool.

    ``checked``: apply :func:`check_counts` and refuse data with no usable feature (a whole
    run's task); :func:`out_of_fold` fits its training folds with ``checked=False``: the
    minimums hold for the run, not for each fold, and a fold without a usable feature gets the
    intercept-only model (its share right). The L2 strength is chosen from :data:`CS` by
    stratified cross-validation on log-loss (scikit-learn's ``LogisticRegressionCV``), so few or
    noisy rows give a flat model; a training fold with a class of fewer rows than folds is fitted
    at C = 1.

    Raises:
        CalibrationInputError: (``checked``) see :func:`check_counts`; no usable feature
            (every signal NaN or equal on every row)."""
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    x, y = np.asarray(x, float), np.asarray(correct, bool)
    n, right = len(y), int(y.sum())
    where = f"task {task!r}: " if task else ""
    if checked:
        check_counts(y, task)
    keep, fill = [], []
    for j, name in enumerate(FEATURES):
        col = x[:, j]
        ok = np.isfinite(col)
        if ok.sum() * 2 > n and np.ptp(col[ok]) > 1e-12:
            keep.append(j)
            fill.append(float(np.median(col[ok])))
    if not keep and checked:
        raise CalibrationInputError(f"{where}every signal (score, agreement, margin, ...) is equal or "
                                    f"missing on all {n} rows: nothing tells right from wrong rows")
    if not keep or right in (0, n):  # a training fold: its share right, as log-odds
        share = min(max(right / n, 1e-6), 1 - 1e-6) if n else 0.5
        return TaskModel(task, [], [], float(np.log(share / (1 - share))), [], n, right / n if n else 0.0, config_hash)
    sub = np.where(np.isfinite(x[:, keep]), x[:, keep], np.array(fill))
    mu, sd = sub.mean(axis=0), sub.std(axis=0)
    sd[sd == 0] = 1.0
    folds = max(2, min(5, right, n - right))  # stratified folds each holding a right and a wrong row
    if min(right, n - right) < folds:  # a training fold of the out-of-fold check with a class of 1 row
        lr = LogisticRegression(C=1.0, max_iter=2000).fit((sub - mu) / sd, y)
    else:
        lr = LogisticRegressionCV(Cs=list(CS), cv=folds, scoring="neg_log_loss", max_iter=2000).fit((sub - mu) / sd, y)
    w = lr.coef_[0] / sd
    b = float(lr.intercept_[0] - np.sum(lr.coef_[0] * mu / sd))
    return TaskModel(task, [FEATURES[j] for j in keep], [float(v) for v in w], b, fill, n,
                     right / n, config_hash)


def labelled(df: pl.DataFrame) -> pl.DataFrame:
    """Answered rows with a gold verdict; raises :class:`CalibrationInputError` when there
    are none (a run without gold)."""
    if "correct" not in df.columns or "answer" not in df.columns:
        raise CalibrationInputError("the run has no gold answers (no `correct` column): calibration "
                                    "needs a labelled run")
    g = df.filter(pl.col("answer").is_not_null() & pl.col("correct").is_not_null()
                  & (pl.col("error").is_null() if "error" in df.columns else pl.lit(True)))
    if g.height == 0:
        raise CalibrationInputError("no answered row has a gold answer: calibration needs a labelled run")
    return g


def fit(df: pl.DataFrame, config_hash: str) -> dict[str, TaskModel]:
    """One model per task of the labelled output rows ``df`` (report rows), fitted on all of
    them. Checks every task before fitting any (nothing is half-written).

    Raises:
        CalibrationInputError: see :func:`labelled` and :func:`fit_task`; a graded row whose
            ``score`` (log ρ) is above 0 (:func:`~specrag_batch.confidence.calibration.check_log_scale`), a graded row
            with a null task or one not qa, claim or choice (:func:`~specrag_batch.confidence.calibration.tasks`)."""
    g = labelled(df)
    try:
        check_log_scale(g, "score")
        names = tasks(g, config_tasks=True)  # a model per task the config can name
    except ValueError as e:
        raise CalibrationInputError(str(e)) from None
    return {task: fit_task(feature_matrix(t), t["correct"].to_numpy(), task=task, config_hash=config_hash)
            for task in names for t in [g.filter(pl.col("task") == task)]}


FOLDS = 5
"""Folds of the out-of-fold check (:func:`out_of_fold`), fewer when a class has fewer rows."""


def fold_count(correct: np.ndarray) -> int:
    """Folds of :func:`out_of_fold` for ``correct`` (rows,) bool: :data:`FOLDS`, or the rows
    of the smaller class when fewer (at least 2), so that every fold holds right and wrong rows
    and every run meeting :func:`check_counts` can be checked."""
    y = np.asarray(correct, bool)
    return max(2, min(FOLDS, int(y.sum()), int((~y).sum())))


def out_of_fold(x: np.ndarray, correct: np.ndarray, seed: int = 0) -> np.ndarray:
    """Probabilities of every row from a model fitted on the other folds (stratified K-fold by
    row, :func:`fold_count` folds; the training folds are not held to the run's minimums):
    what the confidence says of rows it was not fitted on. (rows,) float."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(correct, bool)
    p = np.full(len(y), np.nan)
    for tr, te in StratifiedKFold(fold_count(y), shuffle=True, random_state=seed).split(x, y):
        p[te] = fit_task(x[tr], y[tr], checked=False).predict(x[te])
    return p


def not_better(task: str, calibrated: float | None, t: pl.DataFrame) -> str | None:
    """The warning when the calibrated confidence's out-of-fold AUROC is not above that of the
    best plain measure (``calibration.MEASURES``: ``score``, ``mean_logprob``,
    ``label_probability``) on the same graded rows ``t`` of ``task``; None when it is above
    every one (or no plain measure has an AUROC). The line proposes that measure."""
    from .calibration import FORCED_LOW, MEASURES, auroc, measure_values

    if "forced_low" not in t.columns:  # rows selection flags whatever τ: no confidence (calibration.graded_rows)
        forced = pl.col("flags").list.eval(pl.element().is_in(FORCED_LOW)).list.any() if "flags" in t.columns else None
        t = t.with_columns(forced_low=pl.lit(False) if forced is None else forced.fill_null(False))
    y = t["correct"].to_numpy().astype(bool)
    plain = {m: a for m in MEASURES if (a := auroc(measure_values(t, m), y)) is not None}
    if not plain:
        return None
    best = max(plain, key=lambda m: plain[m])
    if calibrated is not None and calibrated > plain[best]:
        return None
    got = "no AUROC" if calibrated is None else f"out-of-fold AUROC {calibrated:.3f}"
    return (f"{task}: the calibrated confidence ({got}) ranks rows no better than the plain measure {best} "
            f"(AUROC {plain[best]:.3f} on the same rows): use selection.confidence: {best} "
            f"(`specrag-batch calibrate --confidence {best}`)")


def calibrate_run(df: pl.DataFrame, config: dict, *, target_accuracy: float | None = None,
                  target_coverage: float | None = None, header: str = "") -> tuple[str, list[str], list[str]]:
    """Models per task for a labelled run, τ_min on their probability for the target, and the
    config snippet (``selection.confidence: calibrated``, ``calibration``, ``tau_min``).

    Each task's model is fitted on all its graded rows; τ_min, the AUROC and the coverage and
    accuracy it gives are read from out-of-fold probabilities (:func:`out_of_fold`: each row's
    probability from a model not fitted on it), so they say what the model does on rows it has
    not seen, not on the rows it learnt.

    Args:
        df: the run's output rows (:func:`specrag_batch.run.report.load_rows`).
        config: the run's config dump (its manifest's ``config``): the models carry its
            :meth:`~specrag_batch.config.RunConfig.scoring_hash`.

    Returns:
        (the YAML snippet, one line per task: rows, accuracy, out-of-fold AUROC, and τ_min with
        the coverage and accuracy it gives or the target not reached with the best accuracy and
        its coverage, the warnings: τ_min resting on fewer than ``calibration.MIN_KEPT_ROWS``
        kept rows, a model ranking right rows no higher than wrong ones; also in the snippet as
        ``# WARNING`` comments).

    Raises:
        CalibrationInputError: no run config (an empty ``config``: which run the model belongs
            to is unknown), a config that does not load (naming the field), see :func:`fit`;
            ValueError: bad targets."""
    import yaml

    from .calibration import Curve, TaskThreshold, nearest_point, auroc, calibrate_task, choose_tau, risk_coverage
    from ..config import RunConfig

    choose_tau(Curve(np.array([]), np.array([]), np.array([]), 0), target_accuracy, target_coverage)
    if not config:
        raise CalibrationInputError("no run config recorded (_manifest.json or _run.json): a calibrated model "
                                    "is tied to the config of the run it is fitted on; calibrate the run's output "
                                    "prefix as the run wrote it")
    try:
        scoring = RunConfig.model_validate(config).scoring_hash()
    except ValueError as e:
        errs = getattr(e, "errors", lambda: [])()
        where = ".".join(str(x) for x in errs[0]["loc"]) + ": " + errs[0]["msg"] if errs else str(e).splitlines()[0]
        raise CalibrationInputError(f"the run's recorded config cannot be read: {where}") from None
    models = fit(df, scoring)
    g = labelled(df)
    target = f"accuracy >= {target_accuracy}" if target_accuracy is not None else f"coverage >= {target_coverage}"
    res: dict[str, TaskThreshold] = {}
    for task in models:
        t = g.filter(pl.col("task") == task)
        y = t["correct"].to_numpy().astype(bool)
        p = out_of_fold(feature_matrix(t), y)
        always = np.zeros(len(p), bool)
        tau, cov, acc, _, _ = calibrate_task(p, y, always, target_accuracy=target_accuracy,
                                             target_coverage=target_coverage, n_boot=1)
        res[task] = TaskThreshold(task, "calibrated", t.height, tau, cov, acc, None, 0, {"calibrated": auroc(p, y)},
                                  0, len(p), 0 if cov is None else int(round(cov * t.height)), target,
                                  None if tau is not None else nearest_point(risk_coverage(p, y, always),
                                                                        target_accuracy is not None))
    body = {"selection": {"confidence": "calibrated",
                          "calibration": {k: m.config() for k, m in models.items()},
                          "tau_min": {k: round(r.tau, 6) for k, r in res.items() if r.tau is not None} or None}}
    warnings = [w for r in res.values() for w in (r.few_rows, r.no_ranking) if w]
    warnings += [w for task, r in res.items() if (w := not_better(task, r.auroc["calibrated"], g.filter(pl.col("task") == task)))]
    notes = "".join(f"# {k}: target not met on out-of-fold probabilities; left out, never flagged\n"
                    for k, r in res.items() if r.tau is None) + "".join(f"# WARNING {w}\n" for w in warnings)
    text = "".join(f"# {line}\n" for line in header.splitlines()) + notes + yaml.safe_dump(body, sort_keys=False)
    a = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    folds = {k: fold_count(g.filter(pl.col("task") == k)["correct"].to_numpy().astype(bool)) for k in models}
    lines = [f"{k}: {m.rows} rows, accuracy {m.accuracy:.3f}, AUROC {a(res[k].auroc['calibrated'])} on rows "
             f"not fitted on ({folds[k]}-fold); " + (
                 f"τ_min {res[k].tau:.3f} keeps {res[k].coverage:.3f} of the rows at accuracy {res[k].accuracy:.3f}"
                 if res[k].tau is not None else res[k].unmet.split(": ", 1)[1]) for k, m in models.items()]
    return text, lines, warnings
