"""Confidence and calibration, one home: the per-row confidence measures (:mod:`.measures`), the
calibrated confidence model fitted on gold rows (:mod:`.fit`), the choice of τ_min and the
AUROC / risk-coverage figures (:mod:`.calibration`), and the fallback share a low-confidence
cascade may send to the verifier (:mod:`.cascade`). The ``selection.calibration`` config part is
:mod:`specrag_batch.config.calibration_model`; the ``calibrate`` command is
:mod:`specrag_batch.cli.calibrate`.

The names of :mod:`.measures` are re-exported here (``specrag_batch.confidence`` was that module
before it became this package)."""

from .measures import FEATURES, answer_key, features, probability, row_features, selected_index

__all__ = ["FEATURES", "answer_key", "features", "probability", "row_features", "selected_index"]
