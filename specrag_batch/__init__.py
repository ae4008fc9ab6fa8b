"""specrag-batch: batch Speculative RAG (Wang et al. 2024, arXiv 2407.08223).

Public API: :func:`run_batch` (the Prefect flow), :class:`RunConfig`, :func:`load_config`.
"""

from .core import moved as _moved
from .core import quiet as _quiet

_moved.install()  # old import paths (specrag_batch.storage, ...) resolve to their new modules

_quiet.apply_default()  # telemetry off before any flow run starts Prefect's server (SPECRAG_TELEMETRY=1 keeps it)
_quiet.silence_benign()

from .config import RunConfig, load_config  # noqa: E402

__version__ = "0.1.0"
__all__ = ["RunConfig", "load_config", "run_batch", "__version__"]


def run_batch(input_uri: str, output_uri: str, *, config=None, execution=None,
              run_id: str | None = None, overwrite: bool = False, allow_empty: bool = False) -> dict:
    """Run the pipeline over ``input_uri`` into ``output_uri``; returns the run manifest.

    See :func:`specrag_batch.run.orchestration.run_batch` (imported on first call: Prefect is
    loaded only when a run starts)."""
    from .run.orchestration import run_batch as _run

    return _run(input_uri, output_uri, config=config, execution=execution, run_id=run_id,
                overwrite=overwrite, allow_empty=allow_empty)
