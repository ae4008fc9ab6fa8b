"""The stages of Speculative RAG and Standard RAG, one module per stage: each holds the
stage's algorithm and its :class:`~specrag_batch.stages.base.Stage` class.

=================  =========================================================================
module             stage
=================  =========================================================================
``retrieval``      1, top-N documents per row, given or searched (:class:`Retrieval`)
``sampling``       2, multi-perspective sampling, paper §3.2 (:class:`MultiPerspectiveSampling`)
``drafting``       3, drafting, paper §3.2 (:class:`Drafting`, :class:`AdaptiveDrafting`);
                   Standard RAG's answer, paper §4 (:class:`StandardAnswer`)
``verification``   4, verification, paper §3.3 (:class:`Verification`)
``selection``      5, selection, paper §3.3 (:class:`Selection`)
``fallback``       6 (optional), low-confidence rows answered again (:class:`Fallback`)
=================  =========================================================================

The stage lists of each mode and the :class:`~specrag_batch.run.pipeline.Pipeline` that runs
them are in :mod:`specrag_batch.run.pipeline`.
"""

from .base import INPUT_FIELDS, EngineLike, RunInfo, Stage, StageContractError, StageTimer
from .drafting import AdaptiveDrafting, Drafting
from .standard import StandardAnswer
from .fallback import Fallback
from .retrieval import Retrieval, WiderRetrieval
from .sampling import MultiPerspectiveSampling
from .selection import Selection
from .verification import Verification

__all__ = ["INPUT_FIELDS", "AdaptiveDrafting", "Drafting", "EngineLike", "Fallback",
           "MultiPerspectiveSampling", "Retrieval", "RunInfo", "Selection", "Stage",
           "StageContractError", "StageTimer", "StandardAnswer", "Verification", "WiderRetrieval"]


def __getattr__(name: str):
    """``output_record`` and ``output_row`` moved to :mod:`specrag_batch.run.output` (a row's
    output record is not a stage); the old names still resolve there, with a warning.

    Raises:
        AttributeError: any other unknown name."""
    if name in ("output_record", "output_row"):
        import importlib
        import warnings

        warnings.warn(f"specrag_batch.stages.{name} moved to specrag_batch.run.output.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("specrag_batch.run.output"), name)
    raise AttributeError(f"module 'specrag_batch.stages' has no attribute {name!r}")
