"""specrag-batch: batch Speculative RAG (Wang et al. 2024, arXiv 2407.08223).

What users call, importable from the package itself (each loaded on first use, so that
``import specrag_batch`` stays light and Prefect starts only when a run does):

* :func:`run_batch` - a run over Parquet shards (the Prefect flow), returning its manifest;
  :class:`RunConfig`, :func:`load_config` - its configuration; :class:`ExecutionConfig` - where
  its shards run (threads or Ray);
* :func:`nightly_flow`, :func:`backfill_flow`, :func:`claim_verification_flow`,
  :func:`drafter_training_flow` - the scheduled and offline flows (``prefect.yaml``);
* :func:`build_index`, :func:`get_retriever` - a corpus index and searching it;
* :func:`load_rows`, :func:`write_report` - a finished run's rows and its report.

The parts live in subpackages named for the domain (ARCHITECTURE.md): ``core``, ``config``,
``engines``, ``index``, ``confidence``, ``stages``, ``run``, ``cli``, ``drafter_training``.
"""

from .core import moved as _moved
from .core import quiet as _quiet

_moved.install()  # old import paths (specrag_batch.storage, ...) resolve to their new modules

_quiet.apply_default()  # telemetry off before any flow run starts Prefect's server (SPECRAG_TELEMETRY=1 keeps it)
_quiet.silence_benign()

from .config import RunConfig, load_config  # noqa: E402

__version__ = "0.1.0"
__all__ = ["ExecutionConfig", "RunConfig", "backfill_flow", "build_index", "claim_verification_flow",
           "drafter_training_flow", "get_retriever", "load_config", "load_rows", "nightly_flow", "run_batch",
           "write_report", "__version__"]

_LAZY = {"ExecutionConfig": "config.execution", "nightly_flow": "run.scheduled.nightly",
         "backfill_flow": "run.scheduled.backfill", "claim_verification_flow": "run.claim_verification",
         "drafter_training_flow": "drafter_training.flow", "build_index": "index.build",
         "get_retriever": "index.search", "load_rows": "run.results", "write_report": "run.report.publish"}
"""Public name -> the module (below the package) it is imported from on first use."""


def __getattr__(name: str):
    """The public names of :data:`_LAZY`, imported on first use.

    Raises:
        AttributeError: a name the package does not have."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_batch(input_uri: str, output_uri: str, *, config=None, execution=None,
              run_id: str | None = None, overwrite: bool = False, allow_empty: bool = False) -> dict:
    """Run the pipeline over ``input_uri`` into ``output_uri``; returns the run manifest.

    See :func:`specrag_batch.run.orchestration.run_batch` (imported on first call: Prefect is
    loaded only when a run starts)."""
    from .run.orchestration import run_batch as _run

    return _run(input_uri, output_uri, config=config, execution=execution, run_id=run_id,
                overwrite=overwrite, allow_empty=allow_empty)
